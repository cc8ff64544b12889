// The fragmentation-aware rule on the scheduler's GPU pool (see fragmentation_placement.h).
#include "core/fragmentation_placement.h"

#include <algorithm>

#include "core/placement_filters.h"

namespace allot::core {
namespace {

FragRequest request_of(const Shape& shape) {
  FragRequest r;
  r.gpus = shape.gpus_per_node;
  r.milli = shape.gpu_milli;
  return r;
}

}  // namespace

void RecentRequests::note(const Shape& shape) {
  if (shape.nodes != 1 || capacity_ == 0) return;
  window_.push_back(request_of(shape));
  while (window_.size() > capacity_) window_.pop_front();
}

std::vector<WorkloadShare> RecentRequests::workload() const {
  const std::vector<FragRequest> window(window_.begin(), window_.end());
  return shares_of(window);
}

std::optional<Placement> least_fragmenting_placement(const GpuPool& pool,
                                                     std::span<const NodeId> candidates,
                                                     const Shape& shape,
                                                     const std::vector<GpuModelId>& models,
                                                     std::span<const WorkloadShare> workload) {
  if (shape.nodes != 1) return std::nullopt;
  std::vector<FragNode> nodes;
  std::vector<NodeId> ids;
  for (NodeId n : candidates) {
    if (!pool.schedulable(n) || !pool.could_ever_fit(n, shape, models)) continue;
    FragNode f;
    for (int g = 0; g < pool.gpu_count(n); ++g) {
      // A GPU in MIG mode is never a whole GPU (§7.3), even with its largest instance free.
      const Milli free = pool.free_milli(n, g);
      f.gpu_free.push_back(pool.in_mig_mode(n, g) ? std::min(free, kWholeGpu - 1) : free);
    }
    nodes.push_back(std::move(f));
    ids.push_back(n);
  }
  const auto choice = least_fragmenting(nodes, request_of(shape), workload);
  if (!choice) return std::nullopt;
  Placement p;
  for (int g : choice->gpus) {
    if (!shape.fractional()) {
      p.push_back(GpuSlot{ids[choice->node], static_cast<std::uint16_t>(g), kWholeGpu});
      continue;
    }
    // A fraction on a GPU in MIG mode takes a whole instance (GpuPool::fraction_slot).
    auto slot = pool.fraction_slot(ids[choice->node], g, shape);
    if (!slot) return std::nullopt;
    p.push_back(*slot);
  }
  return p;
}

std::optional<Placement> GpuPool::find_least_fragmenting(
    ClusterId cluster, const Shape& shape, const std::vector<GpuModelId>& models,
    const NodeMask* excluded, bool gang_spans_blocks,
    std::span<const WorkloadShare> workload) const {
  auto best_fit = find(cluster, shape, models, excluded, gang_spans_blocks);
  if (!best_fit || shape.nodes != 1 || shape.mig != 0 ||
      (spare_mig_nodes_ && !shape.fractional())) {
    return best_fit;
  }
  std::vector<NodeId> candidates;
  for (auto it = index_.lower_bound({cluster, 0}); it != index_.end() && it->first.first == cluster;
       ++it) {
    if (!accepts(models, it->first.second)) continue;
    for (const auto& [free, n] : it->second.by_free) {
      if (!excluded_node(excluded, n)) candidates.push_back(n);
    }
  }
  std::sort(candidates.begin(), candidates.end());  // ties go to the lower node id
  std::vector<WorkloadShare> alone;
  if (workload.empty()) {
    alone.push_back({FragRequest{shape.gpus_per_node, shape.gpu_milli, 0, 0, {}}, 1.0});
    workload = alone;
  }
  auto p = least_fragmenting_placement(*this, candidates, shape, models, workload);
  return p ? p : best_fit;
}

}  // namespace allot::core
