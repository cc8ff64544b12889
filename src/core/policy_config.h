// Every constant of the scheduling policy, with the defaults documented in docs/policy.md.
//
// Thread-safety: plain values; copies may be read from several threads while none writes.
#pragma once

#include "core/types.h"

namespace allot::core {

// How pending jobs are ordered.
enum class QueueOrder : std::uint8_t {
  FairShare,  // walk the budget tree, least-served branch first (allot's policy)
  Fifo,       // submit time, across all budgets
  Priority,   // declared priority across all budgets, then submit time (the classic scheduler)
  // Declared expected duration (shortest first; none declared: last), then submit time, across
  // all budgets: the Helios simulator's SJF, which knows every job's duration.
  ShortestFirst,
};

// When a starting job runs allocated (charged and protected).
enum class Funding : std::uint8_t {
  Lookback,       // its budget can afford its contract within its lookback allocation (allot)
  Always,         // every job with a positive minimum runtime (no budgets as limits)
  ConcurrentCap,  // its budget's allocated GPUs now stay within fraction x capacity (GPU caps)
};

// Where a request's GPUs go.
enum class PlacementRule : std::uint8_t {
  // allot: the node with the fewest free GPUs that fits; a gang in the tightest block that holds
  // it, its nodes in best-fit order (gpu_pool.cpp).
  BestFit,
  // The Helios simulator's "consolidate" (and Tiresias'): up to a node, the node with the fewest
  // free whole GPUs that fits, ties by node index; a gang takes whole nodes with room for
  // gpus_per_node in node index order, blocks ignored, and an uneven gang's remainder goes where a
  // request of that size alone would (consolidated_placement.cpp).
  Consolidate,
  // Fragmentation gradient descent (docs/policy.md section 14; Weng et al., ATC'23): a request up
  // to one node goes where the node's expected fragmentation for the recent mix of requests rises
  // least (fragmentation_placement.h); gangs and requests naming a MIG profile as BestFit.
  LeastFragmenting,
};

struct PolicyConfig {
  QueueOrder order = QueueOrder::FairShare;
  Funding funding = Funding::Lookback;
  // With the contract, an allocated job is protected for its minimum runtime only. Without it
  // (classic schedulers), an allocated job is never preempted by the scheduler.
  bool minimum_runtime_contract = true;

  // --- the scheduling contract ---
  Duration max_min_runtime = 8 * kHour;  // largest minimum runtime a job may declare
  Duration max_debug_min_runtime = 15 * kMinute;
  int max_debug_gpus = 4;        // a debug job asks for at most this many GPUs
  bool debug_jobs_first = true;  // debug jobs are considered before all other work
  // Debug jobs are funded (allocated, protected for their short contract, able to take GPUs from
  // unallocated work) even when their budget is over its allocation, up to this many GPUs of
  // running debug jobs per budget at a time.
  bool debug_always_funded = true;
  int max_debug_gpus_per_budget = 8;

  // --- lookback fair share ---
  Duration lookback = 7 * kDay;   // sliding window of usage
  Duration usage_bucket = kHour;  // granularity of the window (lookback is a multiple of it)
  // 0: a plain sliding window. > 0: usage decays with this half-life instead (Slurm's
  // PriorityDecayHalfLife); allocation is then measured over half_life / ln 2.
  Duration usage_half_life = 0;
  double allocation_limit = 1.0;  // a budget is within allocation while usage <= limit * allocation
  // Lookback funding also caps how fast a budget spends: a job is funded only while the allocated
  // GPUs running in each budget on its path, plus its own, stay within burst_limit x f(b) x C (a
  // budget holding no allocated GPUs may always fund one job, however large). Without it a budget
  // under its allocation funds contracts worth its whole window at once, takes the cluster, and
  // then loses it all when it is over: see docs/policy.md section 6. Work beyond the cap still
  // runs, unallocated. 0: no cap.
  double burst_limit = 1.1;
  // The burst limit's exception: a budget holding fewer allocated GPUs than this x f(b) x C (and
  // one holding none) may fund one job of any size. 0: only a budget holding none. Measured in
  // docs/design/0008 (1.0 helps large gangs at 1x load and costs impact under overload).
  double burst_exempt_below = 0;
  // A job larger than this x f(b) x C is never exempt (at any budget b on its path): the exception
  // then serves gangs up to a multiple of the budget's share. 0: no bound. Measured in
  // docs/design/0014, not adopted.
  double burst_exempt_max_size = 0;

