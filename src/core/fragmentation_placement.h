// The fragmentation-aware rule (docs/policy.md §14) on the scheduler's own GPU pool: what
// PlacementRule::LeastFragmenting calls (GpuPool::find_least_fragmenting, defined in the .cpp),
// with the mix of the last requests seen (RecentRequests, one per cluster in the Scheduler) as
// its target workload.
//
// Pure: no I/O, threads or clock.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "core/fragmentation.h"
#include "core/gpu_pool.h"

namespace allot::core {

// The last `capacity` single-node requests (GPUs per node and milli; CPU, memory and models are
// not modelled by the pool), as a workload: identical requests grouped with their share.
class RecentRequests {
 public:
  explicit RecentRequests(std::size_t capacity = 1000) : capacity_(capacity) {}
  void note(const Shape& shape);  // gangs (nodes > 1) are left out
  std::vector<WorkloadShare> workload() const;
  std::size_t size() const { return window_.size(); }

 private:
  std::size_t capacity_;
  std::deque<FragRequest> window_;
};

// least_fragmenting over `candidates` of `pool` (schedulable nodes of one cluster that could hold
// `shape` with one of `models`; others are passed over) for a single-node shape. nullopt: it fits
// none, or `shape` is a gang.
std::optional<Placement> least_fragmenting_placement(const GpuPool& pool,
                                                     std::span<const NodeId> candidates,
                                                     const Shape& shape,
                                                     const std::vector<GpuModelId>& models,
                                                     std::span<const WorkloadShare> workload);

}  // namespace allot::core
