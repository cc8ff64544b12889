#include "server/metrics.h"

#include <algorithm>

#include "core/owed.h"

namespace allot::server {

namespace {

// Adds rate x (overlap of [start, end) with each bucket) to `b`.
void spread(core::Time from, core::Duration bucket, core::Time start, core::Time end, double rate,
            std::vector<double>& b) {
  if (end <= start || rate == 0 || b.empty()) return;
  const auto first = static_cast<std::size_t>(std::max<core::Time>(0, start - from) / bucket);
  for (auto k = first; k < b.size(); ++k) {
    const core::Time lo = from + static_cast<core::Time>(k) * bucket;
    const core::Time hi = lo + bucket;
    if (lo >= end) break;
    const core::Time o = std::min(end, hi) - std::max(start, lo);
    if (o > 0) b[k] += rate * static_cast<double>(o);
  }
}

std::string parent_of(const std::string& path) {
  if (path == "/" || path.empty()) return "";
  auto slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Metrics compute_metrics(const MetricsInput& in, core::Duration bucket) {
  Metrics out;
  if (in.to <= in.from || bucket <= 0) return out;
  const auto n = static_cast<std::size_t>((in.to - in.from + bucket - 1) / bucket);
  auto clip = [&](core::Time t) { return std::clamp(t, in.from, in.to); };

  // Availability, per cluster and hour, from each node's health timeline.
  std::map<std::string, std::vector<const store::NodeHealthEvent*>> events;
  for (const auto& e : in.health) events[e.node].push_back(&e);
  std::map<std::string, std::vector<double>> avail, total;
  for (const auto& node : in.nodes) {
    auto& av = avail[node.cluster];
    auto& tot = total[node.cluster];
    av.resize(n);
    tot.resize(n);
    struct Span {
      core::Time start;
      bool up;
      int gpus;
    };
    std::vector<Span> spans;
    const auto it = events.find(node.name);
    const core::Time born = node.registered_at;
    if (it == events.end()) {
      // No history (registered before it was kept): its current state throughout.
      spans.push_back({born, node.health == "healthy" && !node.cordoned, node.gpus});
    } else {
      // Before its first recorded change (a node older than the history) it counts as up.
      if (born < it->second.front()->time) spans.push_back({born, true, node.gpus});
      for (const auto* e : it->second) {
        const bool up = e->health == "healthy" && !e->cordoned;
        spans.push_back({e->time, up && e->health != "removed",
                         e->health == "removed" ? 0 : (e->gpus > 0 ? e->gpus : node.gpus)});
      }
    }
    for (std::size_t i = 0; i < spans.size(); ++i) {
      const core::Time s = clip(spans[i].start);
      const core::Time e = i + 1 < spans.size() ? clip(spans[i + 1].start) : in.to;
      spread(in.from, bucket, s, e, spans[i].gpus, tot);
      if (spans[i].up) spread(in.from, bucket, s, e, spans[i].gpus, av);
    }
  }
  for (const auto& [c, v] : total) {
    auto& m = out.clusters[c];
    for (double x : v) m.total += x;
    for (double x : avail[c]) m.available += x;
  }

  // Occupancy from the ledger; delivered per budget and hour with it.
  std::map<std::string, std::vector<double>> delivered, demand;
  for (const auto& e : in.ledger) {
    const core::Time s = clip(e.start), t = clip(e.end);
    if (t <= s) continue;
    const double gs = static_cast<double>(e.milli) / 1000.0 * static_cast<double>(t - s);
    auto& m = out.clusters[e.cluster];
    (e.allocated ? m.allocated : m.unallocated) += gs;
    if (!in.fractions.count(e.budget)) continue;
    auto& d = delivered[e.budget];
    d.resize(n);
    spread(in.from, bucket, s, t, static_cast<double>(e.milli) / 1000.0, d);
  }
  for (const auto& [c, m] : out.clusters) {
    out.all.total += m.total;
    out.all.available += m.available;
    out.all.allocated += m.allocated;
    out.all.unallocated += m.unallocated;
  }

  // Impact: owed capped hour by hour at demand.
  for (const auto& j : in.jobs) {
    if (!in.fractions.count(j.budget)) continue;
    auto& d = demand[j.budget];
    d.resize(n);
    spread(in.from, bucket, clip(j.start), clip(j.end), j.gpus, d);
  }
  double sum = 0;
  for (const auto& [leaf, frac] : in.fractions) {
    BudgetMetrics b;
    b.leaf = true;
    const auto& dem = demand[leaf];
    const auto& del = delivered[leaf];
    core::OwedTally owed;  // the one definition of owed (core/owed.h)
    for (std::size_t k = 0; k < n; ++k) {
      double fair = 0;
      for (const auto& [c, f] : frac) {
        auto a = avail.find(c);
        if (a != avail.end()) fair += f * a->second[k];
      }
      owed.add(fair, dem.empty() ? 0 : dem[k], del.empty() ? 0 : del[k]);
    }
    b.owed = owed.owed;
    b.demand = owed.demand;
    b.delivered = owed.delivered;
    b.counted = owed.counted;
    if (b.owed > 0) {
      ++out.budgets_owed;
      sum += b.impact();
      if (b.impact() >= 0.95) ++out.budgets_at_95;
      if (out.impact_min_budget.empty() || b.impact() < out.impact_min) {
        out.impact_min = b.impact();
        out.impact_min_budget = leaf;
      }
    }
    // The leaf, then each ancestor gets the sums.
    for (std::string p = leaf; !p.empty(); p = parent_of(p)) {
      auto& a = out.budgets[p];
      if (p == leaf) {
        a = b;
        continue;
      }
      a.owed += b.owed;
      a.demand += b.demand;
      a.delivered += b.delivered;
      a.counted += b.counted;
    }
  }
  if (out.budgets_owed > 0) out.impact_mean = sum / out.budgets_owed;
  return out;
}

}  // namespace allot::server
