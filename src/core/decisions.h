// What one scheduling cycle decides. The caller carries the decisions out (start processes, send
// signals) and reports back with Scheduler::job_stopped / job_finished.
//
// Thread-safety: plain values; copies may be read from several threads while none writes.
#pragma once

#include <string>
#include <vector>

#include "core/gpu_pool.h"
#include "core/types.h"

namespace allot::core {

enum class StartMode : std::uint8_t {
  Placed,      // fitted on free GPUs
  Backfilled,  // fitted behind a blocked head without delaying it
  Preempting,  // took GPUs from the victims listed in the matching StopDecisions
};

struct StartDecision {
  JobId job = kNoJob;
  ClusterId cluster = 0;
  Placement placement;
  bool allocated = false;    // charged and protected until protected_until
  Time protected_until = 0;  // == start time when not allocated
  // > 0: inside its owner's interactive allowance, neither demoted nor a victim until then
  // (docs/policy.md §6).
  Time allowance_until = 0;
  StartMode mode = StartMode::Placed;
  std::vector<JobId> victims;  // jobs that must be stopped before this one starts
  // Why a job that asked for a contract (min_runtime > 0) starts unallocated: the highest budget
  // on its path over its allocation or, with at_burst_limit, holding its burst limit; the root
  // (with at_burst_limit): the inference tier holds its share of the cluster (PolicyConfig::
  // inference_share). kNoBudget when allocated, or when the job asked for no contract.
  BudgetId limiting_budget = kNoBudget;
  bool at_burst_limit = false;
};

enum class StopReason : std::uint8_t {
  Preempted,  // for a more deserving job (see VictimReason)
  Drain,      // its node is unhealthy or draining and the job reached its minimum runtime
  NodeDown,   // its node is down; the job is lost
};
const char* to_string(StopReason r);

// Why a particular running job was chosen as a victim.
enum class VictimClass : std::uint8_t {
  Unallocated,     // ran unallocated: preemptible by any allocated request
  OverAllocation,  // allocated, past its minimum runtime, its branch stands worse by the margin
  AboveShare,      // ran unallocated in a leaf above its share, for a share claim (§8)
};

struct VictimReason {
  VictimClass cls = VictimClass::Unallocated;
  BudgetId victim_branch = kNoBudget;  // siblings compared under their common ancestor
  BudgetId requester_branch = kNoBudget;
  double victim_standing = 0;  // usage / allocation of victim_branch
  double requester_standing =
      0;                 // the same for requester_branch, counting the requester's contract
  Duration ran_for = 0;  // how long the victim had run
};

struct StopDecision {
  JobId job = kNoJob;
  StopReason reason = StopReason::Preempted;
  JobId for_job = kNoJob;  // the requester, for Preempted
  bool requeue = false;    // resumable: goes back to the queue once stopped
  VictimReason victim;     // for Preempted
  NodeId node = 0;         // for Drain / NodeDown: the node at fault
};

// A running job changed class: see docs/policy.md "Allocated and unallocated".
struct ClassChange {
  JobId job = kNoJob;
  bool allocated = false;  // the new class
  Time protected_until = 0;
  BudgetId limiting_budget = kNoBudget;  // for a demotion: the budget over its allocation
  bool renewed = false;  // an allocated job's contract renewed (JobSpec::renew_contract)
};

// A GPU to be split into other MIG instances, or made whole (docs/policy.md section 7.5): the
// caller has the node's agent make it so, then reports the layout the node achieved
// (Scheduler::set_node_mig, or cancel_mig_plans when it achieved nothing). Until then the GPU takes
// no work.
struct MigRepartition {
  ClusterId cluster = 0;
  NodeId node = 0;
  int gpu = 0;
  std::vector<MigInstance> instances;  // the new layout; empty: the GPU whole, MIG mode off
  JobId for_job = kNoJob;              // the first waiting job it serves
};

struct Reservation {
  JobId job = kNoJob;
  ClusterId cluster = 0;
  std::vector<NodeId> nodes;
  Time expected_start = kNever;  // kNever: no running job declared when it will end
};

}  // namespace allot::core
