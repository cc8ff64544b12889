#include "sim/load_scaling.h"

#include <algorithm>
#include <cmath>

namespace allot::sim {

LoadInfo measure_load(const Workload& w, double capacity_gpus) {
  LoadInfo l;
  l.capacity_gpus = capacity_gpus;
  l.demand_gpu_seconds = demand_gpu_seconds(w);
  if (w.jobs.size() >= 2) {
    l.span_seconds = static_cast<double>(w.jobs.back().submit - w.jobs.front().submit);
  }
  if (l.span_seconds > 0 && capacity_gpus > 0) {
    l.ratio = l.demand_gpu_seconds / (capacity_gpus * l.span_seconds);
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

}  // namespace allot::sim
