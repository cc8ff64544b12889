// ShortestFirst (docs/policy.md §7.1, "Baseline orders"; the sjf-strict baseline): declared
// expected duration ascending, jobs that declared none last, then submit time, job id.
#include "core/queue_order.h"

namespace allot::core {

Time shortest_first_key(const JobSpec& spec) {
  return spec.expected_duration.value_or(kNever);
}

}  // namespace allot::core
