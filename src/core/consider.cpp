// Considering one job (docs/policy.md §7.2): place on free GPUs, backfill onto reserved ones,
// preempt, or wait with an explanation (§10) and perhaps a reservation (§7.4). Also the start
// itself and the explanation of a job behind a blocked head (§7.1, head-of-line blocking).

#include <algorithm>
#include <limits>
#include <set>

#include "core/cluster_scratch.h"

namespace allot::core {

void Scheduler::start(ClusterScratch& s, JobEntry& j, Placement p, bool allocated, StartMode mode,
                      std::vector<JobId> victims, CycleResult& out) {
  // Asked before the start changes the standings, so that it names what stood in the way.
  BudgetId limiting = kNoBudget;
  bool at_burst_limit = false;
  if (!allocated && j.spec.min_runtime > 0) funded(s, j, &limiting, &at_burst_limit);
  remove_pending(j);
  pool_.take(p);
  j.state = JobState::Running;
  ++j.runs;
  RunInfo& r = j.run;
  r = RunInfo{};
  r.cluster = s.cluster;
  r.placement = std::move(p);
  r.started = now_;
  r.allocated = allocated;
  r.allocated_since = now_;
  r.protected_until = allocated ? protection_end(j) : now_;
  if (allocated) enter_allowance(s, j);  // before its contract is added to P below
  running_[s.cluster].emplace(j.spec.id, &j);
  NodeId last = std::numeric_limits<NodeId>::max();
  for (const GpuSlot& g : r.placement) {
    if (g.node != last) jobs_on_node_[g.node].push_back(&j);
    last = g.node;
    if (s.mask[g.node] && s.reserved_by[g.node] != j.spec.id) r.on_reserved = true;
  }
  const MilliGpuSeconds m = total_milli(r.placement);
  for (BudgetId cur = j.spec.budget; cur != kNoBudget; cur = budgets_.parent(cur)) {
    if (allocated) {
      s.projected[cur] += m * j.spec.min_runtime;
    } else {
      s.rank_extra[cur] += m * config_.usage_bucket;
    }
  }
  if (allocated) charge_rate(j, +1);
  if (allocated && j.spec.kind == JobKind::Inference) s.inference_held += static_cast<Milli>(m);
  if (allocated && j.spec.kind == JobKind::Debug) {
    s.debug_gpus[j.spec.budget] += j.spec.shape.total_gpus();
  }
  if (j.spec.budget < s.held_now.size()) s.held_now[j.spec.budget] += m;
  // A holder that starts gives its reservation up.
  if (s.held_before(j.spec.id))
    for (std::size_t n = 0; n < s.reserved_by.size(); ++n) {
      if (s.reserved_by[n] == j.spec.id) {
        s.reserved_by[n] = kNoJob;
        s.mask[n] = 0;
        ++s.mask_version;
      }
    }
  StartDecision d;
  d.job = j.spec.id;
  d.cluster = s.cluster;
  d.placement = r.placement;
  d.allocated = allocated;
  d.protected_until = r.protected_until;
  d.allowance_until = r.allowance_until;
  d.mode = mode;
  d.victims = std::move(victims);
  d.limiting_budget = limiting;
  d.at_burst_limit = at_burst_limit;
  out.starts.push_back(std::move(d));
}

// J waits: its explanation goes out (with explain_all), and it counts for fragmentation.
void Scheduler::waits(ClusterScratch& s, const Explanation& e, CycleResult& out) const {
  if (e.code != WaitCode::NoMatchingNodes) {
    s.largest_waiting_per_node = std::max(s.largest_waiting_per_node, e.needs_gpus_per_node);
  }
  if (s.explain) out.waiting.push_back(e);
}

// What j's explanation says whatever its turn decides: who it is, where it ranks, whether it is
// funded (docs/policy.md §6) and how its budget stands.
Explanation Scheduler::explanation_of(ClusterId c, const ClusterScratch& s, const JobEntry& j,
                                      std::uint32_t rank, std::uint32_t ahead) const {
  Explanation e;
  e.job = j.spec.id;
  e.cluster = c;
  e.rank = rank;
  e.ahead_in_budget = ahead;
  e.budget = j.spec.budget;
  e.needs_nodes = j.spec.shape.nodes;
  e.needs_gpus_per_node = j.spec.shape.gpus_per_node;
  e.needs_mig = j.spec.shape.mig;
  e.funded = funded(s, j, &e.limiting_budget, &e.at_burst_limit);
  e.standing = j.spec.budget < s.projected.size() ? standing_of(s, j.spec.budget) : kInf;
  if (e.limiting_budget != kNoBudget) e.limiting_standing = standing_of(s, e.limiting_budget);
  return e;
}

// A job behind a blocked head under head_of_line_blocking: it waits whatever is free, and neither
// reserves nor preempts (only the head's turn may), so it is only explained.
void Scheduler::wait_behind_head(ClusterId c, ClusterScratch& s, const JobEntry& j,
                                 std::uint32_t rank, std::uint32_t ahead, CycleResult& out) {
  ++out.stats.considered;
  Explanation e = explanation_of(c, s, j, rank, ahead);
  e.code = e.funded || j.spec.min_runtime == 0 ? WaitCode::WaitingForGpus : WaitCode::NotFunded;
  e.largest_free = pool_.largest_whole_free(c, j.spec.models);
  // A request no node could ever take says so, as in explain_wait: that is for its owner to fix,
  // wherever it stands in line.
  int matching = 0, healthy = 0;
  for (NodeId n : cluster_nodes_[c]) {
    if (!pool_.could_ever_fit(n, j.spec.shape, j.spec.models)) continue;
    ++matching;
    healthy += nodes_[n].schedulable();
  }
  if (matching < j.spec.shape.nodes) {
    e.code = WaitCode::NoMatchingNodes;
  } else if (healthy < j.spec.shape.nodes) {
    e.code = WaitCode::NoHealthyNodes;
  }
  waits(s, e, out);
}

// §7.4: the nodes reserved for a whole-GPU job whose GPUs not in MIG mode are enough for its
// per-node need: their MIG instances are of no use to it. `mask` becomes s.mask with those nodes
// open; false (mask untouched) when there is none.
bool Scheduler::open_reserved_mig_nodes(const ClusterScratch& s, NodeMask& mask) const {
  bool any = false;
  for (NodeId n = 0; n < s.reserved_by.size(); ++n) {
    const JobId h = s.reserved_by[n];
    if (h == kNoJob || !s.mask[n] || !pool_.has_mig(n)) continue;
    const JobEntry* holder = job(h);
    if (holder == nullptr || holder->spec.shape.mig != 0) continue;
    const int need = holder->spec.shape.fractional() ? 1 : holder->spec.shape.gpus_per_node;
    int whole = 0;
    for (int g = 0; g < pool_.gpu_count(n); ++g) whole += !pool_.in_mig_mode(n, g);
    if (whole < need) continue;
    if (!any) mask = s.mask;
    mask[n] = 0;
    any = true;
  }
  return any;
}

void Scheduler::consider(ClusterId c, ClusterScratch& s, JobEntry& j, std::uint32_t rank,
                         std::uint32_t ahead, CycleResult& out, std::set<JobId>& started) {
  ++out.stats.considered;
  const Shape& shape = j.spec.shape;
  const auto& models = j.spec.models;

  Explanation e = explanation_of(c, s, j, rank, ahead);

  // A holder may use its own reserved nodes; everyone else is kept off all reserved nodes.
  const bool holder = s.held_before(j.spec.id);
  if (holder) s.passed.push_back(j.spec.id);
  NodeMask own_mask;
  if (holder) {
    own_mask = s.mask;
    for (NodeId n = 0; n < own_mask.size(); ++n) {
      if (s.reserved_by[n] == j.spec.id) own_mask[n] = 0;
    }
  }
  // §7.4: a job that names a MIG profile may use the instances of a node reserved for whole-GPU
  // work whose holder needs none of the node's GPUs in MIG mode.
  const bool opened = !holder && shape.mig != 0 && open_reserved_mig_nodes(s, own_mask);
  NodeMask& mask = holder || opened ? own_mask : s.mask;

  // §7.2 step 1: free GPUs outside the reservations.
  const ShapeKey key = shape_key(j.spec);
  const std::uint64_t stamp = pool_.generation() * 1000003u + s.mask_version;
  const bool cacheable = !holder && !opened && key.models != ~std::uint64_t{0};
  ShapeMemo scratch_memo;
  ShapeMemo& memo = key.models != ~std::uint64_t{0} ? s.memo[key] : scratch_memo;
  if (!cacheable || memo.failed_at != stamp) {
    ++out.stats.placement_searches;
    if (auto p = place(c, shape, models, &mask)) {
      started.insert(j.spec.id);
      start(s, j, std::move(*p), e.funded,
            s.head_blocked ? StartMode::Backfilled : StartMode::Placed, {}, out);
      return;
    }
    if (cacheable) memo.failed_at = stamp;
  }

  // §7.2 step 2: backfill onto reserved GPUs where it cannot delay their holder.
  if (config_.backfill && !s.made.empty()) {
    const Time end_by = j.spec.expected_duration ? now_ + *j.spec.expected_duration : kNever;
    const Time protected_to = e.funded ? now_ + j.spec.min_runtime : now_;
    const int per_node = shape.fractional() ? 1 : shape.gpus_per_node;
    if (s.made_free_at != pool_.version() || s.made_free.size() != s.made.size()) {
      // Most whole GPUs free on one node of each reservation, refreshed as the pool changes.
      s.made_free.assign(s.made.size(), 0);
      s.made_free_max = 0;
      for (std::size_t i = 0; i < s.made.size(); ++i) {
        for (NodeId n : s.made[i].nodes) {
          s.made_free[i] = std::max(s.made_free[i], pool_.whole_free(n));
        }
        s.made_free_max = std::max(s.made_free_max, s.made_free[i]);
      }
      s.made_free_at = pool_.version();
    }
    // (Speed only: no reservation has a node with room for it, so none would be opened.)
    for (int allocated_pass = 1; allocated_pass >= 0 && per_node <= s.made_free_max;
         --allocated_pass) {
      if (allocated_pass == 0 &&
          (!config_.backfill_unallocated_on_reserved || !config_.preemption)) {
        break;
      }
      // Open the reservations this job cannot delay, search, and close them again: the mask is
      // touched only on reserved nodes, never copied.
      std::vector<NodeId>& opened = s.opened_buffer;
      opened.clear();
      for (std::size_t i = 0; i < s.made.size(); ++i) {
        const Reservation& r = s.made[i];
        if (r.job == j.spec.id || s.made_free[i] < per_node) continue;
        // Only work that declared when it ends can be known to end in time.
        const bool ends_in_time =
            end_by != kNever && end_by <= r.expected_start && protected_to <= r.expected_start;
        // Unallocated work can be evicted when the holder is ready, if the holder may preempt.
        const bool allowed = allocated_pass == 1 ? ends_in_time : s.made_funded[i];
        if (!allowed) continue;
        for (NodeId n : r.nodes) {
          if (!mask[n]) continue;
          mask[n] = 0;
          opened.push_back(n);
        }
      }
      if (opened.empty()) continue;
      ++out.stats.placement_searches;
      auto p = place(c, shape, models, &mask);
      for (NodeId n : opened) mask[n] = 1;
      if (p) {
        started.insert(j.spec.id);
        start(s, j, std::move(*p), allocated_pass == 1 && e.funded, StartMode::Backfilled, {}, out);
        return;
      }
    }
  }

  // A job that several clusters accept waits here only if no later one has room for it now:
  // it neither preempts nor reserves in this cluster when it is about to start in another.
  if (clusters_.size() > 1) {
    for (ClusterId other = c + 1; other < clusters_.size(); ++other) {
      const auto& accepted = j.spec.clusters;
      if (!accepted.empty() &&
          std::find(accepted.begin(), accepted.end(), other) == accepted.end()) {
        continue;
      }
      if (place(other, shape, models, nullptr)) {
        e.code = WaitCode::WaitingForGpus;
        e.largest_free = pool_.largest_whole_free(c, models);
        waits(s, e, out);
        return;
      }
    }
  }

  // §7.2 step 3: preemption (§8), for funded work only: unallocated victims first, then allocated
  // ones past their contract whose branch stands worse by the margin. The first
  // max_preemption_attempts funded blocked jobs in order may preempt this cycle.
  const bool claiming = !e.funded && claims_share(s, j);
  if ((e.funded || claiming) && config_.preemption && !s.exposed_nodes.empty() &&
      (claiming ? s.claims_considered++ < config_.max_claim_attempts
                : s.preemption_considered++ < config_.max_preemption_attempts)) {
    // The same request from the same budget against the same pool fails the same way.
    const auto attempt_key = std::make_pair(key, j.spec.budget * 2 + (claiming ? 1 : 0));
    auto& failed_at = s.preemption_failed[attempt_key];
    if (holder || failed_at != stamp + 1) {
      ++out.stats.preemption_attempts;
      s.claiming = claiming;  // for try_preempt's victim rules only
      const bool took = try_preempt(c, s, j, mask, out);
      s.claiming = false;
      if (took) {
        started.insert(j.spec.id);
        return;
      }
      if (!holder) failed_at = stamp + 1;  // +1: 0 means never tried
    }
  }

  explain_wait(c, s, j, e, memo, out);
}

// §7.2 step 4: j waits. Say why (§10), and plan for the first blocked jobs so they are not starved.
void Scheduler::explain_wait(ClusterId c, ClusterScratch& s, const JobEntry& j, Explanation& e,
                             ShapeMemo& memo, CycleResult& out) {
  const Shape& shape = j.spec.shape;
  const auto& models = j.spec.models;
  if (memo.matching < 0) {
    memo.matching = memo.healthy = 0;
    for (NodeId n : cluster_nodes_[c]) {
      if (!pool_.could_ever_fit(n, shape, models)) continue;
      ++memo.matching;
      memo.healthy += nodes_[n].schedulable();
    }
  }
  const int matching = memo.matching, healthy = memo.healthy;
  if (memo.largest_at != pool_.version()) {
    memo.largest_free = pool_.largest_whole_free(c, models);
    memo.largest_at = pool_.version();
  }
  e.largest_free = memo.largest_free;
  if (matching < shape.nodes) {
    e.code = WaitCode::NoMatchingNodes;
  } else if (healthy < shape.nodes) {
    e.code = WaitCode::NoHealthyNodes;
  } else {
    const bool first_blocked = !s.head_blocked;
    s.head_blocked = true;
    if (config_.reserve_for_blocked && static_cast<int>(s.made.size()) < config_.max_reservations &&
        (first_blocked || e.funded)) {
      // Re-plan from scratch: free the holder's old nodes, then choose the best ones now.
      for (NodeId n = 0; n < s.reserved_by.size(); ++n) {
        if (s.reserved_by[n] == j.spec.id) {
          s.reserved_by[n] = kNoJob;
          s.mask[n] = 0;
          ++s.mask_version;  // nodes opened: cached failures no longer hold
        }
      }
      // Plan around the reservations of jobs ranked above this one (made this cycle); last
      // cycle's reservations of jobs not reached yet rank below it and give way.
      NodeMask above(nodes_.size(), 0);
      for (const Reservation& made : s.made) {
        for (NodeId n : made.nodes) above[n] = 1;
      }
      Reservation r = plan_reservation(c, s, j, above);
      if (!r.nodes.empty()) {
        for (NodeId n : r.nodes) {
          s.mask[n] = 1;
          s.reserved_by[n] = j.spec.id;
        }
        ++s.mask_version;
        e.code = WaitCode::HoldsReservation;
        e.expected_start = r.expected_start;
        s.made.push_back(std::move(r));
        s.made_funded.push_back(e.funded);
        waits(s, e, out);
        return;
      }
    }
    e.code = e.funded || j.spec.min_runtime == 0 ? WaitCode::WaitingForGpus : WaitCode::NotFunded;
    const std::uint64_t now_stamp = pool_.generation() * 1000003u + s.mask_version;
    if (!s.made.empty() && memo.probed_at != now_stamp) {
      memo.fits_unmasked = place(c, shape, models, nullptr).has_value();
      memo.probed_at = now_stamp;
    }
    if (!s.made.empty() && memo.fits_unmasked) {
      e.code = WaitCode::BlockedByReservation;
      e.reserved_for = s.made.front().job;
      e.expected_start = s.made.front().expected_start;
    }
  }
  waits(s, e, out);
}

}  // namespace allot::core
