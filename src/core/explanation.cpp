// Sentences for people: why a job waits, why a job was stopped.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/scheduler.h"

namespace allot::core {
namespace {

std::string percent(double x) {
  if (!std::isfinite(x)) return "no allocation";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", x * 100.0);
  return buf;
}

}  // namespace

std::string format_duration(Duration d) {
  if (d < 0) d = 0;
  char buf[48];
  if (d < kMinute) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(d));
  } else if (d < kHour) {
    std::snprintf(buf, sizeof buf, "%lldm", static_cast<long long>(d / kMinute));
  } else if (d < kDay) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(d / kHour),
                  static_cast<long long>((d % kHour) / kMinute));
  } else {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", static_cast<long long>(d / kDay),
                  static_cast<long long>((d % kDay) / kHour));
  }
  return buf;
}

std::string Scheduler::describe(const Explanation& e) const {
  const std::string budget =
      budgets_.valid(e.budget) ? budgets_.node(e.budget).path : std::string("(removed budget)");
  const std::string cluster = e.cluster < clusters_.size() ? clusters_[e.cluster].name : "?";
  const std::string lookback = format_duration(config_.lookback);
  std::string shape =
      e.needs_nodes > 1
          ? std::to_string(e.needs_nodes) + "x" + std::to_string(e.needs_gpus_per_node) + " GPUs"
          : std::to_string(e.needs_gpus_per_node) + " GPU" + (e.needs_gpus_per_node > 1 ? "s" : "");
  if (e.needs_mig != 0 && e.needs_mig <= catalog_.mig_profile_count()) {
    shape = "a " + catalog_.mig_profile(e.needs_mig).name + " MIG instance";
  }
  std::string out;
  switch (e.code) {
    case WaitCode::NoMatchingNodes:
      if (e.needs_mig != 0 && e.mig_split_for_it) {
        return "needs " + shape + ": a GPU of cluster " + cluster +
               " is being split into one for it (dynamic MIG)";
      }
      if (e.needs_mig != 0 && config_.mig_dynamic &&
          std::any_of(nodes_.begin(), nodes_.end(), [&](const Node& n) {
            const auto& models = catalog_.mig_profile(e.needs_mig).models;
            return n.spec.cluster == e.cluster &&
                   std::find(models.begin(), models.end(), n.spec.model) != models.end();
          })) {
        return "needs " + shape + " but no GPU of cluster " + cluster +
               " is split into one yet: the scheduler splits an idle GPU for it when one is free "
               "(dynamic MIG)";
      }
      if (e.needs_mig != 0) {
        return "needs " + shape + " but no GPU of cluster " + cluster +
               " is split into one: split one (nvidia-smi mig) or change the request";
      }
      return "needs " + shape + " but no node of cluster " + cluster +
             " with an accepted GPU model is that large: change the request";
    case WaitCode::NoHealthyNodes:
      return "needs " + shape + "; the nodes of cluster " + cluster +
             " that could hold it are unhealthy, draining, down or cordoned";
    case WaitCode::HoldsReservation:
      out = "next in line on " + cluster + ": nodes are reserved for it (" + shape + ")";
      break;
    case WaitCode::BlockedByReservation:
      out = "GPUs are free but held for job " + std::to_string(e.reserved_for) +
            ", which ranks higher";
      break;
    case WaitCode::WaitingForGpus:
      out = "needs " + shape + " on " + cluster + "; the most free on one node is " +
            std::to_string(e.largest_free);
      break;
    case WaitCode::NotFunded:
      out = "needs " + shape + " on " + cluster + " and may not preempt: it is not funded";
      break;
  }
  out +=
      "; budget " + budget + " used " + percent(e.standing) + " of its allocation over " + lookback;
  if (e.limiting_budget == budgets_.root()) {
    out += "; the inference tier holds its share of the cluster (" +
           percent(config_.inference_share) +
           " running allocated) so the job would run unallocated (preemptible)";
  } else if (e.limiting_budget != kNoBudget && budgets_.valid(e.limiting_budget)) {
    out += "; " + budgets_.node(e.limiting_budget).path +
           (e.at_burst_limit ? " would exceed its burst limit (" + percent(config_.burst_limit) +
                                   " of its share of the cluster running allocated)"
                             : " is at " + percent(e.limiting_standing)) +
           " so the job would run unallocated (preemptible)";
  }
  if (e.ahead_in_budget > 0) {
    out += "; " + std::to_string(e.ahead_in_budget) + " job" + (e.ahead_in_budget > 1 ? "s" : "") +
           " of " + budget + " ahead";
  }
  out += "; position " + std::to_string(e.rank + 1) + " in the fair-share order";
  if (e.expected_start != kNever) {
    out += "; earliest expected start in " + format_duration(e.expected_start - now_);
  }
  return out;
}

std::string Scheduler::describe(const StopDecision& s) const {
  switch (s.reason) {
    case StopReason::NodeDown:
      return "node " + nodes_.at(s.node).spec.name + " went down" + (s.requeue ? "; requeued" : "");
    case StopReason::Drain:
      return "node " + nodes_.at(s.node).spec.name + " is draining (" +
             to_string(nodes_.at(s.node).health) +
             (nodes_.at(s.node).health_reason.empty() ? "" : ": " + nodes_[s.node].health_reason) +
             ") and the job reached its minimum runtime" + (s.requeue ? "; requeued" : "");
    case StopReason::Preempted:
      break;
  }
  std::string out = "preempted for job " + std::to_string(s.for_job) + " after running " +
                    format_duration(s.victim.ran_for) + ": ";
  const auto name = [&](BudgetId b) {
    return budgets_.valid(b) ? budgets_.node(b).path : std::string("?");
  };
  if (s.victim.cls == VictimClass::Unallocated) {
    out +=
        "it ran unallocated (beyond its budget or with minimum runtime 0), so any funded job "
        "may take its GPUs";
  } else if (s.victim.cls == VictimClass::AboveShare) {
    out += "it ran unallocated while " + name(s.victim.victim_branch) +
           " ran above its share of the cluster, and " + name(s.victim.requester_branch) +
           " was within its own share";
  } else {
    out += "it was past its minimum runtime and " + name(s.victim.victim_branch) + " stands at " +
           percent(s.victim.victim_standing) + " of its allocation against " +
           percent(s.victim.requester_standing) + " for " + name(s.victim.requester_branch);
  }
  return out + (s.requeue ? "; requeued" : "");
}

}  // namespace allot::core
