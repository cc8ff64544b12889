// Why a pending job is waiting, as data (for APIs) and as a sentence (for people).
//
// Thread-safety: plain values; copies may be read from several threads while none writes.
#pragma once

#include <string>

#include "core/types.h"

namespace allot::core {

enum class WaitCode : std::uint8_t {
  NoMatchingNodes,   // no node of an accepted cluster and model is large enough: fix the request
  NoHealthyNodes,    // matching nodes exist but none takes work now (unhealthy, drained, down)
  WaitingForGpus,    // not enough free GPUs, and none it may preempt
  HoldsReservation,  // this job heads the queue: nodes are reserved and freed for it
  BlockedByReservation,  // free GPUs are held for a higher-ranked job
  NotFunded,             // its budget is over its allocation: runs only as unallocated work
};
const char* to_string(WaitCode c);

struct Explanation {
  JobId job = kNoJob;
  WaitCode code = WaitCode::WaitingForGpus;
  ClusterId cluster = 0;
  std::uint32_t rank = 0;             // position in its cluster's fair-share order (0 = first)
  std::uint32_t ahead_in_budget = 0;  // pending jobs of its own budget ranked before it
  bool funded = false;                // would run allocated if it started now
  BudgetId budget = kNoBudget;        // the job's leaf budget
  double standing = 0;  // the leaf's usage / allocation over the lookback (1.0 = at it)
  BudgetId limiting_budget = kNoBudget;  // the highest budget on its path over allocation, if any
  double limiting_standing = 0;
  // The limiting budget is within its allocation but holds its burst_limit of allocated GPUs.
  bool at_burst_limit = false;
  int needs_nodes = 1;
  int needs_gpus_per_node = 1;
  MigProfileId needs_mig = 0;  // the MIG profile it names (Shape::mig), if any
  // Dynamic MIG (docs/policy.md section 7.5): a GPU is being split into an instance for it.
  bool mig_split_for_it = false;
  int largest_free = 0;          // most whole GPUs free on one eligible node
  Time expected_start = kNever;  // when known (from declared durations and minimum runtimes)
  JobId reserved_for = kNoJob;   // for BlockedByReservation
};

}  // namespace allot::core
