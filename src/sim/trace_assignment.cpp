#include "sim/trace_assignment.h"

#include <cmath>
#include <map>

#include "sim/rng.h"

namespace allot::sim {

void assign_missing(Workload& w, const AssignmentModel& m) {
  for (SimJob& j : w.jobs) {
    Rng rng(mix_seed(m.seed, j.id));
    // Draw every variable whether or not it is used, so that one field set in the input does not
    // shift the others' values.
    const double u_unallocated = rng.uniform();
    const double min_runtime = rng.log_uniform(static_cast<double>(m.min_runtime_lo),
                                               static_cast<double>(m.min_runtime_hi));
    const double u_resumable = rng.uniform();
    const double u_priority = rng.uniform();
    if (!j.kind) {
      const bool debug = j.duration <= m.debug_max_duration && j.gpus <= m.debug_max_gpus;
      j.kind = debug ? core::JobKind::Debug : core::JobKind::Batch;
    }
    const bool debug = *j.kind == core::JobKind::Debug;
    if (!j.min_runtime) {
      if (debug) {
        j.min_runtime = m.debug_min_runtime;
      } else if (u_unallocated < m.unallocated_fraction) {
        j.min_runtime = 0;
      } else {
        // Whole minutes, so reports read well.
        j.min_runtime = static_cast<core::Duration>(std::llround(min_runtime / 60.0)) * 60;
      }
    }
    if (!j.resumable) j.resumable = !debug && u_resumable < m.resumable_fraction;
    if (!j.priority) {
      j.priority = u_priority < m.high_priority_fraction ? core::Priority::High
                   : u_priority < m.high_priority_fraction + m.low_priority_fraction
                       ? core::Priority::Low
                       : core::Priority::Normal;
    }
  }
}

BudgetConfig budgets_by_demand(const Workload& w) {
  std::map<std::string, double> demand;  // path -> GPU-seconds, for every prefix
  for (const SimJob& j : w.jobs) {
    const double g = j.gpu_milli < core::kWholeGpu ? j.gpu_milli / 1000.0 : j.gpus;
    const double gs = std::max(1.0, g * static_cast<double>(j.duration));
    for (std::size_t pos = j.budget.find('/', 1);; pos = j.budget.find('/', pos + 1)) {
      demand[j.budget.substr(0, pos)] += gs;
      if (pos == std::string::npos) break;
    }
  }
  // std::map orders "/a" before "/a/b": parents come before children.
  BudgetConfig c;
  for (const auto& [path, gs] : demand) c.budgets.push_back(BudgetEntry{path, gs / 3600.0});
  return c;
}

}  // namespace allot::sim
