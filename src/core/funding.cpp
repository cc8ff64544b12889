// Funding and class changes (docs/policy.md §5, §6, §12): projected usage, whether a job would run
// allocated (the lookback allocation, the burst limit, the concurrent cap), and promotion and
// demotion of running jobs.

#include "core/cluster_scratch.h"

namespace allot::core {

void Scheduler::compute_projected(ClusterId c, ClusterScratch& s) const {
  const std::size_t n = budgets_.size();
  s.projected.assign(n, 0);
  s.rank_extra.assign(n, 0);
  s.debug_gpus.assign(n, 0);
  s.allowance_gpus.assign(n, 0);
  s.allocation.assign(n, 0.0);
  for (BudgetId b = 0; b < n; ++b) {
    s.projected[b] = usage_[c].total(b);
    s.allocation[b] = allocation(c, b);
  }
  // Remaining contracts of running allocated jobs count as already spent: a budget can fund a
  // new contract only if it can still afford all the ones it has promised. Speed only: a cycle
  // that funds every job, walks no budget tree, preempts nothing and explains nothing never reads
  // them (the strict baselines), so it skips this walk over every running job.
  s.inference_held = 0;
  const bool read = s.explain || config_.funding != Funding::Always ||
                    config_.order == QueueOrder::FairShare || config_.preemption;
  if (!read) return;
  // In the same pass: what each leaf holds, allocated or not, for "victims within their share"
  // (§8; preemption.cpp's within_share).
  const bool held = config_.preemption && (config_.spare_work_within_share || claims_on());
  if (held) s.held_all.assign(n, 0);
  for (const auto& [id, entry] : running_[c]) {
    const JobEntry& j = *entry;
    const Milli milli = total_milli(j.run.placement);
    if (j.run.allocated && j.spec.kind == JobKind::Inference) s.inference_held += milli;
    if (held) s.held_all[j.spec.budget] += milli;
    if (j.run.allocated && j.spec.kind == JobKind::Debug) {
      s.debug_gpus[j.spec.budget] += j.spec.shape.total_gpus();
    }
    if (j.run.allowance_until > now_) {  // protected by the allowance now
      s.allowance_gpus[j.spec.budget] += j.spec.shape.total_gpus();
      s.allowance_by_owner[j.spec.owner] += j.spec.shape.total_gpus();
    }
    const Time contract_end = j.run.allocated_since + j.spec.min_runtime;
    if (!j.run.allocated || contract_end <= now_) continue;
    const MilliGpuSeconds rest = milli * (contract_end - now_);
    for (BudgetId cur = j.spec.budget; cur != kNoBudget; cur = budgets_.parent(cur)) {
      s.projected[cur] += rest;
    }
  }
  if (held) s.held_now = s.held_all;
}

bool Scheduler::funded(const ClusterScratch& s, const JobEntry& j, BudgetId* limiting,
                       bool* at_burst_limit) const {
  *limiting = kNoBudget;
  if (at_burst_limit) *at_burst_limit = false;
  if (!budgets_.valid(j.spec.budget)) return false;
  const Milli milli = j.spec.shape.total_milli();
  switch (config_.funding) {
    case Funding::Always:
      return true;
    case Funding::ConcurrentCap:
      // A cap on GPUs held at once: fraction x capacity, counting allocated jobs running now.
      return within_held_cap(s, j.spec.budget, milli, config_.allocation_limit, false, limiting);
    case Funding::Lookback:
      break;
  }
  // Debug work is funded whatever its budget's standing (it is small and short by validation), up
  // to max_debug_gpus_per_budget running at once per budget, so that it starts within seconds.
  if (config_.debug_always_funded && j.spec.kind == JobKind::Debug && j.spec.min_runtime > 0 &&
      s.debug_gpus[j.spec.budget] + j.spec.shape.total_gpus() <=
          config_.max_debug_gpus_per_budget) {
    return true;
  }
  if (inside_interactive_allowance(s, j, limiting)) return true;
  if (!within_allocation(s, j.spec.budget, milli * j.spec.min_runtime, limiting) ||
      j.spec.min_runtime <= 0) {
    return false;
  }
  const bool ok = within_burst(s, j.spec.budget, milli, limiting);
  if (at_burst_limit) *at_burst_limit = !ok;
  if (ok && !within_inference_share(s, j, milli)) {
    *limiting = budgets_.root();  // the whole cluster's tier: see StartDecision::limiting_budget
    if (at_burst_limit) *at_burst_limit = true;
    return false;
  }
  return ok;
}

// docs/policy.md section 15, "Inference share": whether an inference job holding `extra` more
// allocated milli-GPUs keeps the tier within inference_share x C. Other jobs always are.
bool Scheduler::within_inference_share(const ClusterScratch& s, const JobEntry& j,
                                       Milli extra) const {
  return config_.inference_share <= 0 || j.spec.kind != JobKind::Inference ||
         static_cast<double>(s.inference_held + extra) <=
             config_.inference_share * static_cast<double>(capacity_[s.cluster]);
}

// Whether every budget from `leaf` up to the root (excluded) holds, with `milli` more, at most
// burst_limit x its fraction of the cluster in allocated running GPUs. Monotone in `milli`.
bool Scheduler::within_burst(const ClusterScratch& s, BudgetId leaf, Milli milli,
                             BudgetId* limiting) const {
  return config_.burst_limit <= 0 ||
         within_held_cap(s, leaf, milli, config_.burst_limit, true, limiting);
}

// Whether every budget from `leaf` up to the root (excluded) would hold, with `milli` more, at
// most `factor` x its fraction of the cluster in allocated running GPUs; the highest that would not
// is *limiting. With `empty_exempt`, a budget that holds none may take any one job.
bool Scheduler::within_held_cap(const ClusterScratch& s, BudgetId leaf, Milli milli, double factor,
                                bool empty_exempt, BudgetId* limiting) const {
  const auto& rates = rate_[s.cluster];
  bool ok = true;
  for (BudgetId b = leaf; b != budgets_.root(); b = budgets_.parent(b)) {
    const double share = fraction_[s.cluster][b] * static_cast<double>(capacity_[s.cluster]);
    // (factor x f) x C, not factor x (f x C): the cap's rounding stays what it always was.
    const double cap = factor * fraction_[s.cluster][b] * static_cast<double>(capacity_[s.cluster]);
    const Milli held = b < rates.size() ? rates[b] : 0;
    const bool exempt =
        empty_exempt &&
        (config_.burst_exempt_max_size <= 0 ||
         static_cast<double>(milli) <= config_.burst_exempt_max_size * share) &&
        (held == 0 || static_cast<double>(held) < config_.burst_exempt_below * share);
    if (!exempt && static_cast<double>(held + milli) > cap) {
      *limiting = b;
      ok = false;
    }
  }
  return ok;
}

// Whether every budget from `leaf` up to the root (excluded) can afford a contract of `cost` on top
// of what it has promised. Monotone in `cost`: if it fails for some cost it fails for every larger
// one (the sum is exact in integers and its conversion to double never decreases).
bool Scheduler::within_allocation(const ClusterScratch& s, BudgetId leaf, MilliGpuSeconds cost,
                                  BudgetId* limiting) const {
  bool ok = true;
  // Walking up, the last budget found out of allocation is the highest one. The root is the whole
  // cluster: its limit is physical and placement enforces it.
  for (BudgetId b = leaf; b != budgets_.root(); b = budgets_.parent(b)) {
    if (static_cast<double>(s.projected[b] + cost) > config_.allocation_limit * s.allocation[b]) {
      *limiting = b;
      ok = false;
    }
  }
  return ok;
}

// docs/policy.md section 6, "Interactive allowance": the rule is on under lookback funding with the
// contract (the baselines, which fund otherwise, never see it).
bool Scheduler::allowance_on() const {
  return config_.interactive_gpus_per_user > 0 && config_.funding == Funding::Lookback &&
         config_.minimum_runtime_contract;
}

// docs/policy.md section 6, "Interactive allowance": an interactive job with a contract is inside
// its owner's allowance when the owner's and its leaf budget's allowance jobs, with it, stay within
// their GPU bounds and every budget on its path can afford its contract (the window test; the
// burst limit does not apply). Monotone in the contract's cost, like within_allocation.
bool Scheduler::inside_interactive_allowance(const ClusterScratch& s, const JobEntry& j,
                                             BudgetId* limiting) const {
  if (!allowance_on() || j.spec.kind != JobKind::Interactive || j.spec.min_runtime <= 0) {
    return false;
  }
  const int gpus = j.spec.shape.total_gpus();
  const auto owner = s.allowance_by_owner.find(j.spec.owner);
  const int owner_gpus = owner == s.allowance_by_owner.end() ? 0 : owner->second;
  if (owner_gpus + gpus > config_.interactive_gpus_per_user) return false;
  if (config_.interactive_gpus_per_budget > 0 &&
      s.allowance_gpus[j.spec.budget] + gpus > config_.interactive_gpus_per_budget) {
    return false;
  }
  return within_allocation(s, j.spec.budget, j.spec.shape.total_milli() * j.spec.min_runtime,
                           limiting);
}

// A job made allocated now inside the allowance: protected for interactive_protection from now,
// and counted against its owner's and budget's allowance for as long as it is protected.
void Scheduler::enter_allowance(ClusterScratch& s, JobEntry& j) const {
  BudgetId unused = kNoBudget;
  if (!inside_interactive_allowance(s, j, &unused)) return;
  j.run.allowance_until = now_ + config_.interactive_protection;
  s.allowance_gpus[j.spec.budget] += j.spec.shape.total_gpus();
  s.allowance_by_owner[j.spec.owner] += j.spec.shape.total_gpus();
}

Time Scheduler::protection_end(const JobEntry& j) const {
  return config_.minimum_runtime_contract ? now_ + j.spec.min_runtime : kNever;
}

// docs/policy.md section 6, "Renewal": the contract of an allocated job that asks for it, now
// over, starts again while every budget on its path can afford it (the window test; it holds its
// GPUs already, so the burst limit does not apply) and its nodes are schedulable (a drain still
// stops it at its contract). The new contract is added to P at once, like a promotion's.
bool Scheduler::renew_contract(ClusterScratch& s, JobEntry& j, CycleResult& out) {
  if (!j.spec.renew_contract || j.spec.min_runtime <= 0 || config_.funding != Funding::Lookback) {
    return false;
  }
  for (const GpuSlot& g : j.run.placement) {
    if (!nodes_[g.node].schedulable()) return false;
  }
  const MilliGpuSeconds cost = total_milli(j.run.placement) * j.spec.min_runtime;
  BudgetId limiting = kNoBudget;
  if (!within_allocation(s, j.spec.budget, cost, &limiting) || !within_inference_share(s, j, 0)) {
    return false;
  }
  j.run.allocated_since = now_;
  j.run.protected_until = protection_end(j);
  for (BudgetId cur = j.spec.budget; cur != kNoBudget; cur = budgets_.parent(cur)) {
    s.projected[cur] += cost;
  }
  out.class_changes.push_back(ClassChange{j.spec.id, true, j.run.protected_until, kNoBudget, true});
  return true;
}

void Scheduler::change_classes(ClusterId c, ClusterScratch& s, CycleResult& out) {
  if (!config_.demote_over_allocation && !config_.promote_when_funded &&
      config_.funding != Funding::Lookback) {
    return;
  }
  for (const auto& [id, entry] : running_[c]) {
    JobEntry& j = *entry;
    const MilliGpuSeconds m = total_milli(j.run.placement);
    if (j.run.allocated) {
      if (now_ >= shielded_until(j.run) && renew_contract(s, j, out)) continue;
      if (!config_.demote_over_allocation || now_ < shielded_until(j.run) ||
          config_.funding != Funding::Lookback ||
          (config_.keep_non_resumable_allocated && !j.spec.resumable)) {
        continue;
      }
      BudgetId over = kNoBudget;
      for (BudgetId b = j.spec.budget; b != budgets_.root(); b = budgets_.parent(b)) {
        if (static_cast<double>(s.projected[b]) > config_.allocation_limit * s.allocation[b]) {
          over = b;  // ends at the highest budget over allocation
        }
      }
      if (over == kNoBudget) continue;
      charge_rate(j, -1);
      if (j.spec.kind == JobKind::Inference) s.inference_held -= m;
      j.run.allocated = false;
      j.run.protected_until = now_;
      out.class_changes.push_back(ClassChange{id, false, now_, over});
    } else {
      if (!config_.promote_when_funded || j.run.on_reserved ||
          (config_.funding == Funding::Lookback && j.spec.min_runtime <= 0)) {
        continue;
      }
      bool on_bad_node = false;
      for (const GpuSlot& g : j.run.placement) on_bad_node |= !nodes_[g.node].schedulable();
      if (on_bad_node) continue;
      BudgetId limiting = kNoBudget;
      if (!funded(s, j, &limiting)) continue;
      enter_allowance(s, j);  // before its contract is added to P: the test funded() made
      j.run.allocated = true;
      j.run.allocated_since = now_;
      j.run.protected_until = protection_end(j);
      charge_rate(j, +1);
      if (j.spec.kind == JobKind::Inference) s.inference_held += m;
      for (BudgetId cur = j.spec.budget; cur != kNoBudget; cur = budgets_.parent(cur)) {
        s.projected[cur] += m * j.spec.min_runtime;
      }
      out.class_changes.push_back(ClassChange{id, true, j.run.protected_until, kNoBudget});
    }
  }
}

}  // namespace allot::core
