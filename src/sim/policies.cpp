#include "sim/policies.h"

namespace allot::sim {

std::vector<PolicyPreset> policy_presets() {
  using core::Funding;
  using core::QueueOrder;
  std::vector<PolicyPreset> out;

  // allot: hierarchical fair share over a 7-day lookback, minimum-runtime contracts, preemption
  // of unallocated and over-allocation work, reservations for blocked large jobs.
  out.push_back({"fairshare", "allot: lookback fair share, minimum-runtime contract, preemption",
                 core::PolicyConfig{}});

  // First come, first served across all budgets; nothing is ever preempted.
  core::PolicyConfig fifo;
  fifo.order = QueueOrder::Fifo;
  fifo.funding = Funding::Always;
  fifo.minimum_runtime_contract = false;
  fifo.preemption = false;
  out.push_back({"fifo", "first come, first served; no preemption", fifo});

  // The classic scheduler allot replaced: strict declared priority across teams; each team's
  // non-preemptible GPUs are capped at its budget fraction of capacity, work over the cap is
  // preemptible by higher-priority work.
  core::PolicyConfig priority;
  priority.order = QueueOrder::Priority;
  priority.funding = Funding::ConcurrentCap;
  priority.minimum_runtime_contract = false;
  // Any higher-priority request takes over-cap work, whatever it loses: the classic behaviour.
  priority.max_unallocated_loss_ratio = 0;
  // Its victims are the cheapest over-cap work, however often it was taken before.
  priority.spare_work_within_share = false;
  priority.max_preemptions_per_job = 0;
  out.push_back({"priority", "strict priority with per-team non-preemptible GPU caps", priority});

  // Slurm-style multifactor priority with Fair Tree and usage decay (7-day half-life); running
  // jobs are never preempted and there is no minimum-runtime contract.
  core::PolicyConfig fairtree;
  fairtree.order = QueueOrder::FairShare;
  fairtree.funding = Funding::Always;
  fairtree.minimum_runtime_contract = false;
  fairtree.preemption = false;
  fairtree.usage_half_life = 7 * core::kDay;
  out.push_back(
      {"fairtree", "Slurm Fair Tree with usage decay; no contract, no preemption", fairtree});
  return out;
}

std::optional<PolicyPreset> find_policy(std::string_view name) {
  for (PolicyPreset& p : policy_presets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

}  // namespace allot::sim