  // --- interactive sessions (docs/policy.md section 6, "Interactive allowance") ---
  // An interactive job whose contract its budget can afford (the window test of section 6, the
  // burst limit aside) is inside its owner's allowance while the owner's allowance jobs, with it,
  // hold at most interactive_gpus_per_user GPUs and those of its leaf budget at most
  // interactive_gpus_per_budget. It starts allocated, charged like any allocated job, and is then
  // neither demoted nor a preemption victim for interactive_protection from its start (its
  // contract, if longer, still holds); a drain still stops it at its contract. 0 GPUs: no
  // allowance (interactive work is ordinary work). Why the rule cannot bypass budgets:
  // docs/design/0010-interactive-sessions.md. Off by default (0 here and a 0 stop grace): on the
  // lab model it cost fairshare impact, lost GPU-hours and the core's flat cost per event
  // (design/0010, "Decision"); `allot server --interactive-allowance 8` and
  // `allot sim --interactive-allowance 8` turn it on.
  int interactive_gpus_per_user = 0;
  int interactive_gpus_per_budget = 32;
  Duration interactive_protection = 8 * kHour;
  // Any stop of an interactive job but a node failure (a preemption, a drain) comes with a
  // warning and this long to save before the job must be gone (docs/policy.md section 9): the
  // server sends the warning at once (SIGUSR1 and $ALLOT_STOP_NOTICE), SIGTERM at the end of this
  // grace less its ordinary stop grace, SIGKILL at its end. The simulator models it: the session's
  // work is saved, and the GPUs stay busy for the grace. 0: an ordinary stop (the default;
  // 5 min is the measured setting: `--interactive-stop-grace 5m`).
  Duration interactive_stop_grace = 0;

  // The inference tier's share of each cluster (docs/policy.md section 15): allocated inference
  // jobs (a service's protected replicas) hold at most inference_share x C GPUs between them. An
  // inference job beyond it is not funded (it runs unallocated, preemptible by training), and a
  // protected replica's contract is not renewed past it. 0: no bound. Lookback funding only.
  double inference_share = 0;

  // Dynamic MIG (docs/policy.md section 7.5, "MIG layouts"): the scheduler re-partitions idle GPUs
  // of MIG-capable models into the instances waiting jobs name, and makes GPUs whose instances
  // are all idle whole again when whole-GPU work waits for them. A GPU being re-partitioned takes
  // no work until its node reports the new layout. false: layouts are the nodes' own (static).
  bool mig_dynamic = false;
  // Hysteresis: a GPU whose layout the scheduler changed keeps it at least this long.
  Duration mig_hold = 10 * kMinute;
  // MIG instances yield to training: where whole-GPU work waits with a contract its budget can
  // afford and a node could hold it with its GPUs in MIG mode made whole, the unallocated work on
  // them is preempted and they are made whole (docs/policy.md section 7.5, "Yield") — while more
  // of the cluster's GPUs are in MIG mode than inference_share of them (0: down to none).
  bool mig_yield = false;
  // Training yields to MIG work: where a job that names a profile waits with a contract and its
  // budget below its share, and no idle GPU was split for it, the unallocated work on one whole
  // GPU is preempted and the GPU split for it (docs/policy.md section 7.5, "Split over unallocated
  // work") — while fewer of the cluster's GPUs are in MIG mode than inference_share of them (0: no
  // bound).
  bool mig_split_unallocated = false;

  // --- class changes of running jobs (see docs/policy.md "Allocated and unallocated") ---
  bool demote_over_allocation = true;  // allocated jobs past their contract become unallocated
  bool promote_when_funded = true;     // unallocated jobs with a contract become allocated
  // Demotion spares non-resumable runs: an allocated job that is not resumable stays allocated
  // (charged, and preemptible past its contract only as allocated work is) when its budget goes
  // over, rather than becoming free work that a request which has waited
  // unallocated_loss_patience may throw away however long it ran. Lookback funding only.
  // Measured in docs/design/0013 and 0014, not adopted.
  bool keep_non_resumable_allocated = false;

