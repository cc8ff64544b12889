// Traces say when a job came, how big it was and how long it ran, but not what a user of allot
// would have declared. These seeded models fill in what is missing; each job draws from its own
// random stream (seed, job id), so a job's draw does not depend on the other jobs.
#pragma once

#include <cstdint>

#include "sim/budget_config.h"
#include "sim/workload.h"

namespace allot::sim {

struct AssignmentModel {
  std::uint64_t seed = 1;
  // Debug: short, small jobs (a user iterating on code).
  core::Duration debug_max_duration = 15 * core::kMinute;
  int debug_max_gpus = 2;
  core::Duration debug_min_runtime = 10 * core::kMinute;
  // Everything else: minimum runtime 0 (unallocated, opportunistic) with this probability,
  // otherwise log-uniform between lo and hi (hi is clamped to the policy's maximum at submit).
  double unallocated_fraction = 0.1;
  core::Duration min_runtime_lo = 30 * core::kMinute;
  core::Duration min_runtime_hi = 8 * core::kHour;
  double resumable_fraction = 0.8;  // of non-debug jobs; debug jobs are not resumable
  // Declared priorities (they only order work within a budget, except under `priority`).
  double high_priority_fraction = 0.2;
  double low_priority_fraction = 0.1;
};

// Fills every unset kind, minimum runtime, resumable flag and priority.
void assign_missing(Workload& w, const AssignmentModel& model);

// A budget tree whose leaves are the workload's budget paths, each leaf's share its GPU-seconds
// of demand (intermediate budgets get the sum of their children, so every leaf's fraction of
// capacity is its fraction of demand).
BudgetConfig budgets_by_demand(const Workload& w);

}  // namespace allot::sim
