#include "sim/policies.h"

namespace allot::sim {
namespace {
PolicyPreset preset(std::string name, std::string description, core::PolicyConfig config) {
  PolicyPreset p;
  p.name = std::move(name);
  p.description = std::move(description);
  p.config = config;
  return p;
}
}  // namespace

std::vector<PolicyPreset> policy_presets() {
  using core::Funding;
  using core::QueueOrder;
  std::vector<PolicyPreset> out;

  // allot: hierarchical fair share over a 7-day lookback, minimum-runtime contracts, preemption
  // of unallocated and over-allocation work, reservations for blocked large jobs.
  out.push_back(preset("fairshare",
                       "allot: lookback fair share, minimum-runtime contract, preemption",
                       core::PolicyConfig{}));

  // First come, first served across all budgets; nothing is ever preempted.
  core::PolicyConfig fifo;
  fifo.order = QueueOrder::Fifo;
  fifo.funding = Funding::Always;
  fifo.minimum_runtime_contract = false;
  fifo.interactive_stop_grace = 0;  // allot's stop warning, not the baseline's
  fifo.preemption = false;
  out.push_back(preset("fifo", "first come, first served; no preemption", fifo));

  // The classic scheduler allot replaced: strict declared priority across teams; each team's
  // non-preemptible GPUs are capped at its budget fraction of capacity, work over the cap is
  // preemptible by higher-priority work.
  core::PolicyConfig priority;
  priority.order = QueueOrder::Priority;
  priority.funding = Funding::ConcurrentCap;
  priority.minimum_runtime_contract = false;
  priority.interactive_stop_grace = 0;  // allot's stop warning, not the baseline's
  // Any higher-priority request takes over-cap work, whatever it loses: the classic behaviour.
  priority.max_unallocated_loss_ratio = 0;
  // Its victims are the cheapest over-cap work, however often it was taken before.
  priority.spare_work_within_share = false;
  priority.max_preemptions_per_job = 0;
  out.push_back(
      preset("priority", "strict priority with per-team non-preemptible GPU caps", priority));

  // Slurm-style multifactor priority with Fair Tree and usage decay (7-day half-life); running
  // jobs are never preempted and there is no minimum-runtime contract.
  core::PolicyConfig fairtree;
  fairtree.order = QueueOrder::FairShare;
  fairtree.funding = Funding::Always;
  fairtree.minimum_runtime_contract = false;
  fairtree.interactive_stop_grace = 0;  // allot's stop warning, not the baseline's
  fairtree.preemption = false;
  fairtree.usage_half_life = 7 * core::kDay;
  out.push_back(
      preset("fairtree", "Slurm Fair Tree with usage decay; no contract, no preemption", fairtree));

  // The FIFO baseline of the Helios and Tiresias simulators on Philly: the queue head blocks
  // everything behind it (no backfill, no reservations), nothing is preempted, debug jobs get no
  // pass of their own, every job is funded, requests over a node are whole nodes plus one with
  // the remainder, placed by Helios' consolidate rule.
  core::PolicyConfig strict;
  strict.order = QueueOrder::Fifo;
  strict.funding = Funding::Always;
  strict.minimum_runtime_contract = false;
  strict.interactive_stop_grace = 0;
  strict.preemption = false;
  strict.backfill = false;
  strict.head_of_line_blocking = true;
  strict.reserve_for_blocked = false;
  strict.debug_jobs_first = false;
  strict.placement = core::PlacementRule::Consolidate;
  // Every job starts allocated (Funding::Always) and nothing is reserved, so no job ever changes
  // class: turning the class changes off only spares each cycle a walk over the running jobs.
  strict.demote_over_allocation = false;
  strict.promote_when_funded = false;
  PolicyPreset fifo_strict =
      preset("fifo-strict",
             "strict head-of-line FIFO, no backfill, no preemption (Helios/Tiresias)", strict);
  fifo_strict.gang_shape = GangShape::Uneven;
  fifo_strict.reproduces = "Helios simulator (HeliosArtifact) FIFO with consolidate placement";
  out.push_back(fifo_strict);

  // The same with the queue in order of duration (shortest first), then arrival: Helios' SJF,
  // which knows each job's duration in advance.
  PolicyPreset sjf_strict = fifo_strict;
  sjf_strict.name = "sjf-strict";
  sjf_strict.description = "strict head-of-line shortest-job-first with known durations (Helios)";
  sjf_strict.config.order = QueueOrder::ShortestFirst;
  sjf_strict.oracle_durations = true;
  sjf_strict.reproduces = "Helios simulator (HeliosArtifact) SJF with consolidate placement";
  out.push_back(sjf_strict);
  return out;
}

std::string policy_names() {
  std::string out;
  for (const PolicyPreset& p : policy_presets()) out += (out.empty() ? "" : ", ") + p.name;
  return out;
}

std::optional<PolicyPreset> find_policy(std::string_view name) {
  for (PolicyPreset& p : policy_presets()) {
    if (p.name == name) return p;
  }
  return std::nullopt;
}

}  // namespace allot::sim