  // --- preemption ---
  bool preemption = true;
  // An allocated job past its minimum runtime may be preempted only when its branch's standing
  // exceeds the requester's branch standing by more than this (standing 1.0 = exactly at
  // allocation).
  double preemption_margin = 0.10;
  // Preemption searches per cluster and cycle: each one weighs every node with takeable work, so
  // they are rationed; a blocked job that did not get one waits for the next cycle.
  int max_preemption_attempts = 8;
  // Work a resumable victim loses is at most what it did since its last checkpoint: victims are
  // weighed by min(time run, this) for resumable jobs and by all their time run otherwise.
  Duration assumed_checkpoint_interval = 30 * kMinute;
  // Victims within their share: an unallocated victim whose leaf budget holds (allocated or not)
  // at most its fraction of the cluster at the start of the cycle is taken only after every other
  // candidate on its node, and a node's cost counts such victims right after the allocated loss,
  // so that funded requests take GPUs from budgets running above their share first (docs/policy.md
  // section 8; docs/design/0002).
  bool spare_work_within_share = true;
  // Share claims (lookback funding only): a request that is not funded (minimum runtime 0, or its
  // budget over its allocation or burst limit) may still take unallocated work of another leaf
  // that runs above its share of the cluster, as long as its own leaf, with it, runs at most its
  // share f(b) x C (all its running GPUs counted). It starts unallocated. Each hour a budget is
  // owed its share of the cluster (capped at its demand); without claims an under-share budget's
  // unfunded work waits while over-share budgets' free work holds the GPUs (docs/policy.md
  // section 8; docs/design/0008).
  bool share_claims = true;
  // Share claims that may try preemption in one cycle (each is a victim search, like
  // max_preemption_attempts for funded requests, which they do not use up).
  int max_claim_attempts = 4;
  // A job already started more than this many times (counting earlier incarnations of the same
  // work, JobSpec::earlier_starts) is no longer a preemption victim, so that no job is preempted
  // more than this many times; drains and node failures still stop it. 0: no limit.
  int max_preemptions_per_job = 3;
  // A preemption may destroy allocated work (victims past their contract) of at most this many
  // times the GPU time the requester's own contract guarantees (GPUs x minimum runtime). Stops a
  // short request from throwing away hours of a long, non-resumable run. 0: no limit.
  double max_allocated_loss_ratio = 1.0;
  // The same limit for unallocated non-resumable victims that hold a contract (minimum runtime > 0:
  // demoted past it, or started while their budget was over), one by one and in all: demotion must
  // not strip a long non-resumable run of the protection above. Resumable work (it loses at most a
  // checkpoint interval), work with minimum runtime 0 (free by choice) and work backfilled onto
  // another job's reservation stay takeable. 0: no limit.
  double max_unallocated_loss_ratio = 1.0;
  // A funded request that has waited this long since its submission is no longer held back by
  // max_unallocated_loss_ratio, so that no unallocated work squats on GPUs for long. 0: never.
  Duration unallocated_loss_patience = 8 * kHour;

  // --- backfill and reservations ---
  bool backfill = true;  // jobs behind a blocked head may start where they do not delay it
  // Strict head-of-line order (the Helios and Tiresias FIFO baselines): in each cluster, the first
  // job in order that cannot start ends the walk, so nothing behind it starts, backfilled or not,
  // until it does. Only its own turn can reserve or preempt. false: the walk goes on past it.
  bool head_of_line_blocking = false;
  bool reserve_for_blocked = true;  // plan and hold nodes for blocked heads (large-job policy)
  int max_reservations = 2;         // blocked heads per cluster that get reserved nodes
  bool backfill_unallocated_on_reserved = true;  // reserved GPUs may run evictable work meanwhile

  // --- placement ---
  PlacementRule placement = PlacementRule::BestFit;
  bool gang_spans_blocks = true;  // a gang that fits no single block may span blocks

  // --- bounds ---
  int max_nodes_per_job = 1024;
  int max_gpus_per_node = 64;
};

}  // namespace allot::core
