// Priority (docs/policy.md §7.1, "Baseline orders"): declared priority descending, then submit
// time, job id, across all budgets. (Its preemption rule, only higher priority takes unallocated
// work, is §8's and lives in preemption.cpp.)
#include "core/queue_order.h"

namespace allot::core {

Time priority_first_key(const JobSpec& spec) {
  return inverted(spec.priority);
}

}  // namespace allot::core
