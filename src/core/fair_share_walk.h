// Fair-share queue order (docs/policy.md §7.1): Scheduler::Selector walks the budget tree, at each
// level the least-served active branch first. Header-only so that the walk (scheduler_cycle.cpp)
// inlines its per-job steps. Internal to src/core.
//
// Thread-safety: none; a Selector lives for one pass of one cluster, in the working state of that
// pass (ClusterScratch::WalkState).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/cluster_scratch.h"

namespace allot::core {

// Picks the next pending job by walking the budget tree: at each level the active child (a
// subtree with jobs left) whose standing is lowest; within a budget, its own queue order. Standings
// change as jobs start, so the order adapts within one cycle.
class Scheduler::Selector {
 public:
  using Key = RankKey;

  // Walks `queues` (one per budget) lazily, taking only jobs that accept `cluster`, in the
  // working state `w` (whatever an earlier walk left there).
  Selector(const Scheduler& sched, const ClusterScratch& s, ClusterScratch::WalkState& w,
           const std::vector<Queue>& queues, ClusterId cluster)
      : tree_(sched.budgets_),
        sched_(sched),
        s_(s),
        queues_(queues),
        cluster_(cluster),
        active_(w.active),
        key_(w.key),
        own_key_(w.own_key),
        in_parent_(w.in_parent),
        it_(w.it),
        ahead_(w.ahead) {
    const std::size_t n = tree_.size();
    active_.resize(n);
    for (RankSet& a : active_) a.clear();
    key_.resize(n);
    own_key_.resize(n);
    in_parent_.assign(n, 0);
    it_.resize(n);
    ahead_.assign(n, 0);
    for (BudgetId b = 0; b < queues_.size() && b < n; ++b) {
      it_[b] = queues_[b].begin();  // end() when empty: no iterator is left from another walk
      if (queues_[b].empty()) continue;
      skip(b);
      if (it_[b] == queues_[b].end()) continue;
      own_key_[b] = key_for(b);
      active_[b].insert(own_key_[b]);
      link_up(b);
    }
  }

  // The next job and its budget; nullptr when every queue is done. The job is taken off the walk
  // before it is returned, so starting it (which erases it from its queue) is safe.
  JobEntry* next(BudgetId* budget, std::uint32_t* ahead) {
    BudgetId cur = tree_.root();
    for (;;) {
      if (active_[cur].empty()) return nullptr;
      const BudgetId pick = active_[cur].front().id;
      if (pick == cur) break;
      cur = pick;
    }
    *budget = cur;
    *ahead = ahead_[cur]++;
    JobEntry* j = (it_[cur]++)->second;
    prefetch(it_[cur].ahead(kPrefetchDistance));
    skip(cur);
    if (it_[cur] == queues_[cur].end()) unlink(cur);
    return j;
  }

  // Passes over the rest of b's own queue.
  void drop(BudgetId b) {
    if (b >= queues_.size() || it_[b] == queues_[b].end()) return;
    it_[b] = queues_[b].end();
    unlink(b);
  }

  // Passes over b's jobs ranked before `key` (a job of b not yet walked).
  void skip_to(BudgetId b, const PendingKey& key) {
    if (b >= queues_.size() || it_[b] == queues_[b].end()) return;
    it_[b] = queues_[b].lower_bound(key);
    skip(b);
    if (it_[b] == queues_[b].end()) unlink(b);
  }

  // Whether `key` is that of b's next job in this walk.
  bool at(BudgetId b, const PendingKey& key) const {
    return b < queues_.size() && it_[b] != queues_[b].end() && it_[b]->first == key;
  }

  // Standings along b's path changed: re-sort b and its ancestors among their siblings.
  void rekey(BudgetId b) {
    if (b < queues_.size() && it_[b] != queues_[b].end() && active_[b].erase(own_key_[b])) {
      own_key_[b] = key_for(b);
      active_[b].insert(own_key_[b]);
    }
    for (BudgetId cur = b; cur != tree_.root(); cur = tree_.parent(cur)) {
      if (!in_parent_[cur]) continue;
      auto& siblings = active_[tree_.parent(cur)];
      siblings.erase(key_[cur]);
      key_[cur] = key_for(cur);
      siblings.insert(key_[cur]);
    }
  }

 private:
  void skip(BudgetId b) {
    auto& it = it_[b];
    while (it != queues_[b].end()) {
      const auto& accepted = it->second->spec.clusters;
      if (accepted.empty() ||
          std::find(accepted.begin(), accepted.end(), cluster_) != accepted.end()) {
        return;
      }
      ++it;
    }
  }

  // b's own queue is done: take it off the walk, and its ancestors that have nothing left.
  void unlink(BudgetId cur) {
    active_[cur].erase(own_key_[cur]);
    for (BudgetId b = cur; b != tree_.root() && active_[b].empty();) {
      const BudgetId parent = tree_.parent(b);
      active_[parent].erase(key_[b]);
      in_parent_[b] = 0;
      b = parent;
    }
  }

  Key key_for(BudgetId b) const {
    const MilliGpuSeconds extra = s_.rank_extra[b];
    return Key{sched_.standing_of(s_, b, extra), s_.projected[b] + extra, b};
  }

  void link_up(BudgetId b) {
    for (BudgetId cur = b; cur != tree_.root() && !in_parent_[cur]; cur = tree_.parent(cur)) {
      key_[cur] = key_for(cur);
      active_[tree_.parent(cur)].insert(key_[cur]);
      in_parent_[cur] = 1;
    }
  }

  const BudgetTree& tree_;
  const Scheduler& sched_;
  const ClusterScratch& s_;
  const std::vector<Queue>& queues_;
  ClusterId cluster_;
  std::vector<RankSet>& active_;
  std::vector<Key>& key_;      // key of a node in its parent's set
  std::vector<Key>& own_key_;  // key of a node's own queue in its own set
  std::vector<char>& in_parent_;
  std::vector<Queue::const_iterator>& it_;
  std::vector<std::uint32_t>& ahead_;
};

}  // namespace allot::core
