#include "sim/workload.h"

#include <algorithm>

namespace allot::sim {

void sort_jobs(Workload& w, bool renumber) {
  std::stable_sort(w.jobs.begin(), w.jobs.end(), [](const SimJob& a, const SimJob& b) {
    return a.submit != b.submit ? a.submit < b.submit : a.id < b.id;
  });
  if (renumber) {
    for (std::size_t i = 0; i < w.jobs.size(); ++i) w.jobs[i].id = i + 1;
  }
}

double demand_gpu_seconds(const Workload& w) {
  double total = 0;
  for (const SimJob& j : w.jobs) {
    const double gpus = j.gpu_milli < core::kWholeGpu
                            ? static_cast<double>(j.gpu_milli) / core::kWholeGpu
                            : static_cast<double>(j.gpus);
    total += gpus * static_cast<double>(j.duration);
  }
  return total;
}

}  // namespace allot::sim
