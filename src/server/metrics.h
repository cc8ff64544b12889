// The four metrics of `allot report` / GET /report, with the simulator's definitions
// (docs/simulator.md, "Metrics"), computed from what the server records:
//
// - availability = healthy-and-ready GPU-time / total GPU-time, from the node health history
//   (a node is available while healthy and not cordoned);
// - occupancy = assigned GPU-time / available GPU-time, split allocated / unallocated, from the
//   ledger (the ledger knows clusters, not nodes: GPU-time of jobs still running on a node that
//   is draining counts as assigned, so occupancy can exceed 1 during drains);
// - impact, per leaf budget b and hour h: owed_b,h = min(fraction_b x available_h, demand_b,h),
//   where demand is the GPU-time its jobs asked for while submitted and not ended (pending or
//   running) in that hour; impact_b = sum_h min(delivered_b,h, owed_b,h) / sum_h owed_b,h;
// - utilization: from telemetry (see server/telemetry.h), computed by the caller.
//
// Pure: records in, numbers out.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/types.h"
#include "store/store.h"

namespace allot::server {

struct DemandJob {
  std::string budget;
  core::Time start = 0;  // submitted
  core::Time end = 0;    // ended (or the period's end if it has not)
  double gpus = 0;       // GPUs it asks for (nodes x GPUs per node x fraction)
};

struct MetricsInput {
  core::Time from = 0, to = 0;
  std::vector<store::NodeRecord> nodes;
  std::vector<store::NodeHealthEvent> health;  // time-ordered, all before `to`
  std::vector<store::LedgerEntry> ledger;      // clipped to the period
  std::vector<DemandJob> jobs;
  // Leaf budget -> cluster -> allocated fraction of that cluster.
  std::map<std::string, std::map<std::string, double>> fractions;
};

struct ClusterMetrics {
  double total = 0, available = 0;        // GPU-seconds
  double allocated = 0, unallocated = 0;  // GPU-seconds assigned
  double availability() const { return total > 0 ? available / total : 0; }
  double occupancy() const { return available > 0 ? (allocated + unallocated) / available : 0; }
};

struct BudgetMetrics {
  double owed = 0;       // sum over hours of the owed amount, capped at demand
  double demand = 0;     // GPU-seconds asked for
  double delivered = 0;  // GPU-seconds received (allocated and unallocated)
  double counted = 0;    // sum over hours of min(delivered, owed)
  bool leaf = false;
  double impact() const { return owed > 0 ? counted / owed : 1; }
};

struct Metrics {
  std::map<std::string, ClusterMetrics> clusters;
  ClusterMetrics all;
  // Every leaf with a fraction, and every ancestor (summed over its leaves).
  std::map<std::string, BudgetMetrics> budgets;
  // Over leaves that were owed anything.
  double impact_mean = 1, impact_min = 1;
  std::string impact_min_budget;
  int budgets_owed = 0, budgets_at_95 = 0;
};

Metrics compute_metrics(const MetricsInput& in, core::Duration bucket = core::kHour);

}  // namespace allot::server
