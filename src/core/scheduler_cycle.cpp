// The cycle (docs/policy.md §7): failures and drains first (§9), then each cluster's pass: its
// working state, the victims preemption may weigh, and the walk over the pending jobs in queue
// order (§7.1), each considered as in §7.2 (consider.cpp), then the idle capacity and the
// reservations that stand.

#include <algorithm>
#include <set>
#include <tuple>

#include "core/cluster_scratch.h"
#include "core/drain.h"
#include "core/fair_share_walk.h"

namespace allot::core {

CycleResult Scheduler::cycle(Time now, const CycleOptions& options) {
  advance(now);
  refresh_fractions();
  CycleResult out;
  out.now = now_;
  if (options.explain_all) out.waiting.reserve(pending_count_);
  // The walks hold iterators into the queues: sweep erased entries now, never during a walk.
  for (auto& queues : pending_) {
    for (Queue& q : queues) q.compact();
  }
  for (Queue& q : flat_) q.compact();
  stop_failed_and_drained(out);
  std::set<JobId> started;
  for (ClusterId c = 0; c < clusters_.size(); ++c) schedule_cluster(c, options, out, started);
  if (config_.mig_dynamic) {
    for (ClusterId c = 0; c < clusters_.size(); ++c) plan_mig_layouts(c, started, out);
  }
  if (clusters_.size() > 1) {
    // A job that waited in one cluster and started in a later one is not waiting and holds no
    // reservation; a job that waits in several keeps the explanation of the first.
    std::set<JobId> seen;
    std::erase_if(out.waiting, [&](const Explanation& e) {
      return started.count(e.job) > 0 || !seen.insert(e.job).second;
    });
    auto gone = [&](const Reservation& r) { return started.count(r.job) > 0; };
    std::erase_if(out.reservations, gone);
    for (auto& list : reservations_) std::erase_if(list, gone);
  }
  return out;
}

void Scheduler::stop(JobEntry& j, StopDecision d, CycleResult& out, bool gpus_already_free) {
  d.job = j.spec.id;
  d.requeue = j.spec.resumable;
  release(j, gpus_already_free);
  j.state = JobState::Stopping;
  j.run.requeue_on_stop = d.requeue;
  out.stops.push_back(d);
}

void Scheduler::stop_failed_and_drained(CycleResult& out) {
  for (const Node& n : nodes_) {
    if (n.health == NodeHealth::Healthy || jobs_on_node_[n.id].empty()) continue;
    const std::vector<JobEntry*> on_node = jobs_on_node_[n.id];  // stop() edits the list
    for (JobEntry* entry : on_node) {
      JobEntry& j = *entry;
      if (j.state != JobState::Running) continue;
      StopDecision d;
      d.node = n.id;
      if (n.health == NodeHealth::Down) {
        d.reason = StopReason::NodeDown;
        stop(j, d, out);
        continue;
      }
      // Drain: the contract (minimum runtime of this run, or the protected period if it was
      // promoted later) is honoured, then the job stops.
      const Time deadline =
          drain_deadline(j.run.started, j.spec.min_runtime, j.run.allocated, j.run.protected_until);
      if (now_ >= deadline) {
        d.reason = StopReason::Drain;
        stop(j, d, out);
      }
    }
  }
}

void Scheduler::schedule_cluster(ClusterId c, const CycleOptions& options, CycleResult& out,
                                 std::set<JobId>& started) {
  if (!scratch_.p) scratch_.p.reset(new ClusterScratch);
  ClusterScratch& s = *scratch_.p;
  s.reset(c, now_);
  s.explain = options.explain_all;
  // §7 step 3.1: P, A and s for every budget; 3.2: class changes (§6).
  compute_projected(c, s);
  change_classes(c, s, out);

  s.mask.assign(nodes_.size(), 0);
  s.reserved_by.assign(nodes_.size(), kNoJob);
  for (const Reservation& r : reservations_[c]) {
    const JobEntry* h = job(r.job);
    if (!h || h->state != JobState::Pending) continue;
    s.previous.push_back(r.job);
    for (NodeId n : r.nodes) {
      s.mask[n] = 1;
      s.reserved_by[n] = r.job;
    }
  }

  // Debug jobs first (they must start within seconds), then everything else; each pass walks the
  // budget tree in fair-share order.
  // Running jobs a funded request could take, per node, cheapest first.
  for (NodeId n : cluster_nodes_[c]) {
    if (!config_.preemption) break;  // only preemption takes running work
    const std::size_t first = s.exposed.size();
    for (JobEntry* entry : jobs_on_node_[n]) {
      JobEntry& j = *entry;
      if (j.run.allocated && shielded_until(j.run) > now_) continue;
      if (j.run.started == now_) continue;  // never undo this cycle's own decisions
      if (preempted_enough(j)) continue;
      s.exposed.push_back(ClusterScratch::Exposed{&j, j.run.allocated, within_share(s, j),
                                                  work_at_risk(j), slots_on(j.run.placement, n)});
      s.claimable += claims_on() && !j.run.allocated && over_share(s, j);
    }
    if (s.exposed.size() == first) continue;
    std::sort(s.exposed.begin() + static_cast<std::ptrdiff_t>(first), s.exposed.end(),
              [](const auto& x, const auto& y) {
                return std::tie(x.allocated, x.within_share, x.lost, x.job->spec.id) <
                       std::tie(y.allocated, y.within_share, y.lost, y.job->spec.id);
              });
    s.exposed_nodes.emplace_back(n, std::make_pair(first, s.exposed.size()));
  }

  // §7 step 3.3: debug jobs first (they must start within seconds), then everything else, each
  // pass in the policy's order (§7.1). Without explain_all the walk ends once nothing further can
  // start.
  std::uint32_t rank = 0;
  // Nothing more can start, reserve or preempt in this pass (anything_can_start): the walk stops
  // without explain_all, and otherwise only explains the rest (explain_rest).
  bool settled = false;
  // head_of_line_blocking: a job in order could not start, so no job after it may (both passes).
  bool blocked = false;
  for (int pass = 0; pass < 2; ++pass) {
    if (config_.order == QueueOrder::FairShare) {
      Selector sel(*this, s, s.walk, pending_[pass], c);
      BudgetId b = 0;
      std::uint32_t ahead = 0;
      BudgetId inert_budget = kNoBudget;  // the run of inert jobs passed over: its budget, length
      int inert_run = 0;
      while (JobEntry* j = sel.next(&b, &ahead)) {
        if (blocked) {
          if (!options.explain_all) break;
          wait_behind_head(c, s, *j, rank++, ahead, out);
          continue;
        }
        // (Under head-of-line blocking an inert job is the blocked head: it is considered.)
        if (!options.explain_all && !config_.head_of_line_blocking && budget_inert(c, s, pass, b)) {
          // None of b's jobs can start, reserve or preempt now, and considering them would change
          // nothing: the walk goes on as it would after them, except for a holder of last cycle's
          // reservation among them (it may use its own nodes).
          const JobEntry* holder = next_holder(s, pass, b, *j);
          if (holder != j) {
            if (holder) {
              sel.skip_to(b, pending_key(*holder));
            } else {
              sel.drop(b);
            }
            continue;
          }
        }
        // The same for this one job (its budget may fund cheaper ones). The walk still ends as
        // soon as nothing more can start, or it would pass over the whole queue.
        if (!options.explain_all && !config_.head_of_line_blocking && job_inert(c, s, *j)) {
          if (!anything_can_start(c, s)) break;
          // Nothing changes while inert jobs are passed over: in a long queue, after a few steps
          // (a jump costs more than a step), jump to b's next job that may act.
          if (b != inert_budget) inert_run = 0;
          inert_budget = b;
          std::optional<PendingKey> next;
          if (++inert_run >= kInertStepsBeforeJump &&
              pending_[pass][b].size() >= kQueueWorthJumping &&
              next_may_act(c, s, pass, b, pending_key(*j), &next)) {
            if (!next) {
              sel.drop(b);
            } else if (sel.at(b, *next)) {
              inert_run = -kInertStepsAfterVainJump;  // no step saved: step for longer
            } else {
              sel.skip_to(b, *next);
            }
          }
          continue;
        }
        inert_run = 0;
        if (settled && options.shortcut_settled && !needs_consider(s, *j)) {
          explain_rest(c, s, *j, rank++, ahead, out);
          // It waits, as consider() would have found: under head-of-line blocking it is the head.
          blocked = config_.head_of_line_blocking;
          continue;
        }
        consider(c, s, *j, rank++, ahead, out, started);
        if (j->state == JobState::Running) sel.rekey(b);
        if (config_.head_of_line_blocking && j->state == JobState::Pending) {
          blocked = true;
          continue;
        }
        if (!settled && !anything_can_start(c, s)) {
          if (!options.explain_all) break;
          settled = true;  // the rest only waits: explain it
        }
      }
    } else {
      std::vector<std::uint32_t> seen(budgets_.size(), 0);
      int inert_run = 0;  // inert jobs passed over in a row
      for (auto it = flat_[pass].begin(); it != flat_[pass].end();) {
        JobEntry* j = (it++)->second;  // advance first: starting erases the job
        prefetch(it.ahead(kPrefetchDistance));
        const auto& accepted = j->spec.clusters;
        if (!accepted.empty() && std::find(accepted.begin(), accepted.end(), c) == accepted.end()) {
          continue;
        }
        if (blocked) {
          if (!options.explain_all) break;
          wait_behind_head(c, s, *j, rank++, seen[j->spec.budget]++, out);
          continue;
        }
        // As in the fair-share walk: a job that can do nothing now is passed over (unless it is
        // the head that blocks the rest).
        if (!options.explain_all && !config_.head_of_line_blocking && job_inert(c, s, *j)) {
          if (!anything_can_start(c, s)) break;
          // As above, over the flat queue.
          std::optional<PendingKey> next;
          if (++inert_run >= kInertStepsBeforeJump && flat_[pass].size() >= kQueueWorthJumping &&
              next_may_act(c, s, pass, kNoBudget, flat_key(*j), &next)) {
            if (next && it != flat_[pass].end() && it->first == *next) {
              inert_run = -kInertStepsAfterVainJump;  // as above
            } else {
              it = next ? flat_[pass].lower_bound(*next) : flat_[pass].end();
            }
          }
          continue;
        }
        inert_run = 0;
        if (settled && options.shortcut_settled && !needs_consider(s, *j)) {
          explain_rest(c, s, *j, rank++, seen[j->spec.budget]++, out);
          blocked = config_.head_of_line_blocking;  // as in the fair-share walk
          continue;
        }
        consider(c, s, *j, rank++, seen[j->spec.budget]++, out, started);
        if (config_.head_of_line_blocking && j->state == JobState::Pending) {
          blocked = true;
          continue;
        }
        if (!settled && !anything_can_start(c, s)) {
          if (!options.explain_all) break;
          settled = true;
        }
      }
    }
  }

  // §7 step 3.4: what is left idle, and how much of it the largest waiting request cannot use
  // (§7.3, fragmentation).
  ClusterState state;
  state.cluster = c;
  state.largest_waiting_per_node = s.largest_waiting_per_node;
  for (NodeId n : cluster_nodes_[c]) {
    if (!nodes_[n].schedulable()) continue;
    const int free = pool_.whole_free(n);
    state.free_gpus += free;
    if (state.largest_waiting_per_node > 0) {
      state.fragmented_gpus +=
          free < state.largest_waiting_per_node ? free : free % state.largest_waiting_per_node;
    }
  }
  out.clusters.push_back(state);

  // Reservations of holders that were not blocked again this cycle lapse.
  reservations_[c] = s.made;
  out.reservations.insert(out.reservations.end(), s.made.begin(), s.made.end());
}

}  // namespace allot::core
