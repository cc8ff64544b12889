// Speed only; decisions unchanged. The tests that let a cycle pass over jobs, budgets or the rest
// of the queue that provably can do nothing now (docs/policy.md §7, the paragraphs after the
// numbered steps; docs/design/0001), the explanation-only rest of a settled pass, and the
// strict baselines' skipped wake-ups. Each answers only what is certain: the property tests
// compare every decision and explanation with and without them.

#include <algorithm>
#include <limits>
#include <tuple>

#include "core/cluster_scratch.h"

namespace allot::core {

// Whether only events (arrivals, ends, health changes) can change a decision: every job funded,
// no contract to expire, no preemption, no reservations to re-plan, no fair-share standings, no
// node draining its jobs at their minimum runtime (the strict baselines). Then a cycle decides on
// the queue and the free GPUs alone, and waking up for time's sake would decide nothing.
bool Scheduler::only_events_decide() const {
  if (config_.funding != Funding::Always || config_.order == QueueOrder::FairShare ||
      config_.preemption || config_.minimum_runtime_contract || config_.reserve_for_blocked) {
    return false;
  }
  return std::none_of(nodes_.begin(), nodes_.end(), [](const Node& n) { return n.draining(); });
}

// Most whole GPUs free on one node that a job not yet considered could use: reserved nodes count
// only where backfill may open them (see consider, step 2) or their holder has not had its turn.
int Scheduler::usable_whole_free(ClusterId c, const ClusterScratch& s) const {
  const auto key =
      std::make_tuple(pool_.version(), s.mask_version, s.made.size() + (s.passed.size() << 32));
  if (s.usable_free_key == key) return s.usable_free;
  int best = 0;
  for (NodeId n : cluster_nodes_[c]) {
    const int free = pool_.whole_free(n);
    if (free <= best || !nodes_[n].schedulable()) continue;
    if (s.mask[n]) {
      // A holder of last cycle that has not been considered yet may start there or free them.
      bool usable = !s.passed_by(s.reserved_by[n]);
      for (std::size_t i = 0; i < s.made.size(); ++i) {
        if (s.made[i].job != s.reserved_by[n]) continue;
        usable =
            (s.made_funded[i] && config_.preemption && config_.backfill_unallocated_on_reserved) ||
            pending_with_end_ > 0;  // work that declared its end may fit before the start
      }
      if (!usable) continue;
    }
    best = free;
  }
  s.usable_free_key = key;
  s.usable_free = best;
  return best;
}

// Whether j must still go through consider() once the pass has settled: a holder of last
// cycle's reservation (it may re-plan or give its nodes up) or a job another cluster accepts (it
// may wait for that cluster instead).
bool Scheduler::needs_consider(const ClusterScratch& s, const JobEntry& j) const {
  return clusters_.size() > 1 || s.held_before(j.spec.id);
}

// Whether any pending job could still start, or get a reservation, in this cluster pass. Only
// conservative answers: "no" must be certain, since the walk stops on it.
bool Scheduler::anything_can_start(ClusterId c, const ClusterScratch& s) const {
  if (config_.reserve_for_blocked && static_cast<int>(s.made.size()) < config_.max_reservations) {
    return true;
  }
  if (config_.preemption && !s.exposed_nodes.empty() &&
      s.preemption_considered < config_.max_preemption_attempts) {
    return true;
  }
  if (claim_may_act(s)) return true;
  if (!pending_per_node_.empty() && usable_whole_free(c, s) >= *pending_per_node_.begin()) {
    return true;
  }
  return !pending_fraction_.empty() && pool_.largest_gpu_free(c) >= *pending_fraction_.begin();
}

// Whether no pending job of budget b in this pass, other than a holder of last cycle's reservation,
// can do anything in the current state: none fits on free GPUs it may use, and none is funded
// while a funded job could still reserve or preempt (the first blocked job of the cycle has been
// seen, so an unfunded one cannot reserve). Only certain answers: "yes" lets the walk pass over
// the budget. Considering such a job changes no state (its explanation aside), so the jobs after
// it would be considered in the same state, and are just as inert.
bool Scheduler::budget_inert(ClusterId c, const ClusterScratch& s, int pass, BudgetId b) const {
  if (!s.head_blocked || config_.funding != Funding::Lookback) return false;
  const auto& sizes = pending_sizes_[pass];
  if (b >= sizes.size() || !budgets_.valid(b)) return false;
  const PendingSizes& mine = sizes[b];
  // A lower bound on the total size of b's requests: the smallest one node's part of any.
  Milli smallest = std::numeric_limits<Milli>::max();
  if (!mine.per_node.empty()) smallest = *mine.per_node.begin() * kWholeGpu;
  if (!mine.fraction.empty()) smallest = std::min(smallest, *mine.fraction.begin());
  // Funding matters while a funded job could still reserve or preempt in this pass.
  if (funded_may_act(s)) {
    if (mine.debug > 0 && config_.debug_always_funded) return false;
    // The cheapest contract is not affordable, or the smallest request exceeds the burst cap (and
    // no interactive job, which the allowance funds past it, waits), so none is funded (both
    // tests are monotone).
    BudgetId unused = kNoBudget;
    if (!mine.contracts.empty() && within_allocation(s, b, *mine.contracts.begin(), &unused) &&
        (within_burst(s, b, smallest, &unused) ||
         (allowance_on() && !mine.interactive_contracts.empty()))) {
      return false;
    }
  }
  // A share claim could still be tried, and the smallest request fits b's room under its share.
  if (claim_may_act(s) && smallest <= share_room(s, b)) return false;
  if (!mine.per_node.empty() && *mine.per_node.begin() <= backfill_whole_free(c, s)) return false;
  return mine.fraction.empty() || pool_.largest_gpu_free(c) < *mine.fraction.begin();
}

// budget_inert for one job: it cannot be placed where it may go, and is not funded while a funded
// job could still reserve or preempt, and holds no reservation of last cycle.
bool Scheduler::job_inert(ClusterId c, const ClusterScratch& s, const JobEntry& j) const {
  if (!s.head_blocked || s.held_before(j.spec.id)) return false;
  const Shape& shape = j.spec.shape;
  if (shape.fractional() ? pool_.largest_gpu_free(c) >= shape.gpu_milli
                         : shape.gpus_per_node <= backfill_whole_free(c, s)) {
    return false;
  }
  BudgetId unused = kNoBudget;
  if (claim_may_act(s) && claims_share(s, j)) return false;
  return !funded_may_act(s) || !funded(s, j, &unused);
}

// Whether a share claim could still try preemption in this pass.
bool Scheduler::claim_may_act(const ClusterScratch& s) const {
  return s.claimable > 0 && s.claims_considered < config_.max_claim_attempts;
}

// Whether a funded job could still reserve nodes or try preemption in this pass.
bool Scheduler::funded_may_act(const ClusterScratch& s) const {
  return (config_.reserve_for_blocked &&
          static_cast<int>(s.made.size()) < config_.max_reservations) ||
         (config_.preemption && !s.exposed_nodes.empty() &&
          s.preemption_considered < config_.max_preemption_attempts);
}

// Where a walk that passes over an inert job (job_inert) may resume: *next = the first job after
// `after` in its queue (budget b's own, or the flat queue when b is kNoBudget) that is not
// certainly inert as well — one that fits where job_inert looks, a holder of last cycle's
// reservations, or, while a funded job could still reserve or preempt (funded_may_act), one that
// could be funded — or none. Passing over inert jobs changes no state, so the walk's decisions
// are the same. Returns false where the funded jobs cannot be told by size (the flat queue, or a
// funding rule other than the lookback's, while funded_may_act): the walk then steps.
bool Scheduler::next_may_act(ClusterId c, const ClusterScratch& s, int pass, BudgetId b,
                             const PendingKey& after, std::optional<PendingKey>* next) const {
  const bool funding_matters = funded_may_act(s);
  if (funding_matters && (b == kNoBudget || config_.funding != Funding::Lookback)) return false;
  if (claim_may_act(s) && b == kNoBudget) return false;
  next->reset();
  const PendingSizes* mine = b == kNoBudget ? nullptr : &pending_sizes_[pass][b];
  (mine ? mine->fit : flat_fit_[pass])
      .first_fitting(after, backfill_whole_free(c, s), pool_.largest_gpu_free(c), next);
  if (funding_matters) {
    // Funded under the lookback rule (funded()): a debug job with a contract by its own rule, or
    // a job with a contract within the burst limit (monotone in its size) and the allocation.
    BudgetId unused = kNoBudget;
    mine->contracts_by_milli.first_after(
        after, [&](Milli milli) { return within_burst(s, b, milli, &unused); }, next);
    if (config_.debug_always_funded) {
      const auto it = mine->debug_contracts.upper_bound(after);
      if (it != mine->debug_contracts.end() && (!*next || *it < **next)) *next = *it;
    }
    if (allowance_on()) {  // the interactive allowance funds past the burst limit (§6)
      const auto it = mine->interactive_contracts.upper_bound(after);
      if (it != mine->interactive_contracts.end() && (!*next || *it < **next)) *next = *it;
    }
  }
  if (claim_may_act(s)) {
    const Milli room = share_room(s, b);
    mine->all_by_milli.first_after(
        after, [&](Milli milli) { return milli <= room; }, next);
  }
  for (JobId h : s.previous) {
    const JobEntry& e = jobs_.at(h);
    if (pass_of(e.spec) != pass || (b != kNoBudget && e.spec.budget != b)) continue;
    const PendingKey key = b == kNoBudget ? flat_key(e) : pending_key(e);
    if (after < key && (!*next || key < **next)) *next = key;
  }
  return true;
}

// The first holder of last cycle's reservations among b's pending jobs of this pass at or after
// `from` in b's order (nullptr if none).
const JobEntry* Scheduler::next_holder(const ClusterScratch& s, int pass, BudgetId b,
                                       const JobEntry& from) const {
  const JobEntry* best = nullptr;
  const PendingKey lo = pending_key(from);
  for (JobId h : s.previous) {
    const JobEntry& e = jobs_.at(h);
    if (e.spec.budget != b || pass_of(e.spec) != pass || pending_key(e) < lo) continue;
    if (!best || pending_key(e) < pending_key(*best)) best = &e;
  }
  return best;
}

// Most whole GPUs free on one node that a job that holds no reservation may use: nodes outside
// every reservation, and the nodes of this cycle's reservations whose holder may preempt
// (evictable backfill, consider step 2) or, while some pending job declared an expected duration,
// any of them (it may end before the holder's start, step 2). Counting a node that a given job
// may not use only makes the inert tests answer "no" more often.
int Scheduler::backfill_whole_free(ClusterId c, const ClusterScratch& s) const {
  const auto key = std::make_tuple(pool_.version(), s.mask_version, s.made.size());
  if (s.backfill_free_key == key) return s.backfill_free;
  const bool evictable =
      config_.backfill && config_.backfill_unallocated_on_reserved && config_.preemption;
  int best = 0;
  for (NodeId n : cluster_nodes_[c]) {
    const int free = pool_.whole_free(n);
    if (free <= best || !nodes_[n].schedulable()) continue;
    if (s.mask[n]) {
      bool usable = false;
      for (std::size_t i = 0; i < s.made.size(); ++i) {
        if (s.made[i].job == s.reserved_by[n]) {
          usable = (evictable && s.made_funded[i]) || pending_with_end_ > 0;
        }
      }
      if (!usable) continue;
    }
    best = free;
  }
  s.backfill_free_key = key;
  s.backfill_free = best;
  return best;
}

// The rest of a pass once nothing more can start, reserve or preempt (anything_can_start() said
// no, and nothing that happens to the jobs after can make it say yes): what consider() would
// decide for j is that it waits, so only its explanation is made, without consider()'s searches.
// Holders of last cycle's reservations and jobs that another cluster accepts still go through
// consider(). Speed only: the explanations are consider()'s (the property tests compare them).
void Scheduler::explain_rest(ClusterId c, ClusterScratch& s, const JobEntry& j, std::uint32_t rank,
                             std::uint32_t ahead, CycleResult& out) {
  ++out.stats.considered;
  Explanation e = explanation_of(c, s, j, rank, ahead);
  const ShapeKey key = shape_key(j.spec);
  ShapeMemo scratch_memo;
  ShapeMemo& memo = key.models != ~std::uint64_t{0} ? s.memo[key] : scratch_memo;
  // consider() counts the attempt it may no longer make (step 3).
  if (e.funded && config_.preemption && !s.exposed_nodes.empty()) ++s.preemption_considered;
  // (Past the limit the count is only compared with it: it need not grow.)
  if (s.claims_considered < config_.max_claim_attempts && !e.funded && config_.preemption &&
      !s.exposed_nodes.empty() && claims_share(s, j)) {
    ++s.claims_considered;
  }
  explain_wait(c, s, j, e, memo, out);
}

}  // namespace allot::core
