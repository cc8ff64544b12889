#include "sim/load_scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace allot::sim {

LoadInfo measure_load(const Workload& w, double capacity_gpus) {
  LoadInfo l;
  l.capacity_gpus = capacity_gpus;
  l.demand_gpu_seconds = demand_gpu_seconds(w);
  if (w.jobs.size() < 2) return l;
  const double last = static_cast<double>(w.jobs.size() - 1);
  l.window_from = w.jobs[static_cast<std::size_t>(std::floor(0.01 * last))].submit;
  l.window_to = w.jobs[static_cast<std::size_t>(std::ceil(0.99 * last))].submit;
  Workload in_window;
  for (const SimJob& j : w.jobs) {
    if (j.submit >= l.window_from && j.submit <= l.window_to) in_window.jobs.push_back(j);
  }
  l.window_demand_gpu_seconds = demand_gpu_seconds(in_window);
  l.span_seconds = static_cast<double>(l.window_to - l.window_from);
  if (l.span_seconds > 0 && capacity_gpus > 0) {
    l.ratio = l.window_demand_gpu_seconds / (capacity_gpus * l.span_seconds);
  }
  return l;
}

double scale_arrivals(Workload& w, double capacity_gpus, double target) {
  const LoadInfo l = measure_load(w, capacity_gpus);
  if (l.ratio <= 0 || target <= 0) return 1.0;
  const double factor = l.ratio / target;
  const core::Time first = w.jobs.front().submit;
  for (SimJob& j : w.jobs) {
    j.submit = first + static_cast<core::Time>(
                           std::llround(static_cast<double>(j.submit - first) * factor));
  }
  return factor;
}

std::string load_text(double ratio) {
  char b[32];
  std::snprintf(b, sizeof b, ratio > 0 && ratio < 0.1 ? "%.2g" : "%.2f", ratio);
  return b;
}

}  // namespace allot::sim
