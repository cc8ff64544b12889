// Each budget's standing as the scheduling loop last saw it (docs/policy.md §4-§6): what
// `allot me` and GET /standing show, and whether a new job would start allocated. Computed by the
// loop once a second with the explanations (Controller::standings), then immutable: safe to read
// from any thread through the snapshot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/budget_tree.h"
#include "core/policy_config.h"
#include "core/types.h"

namespace allot::server {

// One budget on one cluster.
struct BudgetStanding {
  double fraction = 0;    // f(b): its fraction of the cluster's capacity (§3)
  double allocation = 0;  // A(b): milli-GPU-seconds it is owed over one lookback window
  double usage = 0;       // U(b): allocated milli-GPU-seconds charged over the window (§4)
  double projected = 0;   // P(b): U(b) plus the contracts of its running jobs not yet over (§5)
  core::Milli held_allocated = 0;    // milli-GPUs of allocated jobs running in its subtree
  core::Milli held_unallocated = 0;  // milli-GPUs of unallocated jobs running in its subtree
  int running_allocated = 0;
  int running_unallocated = 0;
  int waiting = 0;   // jobs of its subtree waiting (pending or requeued) for this cluster or any
  int rank = 0;      // 1 = first among its siblings in the fair-share order (§7.1); 0 for the root
  int siblings = 0;  // how many siblings are ranked, itself included
};

struct StandingTable {
  core::Time at = 0;                  // when the loop computed it
  core::Duration lookback = 0;        // the window's length in seconds
  std::vector<std::string> clusters;  // by ClusterId
  std::vector<core::Milli> capacity;  // by ClusterId
  // by ClusterId, then BudgetId (the snapshot's budget tree; removed budgets stay zero)
  std::vector<std::vector<BudgetStanding>> rows;
};

// Ranks siblings as the fair-share walk does at the start of a cycle: by (P/A, P, id), lowest
// first, a budget without allocation last. Fills rank and siblings of every non-root budget.
void rank_siblings(const core::BudgetTree& tree, std::vector<BudgetStanding>& rows);

// Whether a new job of `milli` milli-GPUs with minimum runtime `min_runtime` in leaf `leaf` would
// start allocated on `cluster` by the funding rule of §6 (lookback funding; a debug job's own
// rule aside), as of the table's moment. When not, `limiting` is the highest budget at fault and
// `reason` says which limit it is over, in words.
struct FundingOutlook {
  bool allocated = false;
  core::BudgetId limiting = core::kNoBudget;
  std::string reason;
};
FundingOutlook funding_outlook(const StandingTable& table, const core::BudgetTree& tree,
                               const core::PolicyConfig& policy, core::ClusterId cluster,
                               core::BudgetId leaf, core::Milli milli, core::Duration min_runtime);

}  // namespace allot::server
