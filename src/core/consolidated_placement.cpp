// The placement rule of the Helios simulator ("consolidate"), which the Tiresias simulator and
// Slurm's --gpus share in spirit: pack small requests onto the fullest node that takes them, and
// give gangs whole nodes in index order. allot's own rule (gpu_pool.cpp) keeps gangs inside one
// block instead; this one exists so that the fifo-strict baseline places job for job as those
// simulators do (docs/simulator.md, "Baselines").
#include <algorithm>

#include "core/gpu_pool.h"
#include "core/placement_filters.h"

namespace allot::core {

std::optional<Placement> GpuPool::find_consolidated(ClusterId cluster, const Shape& shape,
                                                    const std::vector<GpuModelId>& models,
                                                    const NodeMask* excluded) const {
  if (shape.fractional()) return find(cluster, shape, models, excluded, true);
  const auto first = index_.lower_bound({cluster, 0});
  auto same_cluster = [&](auto it) { return it != index_.end() && it->first.first == cluster; };

  if (!shape.gang()) {
    // Fewest free whole GPUs that fit, then lowest node index, over every accepted model: the
    // by_free index is ordered by exactly that pair, so each model's first fitting entry is its
    // best candidate.
    std::optional<std::pair<int, NodeId>> best;
    for (auto it = first; same_cluster(it); ++it) {
      if (!accepts(models, it->first.second)) continue;
      const auto& by_free = it->second.by_free;
      for (auto n = by_free.lower_bound({shape.gpus_per_node, 0}); n != by_free.end(); ++n) {
        if (excluded_node(excluded, n->second)) continue;
        if (!best || *n < *best) best = *n;
        break;
      }
    }
    if (!best) return std::nullopt;
    Placement p;
    whole_gpus_of(best->second, shape.gpus_per_node, &p);
    return p;
  }

  // A gang: one model, its full nodes the lowest-indexed with room, then the remainder.
  const int full_nodes = shape.uneven() ? shape.nodes - 1 : shape.nodes;
  std::vector<NodeId> roomy;
  for (auto it = first; same_cluster(it); ++it) {
    if (!accepts(models, it->first.second)) continue;
    const auto& by_free = it->second.by_free;
    roomy.clear();
    for (auto n = by_free.lower_bound({shape.gpus_per_node, 0}); n != by_free.end(); ++n) {
      if (!excluded_node(excluded, n->second)) roomy.push_back(n->second);
    }
    if (static_cast<int>(roomy.size()) < full_nodes) continue;
    std::sort(roomy.begin(), roomy.end());
    roomy.resize(static_cast<std::size_t>(full_nodes));
    Placement p;
    for (NodeId n : roomy) whole_gpus_of(n, shape.gpus_per_node, &p);
    if (!shape.uneven()) return p;
    // The remainder on the node with the most free whole GPUs among those not taken, ties by
    // lowest index: the next node in Helios' walk down its nodes sorted by free GPUs (a stable
    // sort, so index order among equals). by_free is ascending, so within one count the first
    // node seen has the lowest index and only a larger count replaces it.
    std::optional<std::pair<int, NodeId>> most;
    for (auto n = by_free.lower_bound({shape.last_node_gpus, 0}); n != by_free.end(); ++n) {
      if (excluded_node(excluded, n->second)) continue;
      if (std::binary_search(roomy.begin(), roomy.end(), n->second)) continue;
      if (!most || n->first > most->first) most = *n;
    }
    if (most) {
      whole_gpus_of(most->second, shape.last_node_gpus, &p);
      return p;
    }
  }
  return std::nullopt;
}

}  // namespace allot::core
