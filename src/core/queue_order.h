// The variation point of queue order (docs/policy.md §7.1). Fair share walks the budget tree
// (fair_share_walk.h). Every other order is a baseline that serves one flat queue per pass, keyed
// (first, submit time, job id); such an order is one function giving `first`, in a file of its
// own under src/core/orders/, registered by one line in src/core/orders/orders.def. Internal to
// src/core. Thread-safety: pure functions.
#pragma once

#include "core/job.h"
#include "core/policy_config.h"
#include "core/types.h"

namespace allot::core {

// Priority descending as an ascending key (the per-budget queues and the Priority order).
inline int inverted(Priority p) {
  return 3 - static_cast<int>(p);
}

// The first field of a pending job's key in a baseline order's flat queue.
using FlatFirstKey = Time (*)(const JobSpec& spec);

// Each registered order's function (defined in its file under src/core/orders/).
#define ALLOT_FLAT_ORDER(order, first_key) Time first_key(const JobSpec& spec);
#include "core/orders/orders.def"
#undef ALLOT_FLAT_ORDER

// The first key of `order`'s flat queue; nullptr for FairShare (it has no flat queue).
FlatFirstKey flat_first_key(QueueOrder order);

}  // namespace allot::core
