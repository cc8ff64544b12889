// Preemption (docs/policy.md §8): which running jobs a funded request may take, each rule a small
// named function tagged with its §8 rule, and the search for the cheapest victims.

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "core/cluster_scratch.h"
#include "core/pool_trial.h"

namespace allot::core {

// docs/policy.md section 8, "GPU-seconds lost" (the work at risk): GPU-seconds a running job would
// lose if stopped now: all it did in this run, or for a resumable job at most what it did since its
// last checkpoint.
double Scheduler::work_at_risk(const JobEntry& j) const {
  const Duration ran = now_ - j.run.started;
  const Duration at_risk =
      j.spec.resumable ? std::min(ran, config_.assumed_checkpoint_interval) : ran;
  return static_cast<double>(total_milli(j.run.placement)) / kWholeGpu *
         static_cast<double>(at_risk);
}

// docs/policy.md section 8, the two tiers: whether requester r may take running v, and why (tier 1:
// v is unallocated; tier 2: v is allocated, past its contract, and its branch stands worse than
// r's by the margin).
bool Scheduler::preemptible_by(const ClusterScratch& s, const JobEntry& v, const JobEntry& r,
                               VictimReason* why) const {
  why->ran_for = now_ - v.run.started;
  if (s.claiming) {
    why->cls = VictimClass::AboveShare;
    why->victim_branch = v.spec.budget;
    why->requester_branch = r.spec.budget;
    return !v.run.allocated && v.spec.budget != r.spec.budget && over_share(s, v) &&
           unallocated_loss_ok(v, r);
  }
  if (!v.run.allocated) {
    why->cls = VictimClass::Unallocated;
    // A strict-priority scheduler lets only higher priority take preemptible work.
    return (config_.order != QueueOrder::Priority || v.spec.priority < r.spec.priority) &&
           unallocated_loss_ok(v, r);
  }
  // The contract: never inside minimum runtime, nor inside the interactive allowance (§6).
  if (now_ < shielded_until(v.run)) return false;
  const BudgetId a = budgets_.common_ancestor(v.spec.budget, r.spec.budget);
  if (a == v.spec.budget || a == r.spec.budget) return false;  // same budget: priority only orders
  const BudgetId bv = budgets_.child_on_path(a, v.spec.budget);
  const BudgetId br = budgets_.child_on_path(a, r.spec.budget);
  const MilliGpuSeconds cost = r.spec.shape.total_milli() * r.spec.min_runtime;
  why->cls = VictimClass::OverAllocation;
  why->victim_branch = bv;
  why->requester_branch = br;
  why->victim_standing = standing_of(s, bv);
  why->requester_standing = standing_of(s, br, cost);
  return why->victim_standing > why->requester_standing + config_.preemption_margin;
}

// preemptible_by without the reason, for weighing many victims for one requester: the branch
// comparison depends only on the victim's budget while standings stand still (within one search),
// so it is made once per budget. Call s.new_requester() before each search.
bool Scheduler::may_take(ClusterScratch& s, const JobEntry& v, const JobEntry& r) const {
  if (preempted_enough(v)) return false;
  if (s.claiming) {
    VictimReason why;  // a share claim: only unallocated work of another leaf above its share
    return preemptible_by(s, v, r, &why);
  }
  if (!v.run.allocated) {
    return (config_.order != QueueOrder::Priority || v.spec.priority < r.spec.priority) &&
           unallocated_loss_ok(v, r);
  }
  if (now_ < shielded_until(v.run)) return false;
  const BudgetId b = v.spec.budget;
  if (s.taker_memo_at.size() <= b) {
    s.taker_memo_at.resize(budgets_.size(), 0);
    s.taker_memo.resize(budgets_.size(), 0);
  }
  if (s.taker_memo_at[b] != s.taker_stamp) {
    VictimReason why;
    s.taker_memo[b] = preemptible_by(s, v, r, &why);
    s.taker_memo_at[b] = s.taker_stamp;
  }
  return s.taker_memo[b];
}

// docs/policy.md section 8, "Preempted enough": a job started more than max_preemptions_per_job
// times (earlier incarnations included) is no longer a victim.
bool Scheduler::preempted_enough(const JobEntry& v) const {
  return config_.max_preemptions_per_job > 0 && v.runs > config_.max_preemptions_per_job;
}

// docs/policy.md section 8, "Victims within their share": unallocated work of a leaf budget that
// holds at most its fraction of the cluster (at the start of the cycle) is taken last.
bool Scheduler::within_share(const ClusterScratch& s, const JobEntry& v) const {
  if (!config_.spare_work_within_share || v.run.allocated || v.run.on_reserved) return false;
  const BudgetId b = v.spec.budget;
  return static_cast<double>(s.held_all[b]) <=
         fraction_[s.cluster][b] * static_cast<double>(capacity_[s.cluster]);
}

// Whether share claims act: a rule of lookback funding, by preemption.
bool Scheduler::claims_on() const {
  return config_.share_claims && config_.funding == Funding::Lookback && config_.preemption;
}

// Room left under leaf b's share of the cluster, counting every GPU it runs now.
Milli Scheduler::share_room(const ClusterScratch& s, BudgetId b) const {
  if (!claims_on() || b >= s.held_now.size()) return -1;
  const double share = fraction_[s.cluster][b] * static_cast<double>(capacity_[s.cluster]);
  return static_cast<Milli>(share) - s.held_now[b];
}

// Whether unfunded j may still take unallocated work above share: some leaf runs such work, and
// j's own leaf, with j, stays within its share.
bool Scheduler::claims_share(const ClusterScratch& s, const JobEntry& j) const {
  return s.claimable > 0 && j.spec.shape.total_milli() <= share_room(s, j.spec.budget);
}

// Whether v's leaf runs more than its share of the cluster (at the start of the cycle).
bool Scheduler::over_share(const ClusterScratch& s, const JobEntry& v) const {
  const BudgetId b = v.spec.budget;
  return b < s.held_all.size() &&
         static_cast<double>(s.held_all[b]) >
             fraction_[s.cluster][b] * static_cast<double>(capacity_[s.cluster]);
}

// docs/policy.md section 8, "Unallocated non-resumable victims that hold a contract": whether
// unallocated `v` is work whose loss max_unallocated_loss_ratio limits: it is not resumable
// (resumable work loses at most a checkpoint interval), holds a contract (minimum runtime > 0:
// demoted past its contract, or started while its budget was over) and is not backfilled onto
// another job's reservation (evictable by design, or large jobs would starve).
bool Scheduler::unallocated_loss_limited(const JobEntry& v) const {
  return config_.max_unallocated_loss_ratio > 0 && !v.run.allocated && v.spec.min_runtime > 0 &&
         !v.spec.resumable && !v.run.on_reserved;
}

// GPU-seconds of the contract a request guarantees: its GPUs x its minimum runtime.
double Scheduler::contract_gpu_seconds(const JobEntry& r) {
  return static_cast<double>(r.spec.shape.total_milli()) / kWholeGpu *
         static_cast<double>(r.spec.min_runtime);
}

// docs/policy.md section 8, the same rule per victim: whether taking unallocated `v` for `r` stays
// within max_unallocated_loss_ratio on its own (the total is losses_within_limits').
bool Scheduler::unallocated_loss_ok(const JobEntry& v, const JobEntry& r) const {
  return !unallocated_loss_limited(v) || patience_over(r) ||
         work_at_risk(v) <= config_.max_unallocated_loss_ratio * contract_gpu_seconds(r);
}

// docs/policy.md section 8, unallocated_loss_patience: whether requester `r` has waited
// unallocated_loss_patience since it was submitted: from then on max_unallocated_loss_ratio no
// longer holds it back, so no unallocated work squats for long.
bool Scheduler::patience_over(const JobEntry& r) const {
  return config_.unallocated_loss_patience > 0 &&
         now_ - r.spec.submit_time >= config_.unallocated_loss_patience;
}

// docs/policy.md section 8, the loss limits on the chosen victims together: allocated work is not
// destroyed beyond what the requester is guaranteed to do in its place (max_allocated_loss_ratio),
// nor is unallocated non-resumable work that holds a contract (max_unallocated_loss_ratio, in
// all), unless the requester has waited its patience.
bool Scheduler::losses_within_limits(const std::vector<JobId>& victims, const JobEntry& j) const {
  if (config_.max_allocated_loss_ratio > 0 || config_.max_unallocated_loss_ratio > 0) {
    double allocated_lost = 0;
    double unallocated_lost = 0;
    for (JobId vid : victims) {
      const JobEntry& v = jobs_.at(vid);
      if (v.run.allocated) allocated_lost += work_at_risk(v);
      if (unallocated_loss_limited(v)) unallocated_lost += work_at_risk(v);
    }
    const double contract = contract_gpu_seconds(j);
    if (config_.max_allocated_loss_ratio > 0 &&
        allocated_lost > config_.max_allocated_loss_ratio * contract) {
      return false;
    }
    if (!patience_over(j) && unallocated_lost > config_.max_unallocated_loss_ratio * contract) {
      return false;
    }
  }
  return true;
}

// docs/policy.md section 8, "Victim choice": the cheapest victims on the cheapest node (or, for a
// gang, set of nodes in one block), checked by a what-if placement.
bool Scheduler::try_preempt(ClusterId c, ClusterScratch& s, JobEntry& j, const NodeMask& mask,
                            CycleResult& out) {
  s.new_requester();
  const Shape& shape = j.spec.shape;
  using Cost = ClusterScratch::PreemptCost;
  using NodeOption = ClusterScratch::NodeOption;
  // Buffers reused across attempts: a failed attempt allocates nothing.
  std::vector<NodeOption>& options = s.option_buffer;
  std::vector<const ClusterScratch::Exposed*>& cands = s.candidate_buffer;
  std::vector<JobId>& victims_of = s.victim_buffer;
  std::vector<Milli>& extra = s.extra_buffer;
  options.clear();
  victims_of.clear();

  // Nodes with a job that could be taken, plus, for a gang, nodes already free enough.
  auto consider_node = [&](NodeId n, std::size_t first, std::size_t last) {
    if (!nodes_[n].schedulable() || mask[n] || !pool_.could_ever_fit(n, shape, j.spec.models)) {
      return;
    }
    // Candidates on this node, unallocated before allocated, cheapest loss first.
    cands.clear();
    int could_free = pool_.whole_free(n);
    for (std::size_t i = first; i < last; ++i) {
      const ClusterScratch::Exposed& x = s.exposed[i];
      if (x.job->state != JobState::Running) continue;  // stopped earlier in this cycle
      if (!may_take(s, *x.job, j)) continue;
      cands.push_back(&x);
      could_free += x.gpus_here;
    }
    // Even taking every candidate would not make room (an upper bound: a slot may be a fraction).
    if (!shape.fractional() && could_free < shape.gpus_per_node) return;
    const bool fits_now = shape.fractional() ? (extra.assign(pool_.gpu_count(n), 0),
                                                pool_.fits_node_with(n, shape, extra))
                                             : pool_.whole_free(n) >= shape.gpus_per_node;
    if (fits_now) {
      options.push_back(NodeOption{n, {}, victims_of.size(), victims_of.size()});
      return;
    }
    extra.assign(static_cast<std::size_t>(pool_.gpu_count(n)), 0);
    auto give_back = [&](const ClusterScratch::Exposed* x, Milli sign) {
      for (const GpuSlot& g : x->job->run.placement) {
        if (g.node == n) extra[g.gpu] += sign * g.milli;
      }
    };
    bool fits = false;
    std::size_t taken = 0;
    for (; taken < cands.size() && !fits; ++taken) {
      give_back(cands[taken], +1);
      fits = pool_.fits_node_with(n, shape, extra);
    }
    if (!fits) return;
    // Drop victims that turned out not to be needed, most expensive first.
    std::vector<char>& keep = s.keep_buffer;
    keep.assign(taken, 1);
    for (std::size_t k = taken; k-- > 0;) {
      give_back(cands[k], -1);
      if (pool_.fits_node_with(n, shape, extra)) {
        keep[k] = 0;
      } else {
        give_back(cands[k], +1);
      }
    }
    NodeOption o{n, {}, victims_of.size(), victims_of.size()};
    for (std::size_t k = 0; k < taken; ++k) {
      if (!keep[k]) continue;
      o.cost.allocated_lost += cands[k]->allocated ? cands[k]->lost : 0.0;
      o.cost.within_share += cands[k]->within_share ? 1 : 0;
      o.cost.lost += cands[k]->lost;
      ++o.cost.count;
      victims_of.push_back(cands[k]->job->spec.id);
    }
    o.last = victims_of.size();
    options.push_back(o);
  };
  for (const auto& [n, range] : s.exposed_nodes) consider_node(n, range.first, range.second);
  if (shape.gang()) {
    for (NodeId n : cluster_nodes_[c]) {
      const bool exposed = std::binary_search(
          s.exposed_nodes.begin(), s.exposed_nodes.end(), std::make_pair(n, std::make_pair(0, 0)),
          [](const auto& x, const auto& y) { return x.first < y.first; });
      if (!exposed && pool_.whole_free(n) >= shape.gpus_per_node) consider_node(n, 0, 0);
    }
  }
  if (static_cast<int>(options.size()) < shape.nodes) return false;

  // Choose nodes: the cheapest one, or for a gang the cheapest set within one block if possible.
  auto by_cost = [](const NodeOption* x, const NodeOption* y) {
    return std::tie(x->cost, x->node) < std::tie(y->cost, y->node);
  };
  std::vector<const NodeOption*> chosen;
  if (!shape.gang()) {
    const NodeOption* best = nullptr;
    for (const NodeOption& o : options) {
      if (!best || by_cost(&o, best)) best = &o;
    }
    chosen.push_back(best);
  } else {
    std::map<BlockId, std::vector<const NodeOption*>> by_block;
    std::vector<const NodeOption*> all;
    for (const NodeOption& o : options) {
      by_block[nodes_[o.node].block].push_back(&o);
      all.push_back(&o);
    }
    auto sum = [&](const std::vector<const NodeOption*>& v) {
      Cost t;
      for (int i = 0; i < shape.nodes; ++i) {
        t.allocated_lost += v[i]->cost.allocated_lost;
        t.within_share += v[i]->cost.within_share;
        t.lost += v[i]->cost.lost;
        t.count += v[i]->cost.count;
      }
      return t;
    };
    std::optional<Cost> best;
    for (auto& [block, v] : by_block) {
      if (static_cast<int>(v.size()) < shape.nodes) continue;
      std::sort(v.begin(), v.end(), by_cost);
      const Cost t = sum(v);
      if (!best || t < *best) {
        best = t;
        chosen.assign(v.begin(), v.begin() + shape.nodes);
      }
    }
    if (chosen.empty()) {
      if (!config_.gang_spans_blocks) return false;
      std::sort(all.begin(), all.end(), by_cost);
      chosen.assign(all.begin(), all.begin() + shape.nodes);
    }
  }
  std::vector<JobId> victims;
  for (const NodeOption* o : chosen) {
    victims.insert(victims.end(), victims_of.begin() + static_cast<std::ptrdiff_t>(o->first),
                   victims_of.begin() + static_cast<std::ptrdiff_t>(o->last));
  }
  std::sort(victims.begin(), victims.end());
  victims.erase(std::unique(victims.begin(), victims.end()), victims.end());
  if (victims.empty()) return false;  // it fits without victims only if a search above missed it
  if (!losses_within_limits(victims, j)) return false;

  // What-if: hand the victims' GPUs back and place; the trial undoes itself if it still does not
  // fit. Kept, the victims' GPUs stay free, and their stops below only record them.
  PoolTrial trial(pool_);
  for (JobId vid : victims) trial.release(jobs_.at(vid).run.placement);
  auto p = place(c, shape, j.spec.models, &mask);
  if (!p) return false;
  trial.keep();

  for (JobId vid : victims) {
    JobEntry& v = jobs_.at(vid);
    if (v.spec.budget < s.held_now.size())
      s.held_now[v.spec.budget] -= total_milli(v.run.placement);
    StopDecision d;
    d.reason = StopReason::Preempted;
    d.for_job = j.spec.id;
    preemptible_by(s, v, j, &d.victim);
    stop(v, d, out, /*gpus_already_free=*/true);
  }
  start(s, j, std::move(*p), /*allocated=*/!s.claiming, StartMode::Preempting, victims, out);
  return true;
}

}  // namespace allot::core
