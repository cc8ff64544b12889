// Dynamic MIG (docs/policy.md section 7.5, "MIG layouts"): after a cycle's walk, idle GPUs are
// split into the MIG instances that waiting jobs name, and GPUs in MIG mode whose instances are all
// idle are made whole for whole-GPU work that waits; a GPU being re-partitioned takes no work until
// its node reports the layout it achieved.
#include <algorithm>
#include <limits>
#include <tuple>

#include "core/mig_geometry.h"
#include "core/placement_filters.h"
#include "core/scheduler.h"

namespace allot::core {
namespace {

bool same_instances(std::vector<MigInstance> a, std::vector<MigInstance> b) {
  auto order = [](const MigInstance& x, const MigInstance& y) {
    return std::tie(x.milli, x.profile) < std::tie(y.milli, y.profile);
  };
  std::sort(a.begin(), a.end(), order);
  std::sort(b.begin(), b.end(), order);
  return a == b;
}

// Whether GPUs of `model` (at the catalogue's memory for it) offer MIG profile `p`.
bool offers_profile(const GpuCatalog& catalog, GpuModelId model, MigProfileId p) {
  const MigProfile& prof = catalog.mig_profile(p);
  const int memory = catalog.model(model).memory_gib;
  return std::find(prof.models.begin(), prof.models.end(), model) != prof.models.end() &&
         std::find(prof.gpu_memory_gib.begin(), prof.gpu_memory_gib.end(), memory) !=
             prof.gpu_memory_gib.end();
}

bool accepts_cluster(const JobSpec& spec, ClusterId c) {
  return spec.clusters.empty() ||
         std::find(spec.clusters.begin(), spec.clusters.end(), c) != spec.clusters.end();
}

}  // namespace

// The space a split leaves after the profiles asked for: the largest profile of the GPU that still
// fits, again and again (no media extension; of two with the same compute, the one with less
// memory), so that a split GPU offers a spread of sizes rather than only the smallest.
template <class Offered, class Add>
void Scheduler::fill_mig_layout(int memory, const Offered& offered, const Add& add) const {
  std::vector<std::pair<std::pair<int, int>, MigProfileId>> order;
  for (std::size_t i = 1; i <= catalog_.mig_profile_count(); ++i) {
    const auto p = static_cast<MigProfileId>(i);
    const auto geo = mig_geometry(catalog_.mig_profile(p).name, memory);
    if (!offered(p) || !geo || geo->media) continue;
    order.push_back({{-geo->compute_slices, geo->memory_slices}, p});
  }
  std::sort(order.begin(), order.end());
  for (bool added = true; added;) {
    added = false;
    for (const auto& [size, p] : order) {
      if (add(p)) {
        added = true;
        break;
      }
    }
  }
}

void Scheduler::rebuild_node_capacity(NodeId node) {
  pool_.set_mig(node, nodes_[node].spec.mig);
  for (const JobEntry* j : jobs_on_node_[node]) {
    if (j->state != JobState::Running) continue;
    Placement here;
    for (const GpuSlot& g : j->run.placement) {
      if (g.node == node) here.push_back(g);
    }
    pool_.take(here);
  }
  // A GPU still being re-partitioned stays out of service.
  for (auto it = mig_plans_.lower_bound({node, 0});
       it != mig_plans_.end() && it->first.first == node; ++it) {
    if (auto all = pool_.entire_gpu(node, it->first.second)) pool_.take(*all);
  }
}

void Scheduler::settle_mig_plans(NodeId node) {
  const auto& layout = nodes_[node].spec.mig;
  for (auto it = mig_plans_.lower_bound({node, 0});
       it != mig_plans_.end() && it->first.first == node;) {
    const auto gpu = static_cast<std::size_t>(it->first.second);
    const std::vector<MigInstance> none;
    const auto& now_there = gpu < layout.size() ? layout[gpu] : none;
    it = same_instances(now_there, it->second) ? mig_plans_.erase(it) : std::next(it);
  }
}

Status Scheduler::set_gpu_mig(NodeId node, int gpu, std::vector<MigInstance> instances) {
  if (node >= nodes_.size()) return Error{"node", "no such node"};
  if (gpu < 0 || gpu >= nodes_[node].spec.gpus) return Error{"gpu", "no such GPU on the node"};
  auto layout = nodes_[node].spec.mig;
  layout.resize(static_cast<std::size_t>(nodes_[node].spec.gpus));
  layout[static_cast<std::size_t>(gpu)] = std::move(instances);
  const bool any =
      std::any_of(layout.begin(), layout.end(), [](const auto& g) { return !g.empty(); });
  if (!any) layout.clear();
  return set_node_mig(node, std::move(layout));
}

void Scheduler::cancel_mig_plans(NodeId node) {
  if (node >= nodes_.size() || !mig_reconfiguring(node)) return;
  mig_plans_.erase(mig_plans_.lower_bound({node, 0}), mig_plans_.lower_bound({node + 1, 0}));
  rebuild_node_capacity(node);
}

bool Scheduler::mig_reconfiguring(NodeId node) const {
  auto it = mig_plans_.lower_bound({node, 0});
  return it != mig_plans_.end() && it->first.first == node;
}

bool Scheduler::mig_layout_may_change(NodeId n, int gpu) const {
  if (mig_plans_.count({n, gpu}) > 0) return false;
  auto it = mig_changed_at_.find({n, gpu});
  return it == mig_changed_at_.end() || it->second + config_.mig_hold <= now_;
}

// GPUs of cluster `c` in MIG mode or being split, less those being made whole (`merged`).
int Scheduler::mig_mode_gpus(ClusterId c, const std::set<std::pair<NodeId, int>>& merged) const {
  int n_mig = 0;
  for (NodeId n : cluster_nodes_[c]) {
    for (int g = 0; g < nodes_[n].spec.gpus; ++g) {
      auto plan = mig_plans_.find({n, g});
      const bool will_be_mig =
          plan != mig_plans_.end() ? !plan->second.empty() : pool_.in_mig_mode(n, g);
      n_mig += will_be_mig && merged.count({n, g}) == 0;
    }
  }
  return n_mig;
}

// With yield, the GPUs of cluster `c` the inference tier keeps in MIG mode (§7.5, "Yield"):
// inference_share of them, rounded down.
int Scheduler::mig_tier_share(ClusterId c) const {
  const Milli gpus = capacity_[c] / kWholeGpu;  // whole GPUs: capacity is a multiple
  return static_cast<int>(config_.inference_share * static_cast<double>(gpus));
}

// §7.5 "Yield": on one node per cycle where whole-GPU work waits that the node could hold if its
// GPUs in MIG mode were whole, and whose requester asks for a contract within its budget's
// allocation, the unallocated unshielded work on just enough such GPUs is preempted and the GPUs
// are made whole — while the cluster keeps more GPUs in MIG mode than the inference tier's share
// (inference_share x its GPUs), never fewer.
void Scheduler::yield_mig_gpus(ClusterId c, const std::vector<int>& reserved,
                               const std::vector<int>& whole_need,
                               const std::vector<const JobEntry*>& needed_by,
                               std::set<std::pair<NodeId, int>>& merged, CycleResult& out) {
  const int mig_gpus = mig_mode_gpus(c, merged);
  const int share = mig_tier_share(c);
  if (mig_gpus <= share) return;
  for (NodeId n : cluster_nodes_[c]) {
    const Node& node = nodes_[n];
    if (!node.schedulable() || !pool_.has_mig(n)) continue;
    const GpuModelId model = node.spec.model;
    const JobEntry* requester = nullptr;
    int need = 0;
    if (reserved[n] > 0) {
      for (const Reservation& r : reservations_[c]) {
        if (std::find(r.nodes.begin(), r.nodes.end(), n) != r.nodes.end()) requester = job(r.job);
      }
      need = reserved[n];
    } else {
      requester = needed_by[model];
      need = whole_need[model];
    }
    if (!requester || need == 0 || requester->state != JobState::Pending ||
        requester->spec.min_runtime == 0 || standing(c, requester->spec.budget) >= 1.0) {
      continue;
    }
    int have = pool_.whole_free(n);
    for (const auto& [at, gpu] : merged) have += at == n;
    if (have >= need) continue;
    // GPUs in MIG mode whose every holder is unallocated work past any shield: the cheapest
    // (least work run) first.
    std::vector<std::pair<double, int>> yieldable;
    for (int g = 0; g < node.spec.gpus; ++g) {
      if (!pool_.in_mig_mode(n, g) || merged.count({n, g}) > 0 || !mig_layout_may_change(n, g)) {
        continue;
      }
      double ran = 0;
      bool takeable = true;
      for (const JobEntry* j : jobs_on_node_[n]) {
        if (j->state != JobState::Running) continue;
        const bool here = std::any_of(j->run.placement.begin(), j->run.placement.end(),
                                      [&](const GpuSlot& s) { return s.node == n && s.gpu == g; });
        if (!here) continue;
        if (!mig_victim(*j)) {
          takeable = false;
          break;
        }
        ran += static_cast<double>(now_ - j->run.started);
      }
      if (takeable) yieldable.emplace_back(ran, g);
    }
    if (have + static_cast<int>(yieldable.size()) < need || need - have > mig_gpus - share) {
      continue;
    }
    std::sort(yieldable.begin(), yieldable.end());
    for (int k = 0; k < need - have; ++k) {
      const int g = yieldable[static_cast<std::size_t>(k)].second;
      preempt_gpu_holders(n, g, requester->spec.id, out);
      out.repartitions.push_back({c, n, g, {}, requester->spec.id});
      merged.insert({n, g});
    }
    return;  // one node a cycle
  }
}

// Yield and splits over unallocated work take only unallocated work past any shield, not started
// this cycle, and within §8's bound on one job's preemptions.
bool Scheduler::mig_victim(const JobEntry& j) const {
  return !j.run.allocated && shielded_until(j.run) <= now_ && j.run.started != now_ &&
         !preempted_enough(j);
}

void Scheduler::preempt_gpu_holders(NodeId n, int g, JobId for_job, CycleResult& out) {
  const std::vector<JobEntry*> on_node = jobs_on_node_[n];  // stop() edits the list
  for (JobEntry* j : on_node) {
    if (j->state != JobState::Running ||
        std::none_of(j->run.placement.begin(), j->run.placement.end(),
                     [&](const GpuSlot& s) { return s.node == n && s.gpu == g; })) {
      continue;
    }
    StopDecision d;
    d.reason = StopReason::Preempted;
    d.for_job = for_job;
    d.victim.cls = VictimClass::Unallocated;
    d.victim.ran_for = now_ - j->run.started;
    stop(*j, d, out);
  }
}

std::optional<double> Scheduler::split_victims_cost(NodeId n, int g) const {
  double cost = 0;
  bool held = false;
  for (const JobEntry* j : jobs_on_node_[n]) {
    if (j->state != JobState::Running) continue;
    const bool here = std::any_of(j->run.placement.begin(), j->run.placement.end(),
                                  [&](const GpuSlot& s) { return s.node == n && s.gpu == g; });
    if (!here) continue;
    if (!mig_victim(*j)) return std::nullopt;
    held = true;
    cost +=
        static_cast<double>(j->run.placement.size()) * static_cast<double>(now_ - j->run.started);
  }
  if (!held) return std::nullopt;  // an idle GPU is split without preempting anything
  return cost;
}

Time Scheduler::next_mig_wakeup() const {
  Time t = kNever;
  if (!config_.mig_dynamic) return t;
  for (const auto& [gpu, at] : mig_changed_at_) {
    if (at + config_.mig_hold > now_) t = std::min(t, at + config_.mig_hold);
  }
  return t;
}

// §7.5. Splits: a GPU of a MIG-capable model on a schedulable node, not reserved, idle (whole and
// free, or in MIG mode with every instance free) and past its hold, is split for the waiting jobs
// that name a profile its model offers and no instance being made serves, in submission order:
// their profiles as long as they fit the GPU's geometry, then the largest profiles that still fit
// (fill_mig_layout). GPUs already in MIG mode go first, then those of the nodes with the most GPUs
// in MIG mode, then those of the node with the fewest whole GPUs free. Merges: a GPU in MIG mode
// with every instance free and past its hold is made whole when whole-GPU work waits that its node
// could then hold (the node's whole GPUs free and such GPUs reaching its reservation holder's
// per-node request, or else the smallest per-node request of a waiting whole-GPU job that accepts
// the node's model), as few GPUs as that takes.
void Scheduler::plan_mig_layouts(ClusterId c, const std::set<JobId>& started, CycleResult& out) {
  std::erase_if(mig_changed_at_,
                [&](const auto& e) { return e.second + config_.mig_hold <= now_; });
  // Reserved nodes, with the whole GPUs their holder needs of each (§7.4). A node held for a job
  // that names a profile is no reason not to split: the split is for such jobs.
  std::vector<int> reserved(nodes_.size(), 0);
  for (const Reservation& r : reservations_[c]) {
    const JobEntry* h = job(r.job);
    if (h && h->spec.shape.mig != 0) continue;
    for (NodeId n : r.nodes) reserved[n] = h ? std::max(1, h->spec.shape.gpus_per_node) : 1;
  }
  struct Idle {
    bool in_mig;
    int node_mig;  // GPUs of the node in MIG mode
    int whole_free;
    NodeId node;
    int gpu;
  };
  std::vector<Idle> idle;                                      // candidates for a split
  std::vector<std::pair<NodeId, std::vector<int>>> mergeable;  // per node, idle GPUs in MIG mode
  for (NodeId n : cluster_nodes_[c]) {
    const Node& node = nodes_[n];
    int node_mig = 0;
    for (int g = 0; g < node.spec.gpus; ++g) node_mig += pool_.in_mig_mode(n, g);
    if (!node.schedulable() || !catalog_.model(node.spec.model).mig_capable) continue;
    std::vector<int> idle_mig;
    for (int g = 0; g < node.spec.gpus; ++g) {
      if (!mig_layout_may_change(n, g) || !pool_.entire_gpu(n, g)) continue;
      const bool in_mig = pool_.in_mig_mode(n, g);
      if (in_mig) idle_mig.push_back(g);
      if (!reserved[n]) idle.push_back({in_mig, node_mig, pool_.whole_free(n), n, g});
    }
    if (!idle_mig.empty()) mergeable.emplace_back(n, std::move(idle_mig));
  }
  if (idle.empty() && mergeable.empty() && mig_plans_.empty() && !config_.mig_yield &&
      !config_.mig_split_unallocated) {
    return;
  }

  // The waiting work, in submission order: jobs that name a profile, and the smallest per-node
  // request of whole-GPU work by model.
  std::vector<const JobEntry*> named;
  std::vector<int> whole_need(catalog_.size(), 0);
  std::vector<const JobEntry*> needed_by(catalog_.size(), nullptr);  // the first with that need
  auto waiting_here = [&](JobId id, const JobEntry& j) {
    return j.state == JobState::Pending && started.count(id) == 0 && accepts_cluster(j.spec, c);
  };
  for (const JobId id : pending_named_) {  // the index: the cost is what waits, not the backlog
    const JobEntry& j = jobs_.at(id);
    if (waiting_here(id, j)) named.push_back(&j);
  }
  // Whole-GPU work is looked for only where a merge or a yield could serve it.
  for (const auto& [id, j] : jobs_) {
    if (mergeable.empty() && !config_.mig_yield) break;
    if (!waiting_here(id, j)) continue;
    if (j.spec.shape.mig == 0 && !j.spec.shape.fractional()) {
      for (std::size_t m = 0; m < catalog_.size(); ++m) {
        if (!accepts(j.spec.models, static_cast<GpuModelId>(m))) continue;
        int& need = whole_need[m];
        if (need == 0 || j.spec.shape.gpus_per_node < need) {
          need = j.spec.shape.gpus_per_node;
          needed_by[m] = &j;
        }
      }
    }
  }

  // Merges first: whole-GPU training takes GPUs back.
  std::set<std::pair<NodeId, int>> merged;
  // With yield, merges too leave the inference tier its share of GPUs in MIG mode.
  int above_share = config_.mig_yield && config_.inference_share > 0
                        ? mig_mode_gpus(c, merged) - mig_tier_share(c)
                        : std::numeric_limits<int>::max();
  for (const auto& [n, gpus] : mergeable) {
    // A reserved node is drained for its holder: what it needs; elsewhere the smallest request.
    const int need = reserved[n] > 0 ? reserved[n] : whole_need[nodes_[n].spec.model];
    const int have = pool_.whole_free(n);
    if (need == 0 || have >= need || have + static_cast<int>(gpus.size()) < need ||
        need - have > above_share) {
      continue;
    }
    above_share -= need - have;
    for (int k = 0; k < need - have; ++k) {
      const int g = gpus[static_cast<std::size_t>(k)];
      out.repartitions.push_back({c, n, g, {}, kNoJob});
      merged.insert({n, g});
    }
  }

  if (config_.mig_yield) yield_mig_gpus(c, reserved, whole_need, needed_by, merged, out);

  std::sort(idle.begin(), idle.end(), [](const Idle& a, const Idle& b) {
    return std::make_tuple(!a.in_mig, -a.node_mig, a.whole_free, a.node, -a.gpu) <
           std::make_tuple(!b.in_mig, -b.node_mig, b.whole_free, b.node, -b.gpu);
  });
  // Instances already being made serve the first waiting jobs that name their profiles: a job is
  // not split a second GPU while its first is re-partitioned.
  std::vector<char> served(named.size(), 0);
  for (const auto& [at, layout] : mig_plans_) {
    if (nodes_[at.first].spec.cluster != c) continue;
    for (const MigInstance& m : layout) {
      for (std::size_t k = 0; k < named.size(); ++k) {
        if (!served[k] && named[k]->spec.shape.mig == m.profile) {
          served[k] = 1;
          break;
        }
      }
    }
  }
  // Splits GPU `gpu` of `node` for the waiting jobs not yet served that its model offers: `lead`
  // first (when given), then the others in submission order; the first served, or kNoJob.
  auto split_for_waiting = [&](NodeId node, int gpu, const JobEntry* lead) {
    const GpuModelId model = nodes_[node].spec.model;
    const int memory = catalog_.model(model).memory_gib;
    auto offered = [&](MigProfileId p) { return offers_profile(catalog_, model, p); };
    std::vector<std::string> names;
    std::vector<MigInstance> layout;
    JobId first = kNoJob;
    auto add = [&](MigProfileId p) {
      names.push_back(catalog_.mig_profile(p).name);
      if (!mig_layout_starts(names, memory)) {
        names.pop_back();
        return false;
      }
      layout.push_back({p, catalog_.mig_profile(p).milli});
      return true;
    };
    std::vector<std::size_t> order;
    for (std::size_t k = 0; k < named.size(); ++k) {
      if (named[k] == lead)
        order.insert(order.begin(), k);
      else
        order.push_back(k);
    }
    for (std::size_t k : order) {
      const JobEntry& j = *named[k];
      if (served[k] || !accepts(j.spec.models, model) || !offered(j.spec.shape.mig)) continue;
      if (add(j.spec.shape.mig)) {
        served[k] = 1;
        if (first == kNoJob) first = j.spec.id;
      }
    }
    if (first == kNoJob) return first;
    fill_mig_layout(memory, offered, add);
    out.repartitions.push_back({c, node, gpu, layout, first});
    return first;
  };
  auto all_served = [&] {
    return std::all_of(served.begin(), served.end(), [](char s) { return s != 0; });
  };
  for (const Idle& cand : idle) {
    if (all_served()) break;
    if (merged.count({cand.node, cand.gpu}) > 0) continue;
    split_for_waiting(cand.node, cand.gpu, nullptr);
  }

  // §7.5 "Split over unallocated work": for the first job still waiting that names a profile,
  // asks for a contract and whose budget stands below its share, one whole GPU holding only
  // unallocated work is preempted and split (the cheapest to take), while the GPUs in MIG mode
  // stay below the inference tier's share.
  if (config_.mig_split_unallocated && !all_served()) {
    int mig_after = mig_mode_gpus(c, merged);
    for (const MigRepartition& r : out.repartitions) {
      mig_after += r.cluster == c && !r.instances.empty() && !pool_.in_mig_mode(r.node, r.gpu);
    }
    const bool below_share = config_.inference_share <= 0 || mig_after < mig_tier_share(c);
    const JobEntry* lead = nullptr;
    for (std::size_t k = 0; k < named.size() && below_share; ++k) {
      const JobEntry& j = *named[k];
      if (!served[k] && j.spec.min_runtime > 0 && standing(c, j.spec.budget) < 1.0) {
        lead = &j;
        break;
      }
    }
    std::optional<std::tuple<double, int, NodeId, int>> best;  // cost, -node_mig, node, -gpu
    for (NodeId n : cluster_nodes_[c]) {
      if (lead == nullptr) break;
      const Node& node = nodes_[n];
      if (!node.schedulable() || reserved[n] > 0 || !catalog_.model(node.spec.model).mig_capable ||
          !accepts(lead->spec.models, node.spec.model) ||
          !offers_profile(catalog_, node.spec.model, lead->spec.shape.mig)) {
        continue;
      }
      int node_mig = 0;
      for (int g = 0; g < node.spec.gpus; ++g) node_mig += pool_.in_mig_mode(n, g);
      for (int g = 0; g < node.spec.gpus; ++g) {
        if (pool_.in_mig_mode(n, g) || merged.count({n, g}) > 0 || !mig_layout_may_change(n, g)) {
          continue;
        }
        const auto cost = split_victims_cost(n, g);
        if (!cost) continue;
        const auto key = std::make_tuple(*cost, -node_mig, n, -g);
        if (!best || key < *best) best = key;
      }
    }
    if (best) {
      const NodeId n = std::get<2>(*best);
      const int g = -std::get<3>(*best);
      preempt_gpu_holders(n, g, lead->spec.id, out);
      split_for_waiting(n, g, lead);
    }
  }

  // What `allot why` says of the jobs served (the walk explained them before this plan).
  if (!out.waiting.empty() && std::any_of(served.begin(), served.end(), [](char s) { return s; })) {
    std::set<JobId> serving;
    for (std::size_t k = 0; k < named.size(); ++k) {
      if (served[k]) serving.insert(named[k]->spec.id);
    }
    for (Explanation& e : out.waiting) {
      if (e.cluster == c && serving.count(e.job) > 0) e.mig_split_for_it = true;
    }
  }

  for (const MigRepartition& r : out.repartitions) {
    if (r.cluster != c) continue;
    mig_plans_[{r.node, r.gpu}] = r.instances;
    mig_changed_at_[{r.node, r.gpu}] = now_;
    if (auto all = pool_.entire_gpu(r.node, r.gpu)) pool_.take(*all);
  }
}

}  // namespace allot::core
