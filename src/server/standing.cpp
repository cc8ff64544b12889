#include "server/standing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <tuple>

namespace allot::server {

namespace {

double standing_key(const BudgetStanding& r) {
  if (r.allocation <= 0.0) return std::numeric_limits<double>::infinity();
  return r.projected / r.allocation;
}

// GPUs from milli-GPUs: "16", "7.5", "35.2".
std::string gpus(double milli) {
  std::ostringstream out;
  const double g = milli / 1000.0;
  out.precision(std::fabs(g - std::round(g)) < 0.05 ? 0 : 1);
  out << std::fixed << g;
  return out.str();
}

}  // namespace

void rank_siblings(const core::BudgetTree& tree, std::vector<BudgetStanding>& rows) {
  for (core::BudgetId p = 0; p < tree.size() && p < rows.size(); ++p) {
    const auto& node = tree.node(p);
    if (node.removed) continue;
    std::vector<core::BudgetId> kids;
    for (auto k : node.children) {
      if (tree.valid(k) && k < rows.size()) kids.push_back(k);
    }
    std::sort(kids.begin(), kids.end(), [&](core::BudgetId a, core::BudgetId b) {
      return std::make_tuple(standing_key(rows[a]), rows[a].projected, a) <
             std::make_tuple(standing_key(rows[b]), rows[b].projected, b);
    });
    for (std::size_t i = 0; i < kids.size(); ++i) {
      rows[kids[i]].rank = static_cast<int>(i) + 1;
      rows[kids[i]].siblings = static_cast<int>(kids.size());
    }
  }
}

FundingOutlook funding_outlook(const StandingTable& table, const core::BudgetTree& tree,
                               const core::PolicyConfig& policy, core::ClusterId cluster,
                               core::BudgetId leaf, core::Milli milli, core::Duration min_runtime) {
  FundingOutlook out;
  if (!tree.valid(leaf) || cluster >= table.rows.size()) {
    out.reason = "no such budget on this cluster";
    return out;
  }
  if (policy.funding == core::Funding::Always) {
    out.allocated = true;
    return out;
  }
  const auto& rows = table.rows[cluster];
  const double capacity = static_cast<double>(table.capacity[cluster]);
  if (policy.funding == core::Funding::ConcurrentCap) {
    // A cap on GPUs held at once: allocation_limit x f(b) x C for every budget on the path.
    for (auto b = leaf; b != tree.root(); b = tree.node(b).parent) {
      const auto& r = rows[b];
      const double cap = policy.allocation_limit * r.fraction * capacity;
      if (static_cast<double>(r.held_allocated + milli) > cap) {
        out.limiting = b;
        out.reason = tree.node(b).path + " would hold " + gpus(double(r.held_allocated + milli)) +
                     " allocated GPUs, over its " + gpus(cap) + "-GPU cap";
      }
    }
    out.allocated = out.limiting == core::kNoBudget;
    return out;
  }
  if (min_runtime <= 0) {
    out.reason = "no minimum runtime: a job without one always runs unallocated";
    return out;
  }
  // §6: the contract must fit every budget's allocation on the path (the highest at fault is
  // named), then the burst limit.
  const double cost = static_cast<double>(milli) * static_cast<double>(min_runtime);
  for (auto b = leaf; b != tree.root(); b = tree.node(b).parent) {
    const auto& r = rows[b];
    if (r.projected + cost > policy.allocation_limit * r.allocation) {
      out.limiting = b;
      out.reason = tree.node(b).path + " cannot afford the contract: its usage and promised " +
                   "contracts would reach " +
                   std::to_string(static_cast<long long>(
                       std::llround(100.0 * (r.projected + cost) / std::max(r.allocation, 1.0)))) +
                   "% of its allocation";
    }
  }
  if (out.limiting != core::kNoBudget) return out;
  if (policy.burst_limit > 0) {
    for (auto b = leaf; b != tree.root(); b = tree.node(b).parent) {
      const auto& r = rows[b];
      const double cap = policy.burst_limit * r.fraction * capacity;
      if (r.held_allocated > 0 && static_cast<double>(r.held_allocated + milli) > cap) {
        out.limiting = b;
        out.reason = tree.node(b).path + " is over its burst limit: it would hold " +
                     gpus(double(r.held_allocated + milli)) + " allocated GPUs, more than " +
                     gpus(cap) + " (" + gpus(1000.0 * policy.burst_limit) + " x its share)";
      }
    }
  }
  out.allocated = out.limiting == core::kNoBudget;
  return out;
}

}  // namespace allot::server
