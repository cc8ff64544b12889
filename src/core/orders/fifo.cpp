// Fifo (docs/policy.md §7.1, "Baseline orders"): submit time, then job id, across all budgets.
#include "core/queue_order.h"

namespace allot::core {

Time fifo_first_key(const JobSpec& /*spec*/) {
  return 0;  // the flat key's later fields, submit time and id, decide alone
}

}  // namespace allot::core
