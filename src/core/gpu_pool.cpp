#include "core/gpu_pool.h"

#include <algorithm>
#include <tuple>

#include "core/placement_filters.h"

namespace allot::core {
namespace {

bool by_size(const MigInstance& a, const MigInstance& b) {
  return std::tie(a.milli, a.profile) < std::tie(b.milli, b.profile);
}

// What a GPU in MIG mode offers: its largest free instance, never a whole GPU (whole-GPU work
// does not run on a GPU in MIG mode).
Milli mig_room(const std::vector<MigInstance>& free) {
  return free.empty() ? 0 : std::min(free.back().milli, kWholeGpu - 1);
}

// The instance a fraction of `shape` takes among `free`: of its profile if it names one, else
// the smallest with room for it.
const MigInstance* mig_fit(const std::vector<MigInstance>& free, const Shape& shape) {
  for (const MigInstance& m : free) {
    if (shape.mig ? m.profile == shape.mig : m.milli >= shape.gpu_milli) return &m;
  }
  return nullptr;
}

// Takes the instance a slot names out of `free` (a slot without a profile, restored from before
// profiles were recorded: the smallest instance with room for it).
void take_instance(std::vector<MigInstance>& free, const GpuSlot& g) {
  auto it = std::find_if(free.begin(), free.end(), [&](const MigInstance& m) {
    return g.mig ? m.profile == g.mig && m.milli == g.milli : m.milli >= g.milli;
  });
  if (it != free.end()) free.erase(it);
}

// Hands the instance a slot held back, unless every instance of its kind is already free.
void give_instance(std::vector<MigInstance>& free, const std::vector<MigInstance>& all,
                   const GpuSlot& g) {
  auto same = [&](const MigInstance& m) {
    return g.mig ? m.profile == g.mig && m.milli == g.milli : m.milli == g.milli;
  };
  auto kind = std::find_if(all.begin(), all.end(), same);
  if (kind == all.end() || std::count_if(free.begin(), free.end(), same) >=
                               std::count_if(all.begin(), all.end(), same)) {
    return;
  }
  free.insert(std::upper_bound(free.begin(), free.end(), *kind, by_size), *kind);
}

}  // namespace

void GpuPool::add_node(const Node& node) {
  if (nodes_.size() <= node.id) nodes_.resize(node.id + 1);
  NodeState& s = nodes_[node.id];
  s.cluster = node.spec.cluster;
  s.model = node.spec.model;
  s.block = node.block;
  s.schedulable = node.schedulable();
  s.free.assign(static_cast<std::size_t>(node.spec.gpus), kWholeGpu);
  s.whole_free = node.spec.gpus;
  s.partial = 0;
  reindex(node.id);
  if (!node.spec.mig.empty() || s.mig_at != 0) set_mig(node.id, node.spec.mig);
}

void GpuPool::set_mig(NodeId n, const std::vector<std::vector<MigInstance>>& layout) {
  ++version_;
  ++generation_;
  unindex(n);
  NodeState& s = nodes_[n];
  if (!layout.empty()) {
    if (s.mig_at == 0) {
      mig_.emplace_back();
      s.mig_at = static_cast<std::uint16_t>(mig_.size());
    }
    MigNode& m = mig_[s.mig_at - 1];
    m.all = layout;
    m.all.resize(s.free.size());
    for (auto& g : m.all) std::sort(g.begin(), g.end(), by_size);
    m.free = m.all;
  } else if (s.mig_at != 0) {  // no GPU in MIG mode any more: its entry stays, empty
    mig_[s.mig_at - 1] = MigNode{std::vector<std::vector<MigInstance>>(s.free.size()),
                                 std::vector<std::vector<MigInstance>>(s.free.size())};
  }
  s.whole_free = 0;
  s.partial = 0;
  for (std::size_t g = 0; g < s.free.size(); ++g) {
    const Milli f = in_mig(s, g) ? mig_room(mig_free(s, g)) : kWholeGpu;
    s.free[g] = f;
    s.whole_free += f == kWholeGpu;
    s.partial += f > 0 && f < kWholeGpu;
  }
  reindex(n);
}

std::optional<Placement> GpuPool::entire_gpu(NodeId n, int gpu) const {
  const NodeState& s = nodes_[n];
  const auto g = static_cast<std::uint16_t>(gpu);
  if (!in_mig(s, g)) {
    if (s.free[g] != kWholeGpu) return std::nullopt;
    return Placement{GpuSlot(n, g)};
  }
  const auto& all = mig_[s.mig_at - 1].all[g];
  if (mig_free(s, g).size() != all.size()) return std::nullopt;
  Placement p;
  for (const MigInstance& m : all) p.emplace_back(n, g, m.milli, m.profile);
  return p;
}

bool GpuPool::fraction_could_ever_fit(const NodeState& s, const Shape& shape) const {
  for (std::size_t g = 0; g < s.free.size(); ++g) {
    if (!in_mig(s, g)) {
      if (!shape.mig) return true;
    } else if (mig_fit(mig_[s.mig_at - 1].all[g], shape)) {
      return true;
    }
  }
  return false;
}

std::optional<GpuSlot> GpuPool::fraction_slot(NodeId n, int gpu, const Shape& shape) const {
  const NodeState& s = nodes_[n];
  const auto g = static_cast<std::uint16_t>(gpu);
  if (in_mig(s, g)) {
    const MigInstance* m = mig_fit(mig_free(s, g), shape);
    if (!m) return std::nullopt;
    return GpuSlot{n, g, m->milli, m->profile};
  }
  if (shape.mig || s.free[g] < shape.gpu_milli) return std::nullopt;
  return GpuSlot{n, g, shape.gpu_milli};
}

void GpuPool::unindex(NodeId n) {
  const NodeState& s = nodes_[n];
  auto it = index_.find({s.cluster, s.model});
  if (it == index_.end()) return;
  it->second.by_free.erase({s.whole_free, n});
  it->second.with_partial.erase(n);
}

void GpuPool::reindex(NodeId n) {
  const NodeState& s = nodes_[n];
  if (!s.schedulable) return;
  Index& idx = index_[{s.cluster, s.model}];
  idx.by_free.insert({s.whole_free, n});
  if (s.partial > 0) idx.with_partial.insert(n);
}

void GpuPool::set_schedulable(NodeId node, bool schedulable) {
  if (nodes_[node].schedulable == schedulable) return;
  unindex(node);
  nodes_[node].schedulable = schedulable;
  reindex(node);
  ++version_;
  if (schedulable) ++generation_;
}

void GpuPool::take(const Placement& p) {
  ++version_;
  for (const GpuSlot& g : p) {
    NodeState& s = nodes_[g.node];
    unindex(g.node);
    Milli& f = s.free[g.gpu];
    const bool was_whole = f == kWholeGpu;
    const bool was_partial = f > 0 && f < kWholeGpu;
    if (in_mig(s, g.gpu)) {
      take_instance(mig_free(s, g.gpu), g);
      f = mig_room(mig_free(s, g.gpu));
    } else {
      f -= g.milli;
    }
    if (was_whole) --s.whole_free;
    if (was_partial) --s.partial;
    if (f > 0 && f < kWholeGpu) ++s.partial;
    reindex(g.node);
  }
}

void GpuPool::release(const Placement& p) {
  ++version_;
  for (const GpuSlot& g : p) {
    NodeState& s = nodes_[g.node];
    unindex(g.node);
    Milli& f = s.free[g.gpu];
    if (f > 0 && f < kWholeGpu) --s.partial;
    if (in_mig(s, g.gpu)) {
      give_instance(mig_free(s, g.gpu), mig_[s.mig_at - 1].all[g.gpu], g);
      f = mig_room(mig_free(s, g.gpu));
    } else {
      f += g.milli;
    }
    if (f == kWholeGpu) ++s.whole_free;
    if (f > 0 && f < kWholeGpu) ++s.partial;
    reindex(g.node);
  }
  ++generation_;
}

Milli GpuPool::largest_gpu_free(ClusterId cluster) const {
  Milli best = 0;
  for (auto it = index_.lower_bound({cluster, 0}); it != index_.end() && it->first.first == cluster;
       ++it) {
    if (!it->second.by_free.empty() && it->second.by_free.rbegin()->first > 0) return kWholeGpu;
    for (NodeId n : it->second.with_partial) {
      for (Milli f : nodes_[n].free) {
        if (f < kWholeGpu) best = std::max(best, f);
      }
    }
  }
  return best;
}

int GpuPool::largest_whole_free(ClusterId cluster, const std::vector<GpuModelId>& models) const {
  int best = 0;
  for (const auto& [key, idx] : index_) {
    if (key.first != cluster || !accepts(models, key.second) || idx.by_free.empty()) continue;
    best = std::max(best, idx.by_free.rbegin()->first);
  }
  return best;
}

bool GpuPool::fits_node_with(NodeId node, const Shape& shape,
                             const std::vector<Milli>& extra) const {
  const NodeState& s = nodes_[node];
  const std::size_t gpus = s.free.size();
  if (s.mig_at == 0) {  // no GPU in MIG mode: the common case, kept tight
    if (shape.fractional()) {
      if (shape.mig) return false;
      for (std::size_t g = 0; g < gpus; ++g) {
        if (s.free[g] + extra[g] >= shape.gpu_milli) return true;
      }
      return false;
    }
    int whole = 0;
    for (std::size_t g = 0; g < gpus; ++g) whole += s.free[g] + extra[g] == kWholeGpu;
    return whole >= shape.gpus_per_node;
  }
  if (shape.fractional()) {
    for (std::size_t g = 0; g < gpus; ++g) {
      if (in_mig(s, g)) {
        // An instance handed back is one of `extra`'s; their sum may overstate the largest (the
        // what-if placement that follows has the last word).
        if (mig_fit(mig_free(s, g), shape) || extra[g] >= shape.gpu_milli) return true;
      } else if (!shape.mig && s.free[g] + extra[g] >= shape.gpu_milli) {
        return true;
      }
    }
    return false;
  }
  int whole = 0;
  for (std::size_t g = 0; g < gpus; ++g) {
    whole += !in_mig(s, g) && s.free[g] + extra[g] == kWholeGpu;
  }
  return whole >= shape.gpus_per_node;
}

void GpuPool::whole_gpus_of(NodeId n, int count, Placement* out) const {
  const NodeState& s = nodes_[n];
  for (std::size_t g = 0; g < s.free.size() && count > 0; ++g) {
    if (s.free[g] == kWholeGpu) {
      out->push_back(GpuSlot{n, static_cast<std::uint16_t>(g), kWholeGpu});
      --count;
    }
  }
}

std::optional<Placement> GpuPool::find_single(const Index& idx, const Shape& s,
                                              const NodeMask* ex) const {
  // With dynamic MIG, whole GPUs of nodes with none in MIG mode first, so that MIG instances stay
  // on few nodes and the rest stay whole for gangs (docs/policy.md section 7.5).
  for (int pass = spare_mig_nodes_ ? 0 : 1; pass < 2; ++pass) {
    for (auto it = idx.by_free.lower_bound({s.gpus_per_node, 0}); it != idx.by_free.end(); ++it) {
      if (excluded_node(ex, it->second) || (pass == 0 && has_mig(it->second))) continue;
      Placement p;
      whole_gpus_of(it->second, s.gpus_per_node, &p);
      return p;
    }
  }
  return std::nullopt;
}

std::optional<Placement> GpuPool::find_fraction(const Index& idx, const Shape& s,
                                                const NodeMask* ex) const {
  // Best fit among partly used GPUs first, so that whole GPUs stay whole.
  std::optional<GpuSlot> best;
  Milli best_free = kWholeGpu + 1;
  for (NodeId n : idx.with_partial) {
    if (excluded_node(ex, n)) continue;
    const NodeState& st = nodes_[n];
    for (std::size_t g = 0; g < st.free.size(); ++g) {
      const Milli f = st.free[g];
      if (f < s.gpu_milli || f >= kWholeGpu) continue;
      const auto slot = fraction_slot(n, static_cast<int>(g), s);
      // A GPU in MIG mode ranks by the instance the slot takes whole; a shared GPU by its room.
      const Milli rank = !slot ? best_free : in_mig(st, g) ? slot->milli : f;
      if (rank < best_free) {
        best_free = rank;
        best = slot;
      }
    }
  }
  if (best || s.mig) return best ? std::optional<Placement>(Placement{*best}) : std::nullopt;
  for (auto it = idx.by_free.lower_bound({1, 0}); it != idx.by_free.end(); ++it) {
    if (excluded_node(ex, it->second)) continue;
    Placement p;
    whole_gpus_of(it->second, 1, &p);
    p[0].milli = s.gpu_milli;
    return p;
  }
  return std::nullopt;
}

std::optional<Placement> GpuPool::find_gang(const Index& idx, const Shape& s, const NodeMask* ex,
                                            bool span, bool* single_block) const {
  // Candidates in best-fit order, then grouped by block (a stable sort keeps best-fit order within
  // each block): one flat buffer rather than a map of lists, as this runs for every gang searched.
  std::vector<std::pair<BlockId, NodeId>> cands;
  for (auto it = idx.by_free.lower_bound({s.gpus_per_node, 0}); it != idx.by_free.end(); ++it) {
    if (excluded_node(ex, it->second)) continue;
    cands.emplace_back(nodes_[it->second].block, it->second);
  }
  if (static_cast<int>(cands.size()) < s.nodes) return std::nullopt;
  std::stable_sort(cands.begin(), cands.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // Blocks as [first, last) ranges of cands, in block order.
  std::vector<std::pair<std::size_t, std::size_t>> blocks;
  for (std::size_t i = 0; i < cands.size();) {
    std::size_t end = i;
    while (end < cands.size() && cands[end].first == cands[i].first) ++end;
    blocks.emplace_back(i, end);
    i = end;
  }
  auto size_of = [](const std::pair<std::size_t, std::size_t>& b) { return b.second - b.first; };
  // The tightest block that holds the whole gang keeps larger blocks whole for larger gangs.
  const std::pair<std::size_t, std::size_t>* chosen = nullptr;
  for (const auto& b : blocks) {
    if (static_cast<int>(size_of(b)) >= s.nodes && (!chosen || size_of(b) < size_of(*chosen))) {
      chosen = &b;
    }
  }
  std::vector<NodeId> picked;
  if (chosen) {
    for (std::size_t i = chosen->first; i < chosen->first + static_cast<std::size_t>(s.nodes);
         ++i) {
      picked.push_back(cands[i].second);
    }
    *single_block = true;
  } else {
    if (!span) return std::nullopt;
    // Fewest blocks: take from the fullest blocks first.
    std::stable_sort(blocks.begin(), blocks.end(),
                     [&](const auto& a, const auto& b) { return size_of(a) > size_of(b); });
    for (const auto& b : blocks) {
      for (std::size_t i = b.first; i < b.second; ++i) {
        if (static_cast<int>(picked.size()) == s.nodes) break;
        picked.push_back(cands[i].second);
      }
    }
    *single_block = false;
  }
  std::sort(picked.begin(), picked.end());
  Placement p;
  for (NodeId n : picked) {
    // An uneven gang's remainder goes on its last node (every picked node has room for more).
    const bool last = n == picked.back() && s.uneven();
    whole_gpus_of(n, last ? s.last_node_gpus : s.gpus_per_node, &p);
  }
  return p;
}

std::optional<Placement> GpuPool::find(ClusterId cluster, const Shape& shape,
                                       const std::vector<GpuModelId>& models,
                                       const NodeMask* excluded, bool gang_spans_blocks) const {
  // Try each accepted model; keep the best result (single node: tightest fit; gang: one block).
  std::optional<Placement> best;
  int best_free = 1 << 30;
  bool best_single_block = false;
  for (auto it = index_.lower_bound({cluster, 0}); it != index_.end() && it->first.first == cluster;
       ++it) {
    if (!accepts(models, it->first.second)) continue;
    const Index& idx = it->second;
    if (shape.fractional()) {
      auto p = find_fraction(idx, shape, excluded);
      if (!p) continue;
      const int f = nodes_[(*p)[0].node].whole_free;
      if (!best || f < best_free) {
        best = std::move(p);
        best_free = f;
      }
    } else if (!shape.gang()) {
      auto p = find_single(idx, shape, excluded);
      if (!p) continue;
      const int f = nodes_[(*p)[0].node].whole_free;
      if (!best || f < best_free) {
        best = std::move(p);
        best_free = f;
      }
    } else {
      bool single = false;
      auto p = find_gang(idx, shape, excluded, gang_spans_blocks, &single);
      if (!p) continue;
      if (!best || (single && !best_single_block)) {
        best = std::move(p);
        best_single_block = single;
      }
    }
  }
  return best;
}

}  // namespace allot::core
