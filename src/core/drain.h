// When a job on a draining node is stopped (docs/policy.md §9): its contract is honoured first.
// One rule for the core's decision and for what the server and the CLI tell about it.
//
// Thread-safety: a pure function.
#pragma once

#include <algorithm>

#include "core/types.h"

namespace allot::core {

// Once the run has had its minimum runtime from its start, or, for an allocated run protected
// for longer (promoted later), once its protection has ended.
constexpr Time drain_deadline(Time started, Duration min_runtime, bool allocated,
                              Time protected_until) {
  return std::max(started + min_runtime, allocated ? protected_until : Time{0});
}

}  // namespace allot::core
