// A job as its owner submits it: what it needs, what it promises (minimum runtime), who pays.
//
// Thread-safety: plain values; copies may be read from several threads while none writes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/policy_config.h"
#include "core/status.h"
#include "core/types.h"

namespace allot::core {

enum class JobKind : std::uint8_t { Batch, Interactive, Debug, Inference };
enum class Priority : std::uint8_t { Low, Normal, High, Urgent };
const char* to_string(JobKind k);
const char* to_string(Priority p);
std::optional<JobKind> parse_job_kind(std::string_view s);
std::optional<Priority> parse_priority(std::string_view s);

// nodes x gpus_per_node, all or nothing. A request for part of one GPU (a MIG slice or a shared
// GPU) is nodes = 1, gpus_per_node = 1, gpu_milli < 1000. An uneven gang (Slurm's --gpus, the
// Helios and Tiresias simulators) fills whole nodes and puts the remainder on one more node: 12
// GPUs on 8-GPU nodes is nodes = 2, gpus_per_node = 8, last_node_gpus = 4.
struct Shape {
  int nodes = 1;
  int gpus_per_node = 1;
  Milli gpu_milli = kWholeGpu;  // per GPU
  // > 0: one of the `nodes` nodes holds only this many GPUs (fewer than gpus_per_node); 0: even.
  int last_node_gpus = 0;
  // A fraction asked as a MIG profile (`--mig 1g.18gb`): only a free instance of exactly this
  // profile will do. 0: any GPU with room for gpu_milli (a MIG instance or a shared GPU).
  MigProfileId mig = 0;
  int total_gpus() const {
    return last_node_gpus > 0 ? (nodes - 1) * gpus_per_node + last_node_gpus
                              : nodes * gpus_per_node;
  }
  Milli total_milli() const { return static_cast<Milli>(total_gpus()) * gpu_milli; }
  bool fractional() const { return gpu_milli < kWholeGpu; }
  bool gang() const { return nodes > 1; }
  bool uneven() const { return last_node_gpus > 0; }
  bool operator==(const Shape&) const = default;
};

struct JobSpec {
  JobId id = kNoJob;  // unique, > 0, chosen by the caller
  std::string owner;
  BudgetId budget = kNoBudget;  // a leaf of the budget tree
  Shape shape;
  std::vector<GpuModelId> models;        // accepted GPU models; empty = any
  std::vector<ClusterId> clusters;       // accepted clusters; empty = any
  Duration min_runtime = 0;              // 0 = unallocated: free, always preemptible
  bool resumable = false;                // requeued automatically when preempted
  Priority priority = Priority::Normal;  // orders work within its budget only
  JobKind kind = JobKind::Batch;
  Time submit_time = 0;
  std::optional<Duration> expected_duration;  // a hint for backfill; never enforced
  // Starts of the same work under earlier job ids (its owner resubmitted it after a stop that
  // lost it): counted by max_preemptions_per_job.
  int earlier_starts = 0;
  // Its contract is renewed when it ends, while its budget can afford another (docs/policy.md §6,
  // "Renewal"): a service's protected replica, which is meant to run for as long as it serves.
  bool renew_contract = false;
};

class BudgetTree;
// Checks a job against the policy's bounds and the budget tree. Names the field at fault.
Status validate_job(const JobSpec& job, const PolicyConfig& config, const BudgetTree& budgets);

}  // namespace allot::core
