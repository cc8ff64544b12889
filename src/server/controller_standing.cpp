// Each budget's standing for the snapshot (server/standing.h): the core's usage and allocation
// per budget, the contracts its running jobs still hold (§5), and the jobs of its subtree.
// Runs on the loop thread with the explanations: once a second at most.

#include <algorithm>
#include <memory>

#include "server/controller.h"

namespace allot::server {

std::shared_ptr<const StandingTable> Controller::standings() const {
  auto t = std::make_shared<StandingTable>();
  const auto& tree = sched_.budgets();
  const Time now = sched_.now();
  t->at = now;
  t->lookback = sched_.config().lookback;
  for (const auto& c : sched_.clusters()) {
    t->clusters.push_back(c.name);
    t->capacity.push_back(sched_.capacity(c.id));
    std::vector<BudgetStanding> rows(tree.size());
    const auto fractions = tree.allocated_fractions(c.id);
    for (core::BudgetId b = 0; b < tree.size(); ++b) {
      if (tree.node(b).removed) continue;
      auto& r = rows[b];
      r.fraction = b < fractions.size() ? fractions[b] : 0.0;
      r.allocation = sched_.allocation(c.id, b);
      r.usage = static_cast<double>(sched_.usage(c.id, b));
      r.projected = r.usage;
      r.held_allocated = sched_.allocated_rate(c.id, b);
    }
    t->rows.push_back(std::move(rows));
  }
  // Jobs: running ones by their cluster, waiting ones on every cluster they accept.
  for (const auto& [id, a] : active_) {
    const core::JobEntry* j = sched_.job(id);
    if (j == nullptr || !tree.valid(j->spec.budget)) continue;
    const bool running = j->state == core::JobState::Running;
    for (core::ClusterId c = 0; c < t->rows.size(); ++c) {
      if (running && j->run.cluster != c) continue;
      if (!running && holding_.count(id)) continue;  // stopping: neither running nor waiting
      if (!running && !j->spec.clusters.empty() &&
          std::find(j->spec.clusters.begin(), j->spec.clusters.end(), c) ==
              j->spec.clusters.end()) {
        continue;
      }
      core::Milli milli = 0;
      for (const auto& g : j->run.placement) milli += g.milli;
      const Time contract_end = j->run.allocated_since + j->spec.min_runtime;
      const double rest = running && j->run.allocated && contract_end > now
                              ? static_cast<double>(milli) * static_cast<double>(contract_end - now)
                              : 0.0;
      for (auto b = j->spec.budget; b != core::kNoBudget; b = tree.node(b).parent) {
        auto& r = t->rows[c][b];
        if (!running) {
          ++r.waiting;
        } else if (j->run.allocated) {
          ++r.running_allocated;
          r.projected += rest;
        } else {
          ++r.running_unallocated;
          r.held_unallocated += milli;
        }
      }
    }
  }
  for (auto& rows : t->rows) rank_siblings(tree, rows);
  return t;
}

}  // namespace allot::server
