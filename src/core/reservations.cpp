// Reservations for blocked jobs (docs/policy.md §7.4): when each candidate node would be ready for
// the blocked job, and which nodes it holds.

#include <algorithm>
#include <tuple>

#include "core/cluster_scratch.h"

namespace allot::core {

Reservation Scheduler::plan_reservation(ClusterId c, ClusterScratch& s, const JobEntry& j,
                                        const NodeMask& mask) const {
  const Shape& shape = j.spec.shape;
  BudgetId unused = kNoBudget;
  const bool can_preempt = config_.preemption && funded(s, j, &unused);
  s.new_requester();
  const int need = shape.fractional() ? 1 : shape.gpus_per_node;
  using Ready = ClusterScratch::Ready;
  std::vector<Ready>& ready = s.ready_buffer;
  std::vector<std::pair<Time, int>>& releases = s.release_buffer;  // reused for every node
  ready.clear();
  for (NodeId n : cluster_nodes_[c]) {
    if (!nodes_[n].schedulable() || mask[n] || !pool_.could_ever_fit(n, shape, j.spec.models)) {
      continue;
    }
    const int free_now = pool_.whole_free(n);
    Time at = now_;
    if (free_now < need) {
      // When does each job on the node give its GPUs back: its declared end, or, if this job
      // may preempt it, the end of its contract.
      // The node is ready at the first release that brings it to `need`: what is released now
      // counts at once, releases that never come never count, the rest in time order.
      releases.clear();
      int have = free_now;
      for (const JobEntry* entry : jobs_on_node_[n]) {
        const JobEntry& v = *entry;
        Time t = v.spec.expected_duration ? v.run.started + *v.spec.expected_duration : kNever;
        if (can_preempt && may_take(s, v, j)) t = now_;
        if (can_preempt && v.run.allocated && t == kNever) {
          // Past its contract it may become preemptible as standings move: plan on that.
          t = std::max(now_, shielded_until(v.run));
        }
        t = std::max(t, now_);
        if (t == now_) {
          have += slots_on(v.run.placement, n);
        } else if (t != kNever) {
          releases.emplace_back(t, slots_on(v.run.placement, n));
        }
      }
      at = kNever;
      if (have >= need) {
        at = now_;
      } else {
        std::sort(releases.begin(), releases.end());
        for (const auto& [t, g] : releases) {
          have += g;
          if (have >= need) {
            at = t;
            break;
          }
        }
      }
    }
    ready.push_back(Ready{at, free_now, n, nodes_[n].block});
  }
  Reservation r;
  r.job = j.spec.id;
  r.cluster = c;
  if (static_cast<int>(ready.size()) < shape.nodes) return r;
  auto earlier = [](const Ready& a, const Ready& b) {
    return std::tie(a.at, b.free_now, a.node) < std::tie(b.at, a.free_now, b.node);
  };
  // Within one block if one has enough candidates: the block whose `nodes`-th ready time is
  // earliest; else the earliest candidates anywhere.
  const std::size_t need_nodes = static_cast<std::size_t>(shape.nodes);
  std::sort(ready.begin(), ready.end(), [&](const Ready& a, const Ready& b) {
    return a.block != b.block ? a.block < b.block : earlier(a, b);
  });
  std::size_t best_first = ready.size();
  for (std::size_t g = 0; g < ready.size();) {
    std::size_t end = g;
    while (end < ready.size() && ready[end].block == ready[g].block) ++end;
    if (end - g >= need_nodes &&
        (best_first == ready.size() ||
         earlier(ready[g + need_nodes - 1], ready[best_first + need_nodes - 1]))) {
      best_first = g;
    }
    g = end;
  }
  std::vector<Ready> chosen;
  if (best_first != ready.size()) {
    chosen.assign(ready.begin() + static_cast<std::ptrdiff_t>(best_first),
                  ready.begin() + static_cast<std::ptrdiff_t>(best_first + need_nodes));
  } else {
    std::sort(ready.begin(), ready.end(), earlier);
    chosen.assign(ready.begin(), ready.begin() + shape.nodes);
  }
  r.expected_start = now_;
  for (const Ready& x : chosen) {
    r.nodes.push_back(x.node);
    r.expected_start = std::max(r.expected_start, x.at);
  }
  std::sort(r.nodes.begin(), r.nodes.end());
  return r;
}

}  // namespace allot::core
