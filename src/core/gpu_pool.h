// Free GPU capacity of every node, indexed so that placement is a best-fit look-up rather than a
// scan. Each GPU is a vector entry of free thousandths, so whole GPUs and fractions (MIG slices,
// shared GPUs) are allocated by the same all-or-nothing take/release. A GPU in MIG mode is handed
// out a whole instance at a time: its entry is its largest free instance (never a whole GPU), and
// its free instances are kept beside it (docs/policy.md section 7.3, "MIG instances").
//
// Thread-safety: none; owned by one Scheduler and used by one thread at a time, like all of
// src/core (which has no threads, I/O or clock).
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "core/fragmentation.h"
#include "core/job.h"
#include "core/node.h"
#include "core/types.h"

namespace allot::core {

struct GpuSlot {
  GpuSlot() = default;
  // {node, gpu}, {node, gpu, milli} and {node, gpu, milli, mig}: `mig` sits before `milli` in
  // memory (a slot stays 16 bytes; placements are copied on every start), not in the braces.
  GpuSlot(NodeId n, std::uint16_t g, Milli m = kWholeGpu, MigProfileId p = 0)
      : node(n), gpu(g), mig(p), milli(m) {}
  NodeId node = 0;
  std::uint16_t gpu = 0;
  MigProfileId mig = 0;     // the MIG instance's profile on a GPU in MIG mode (0: none)
  Milli milli = kWholeGpu;  // on a GPU in MIG mode: the whole instance's share
  bool operator==(const GpuSlot&) const = default;
};
using Placement = std::vector<GpuSlot>;

// Nodes a placement may not use: indexed by NodeId, non-zero = excluded. nullptr = none excluded.
using NodeMask = std::vector<char>;

class GpuPool {
 public:
  void add_node(const Node& node);
  void set_schedulable(NodeId node, bool schedulable);
  bool schedulable(NodeId node) const { return nodes_[node].schedulable; }

  int whole_free(NodeId node) const { return nodes_[node].whole_free; }
  int gpu_count(NodeId node) const { return static_cast<int>(nodes_[node].free.size()); }
  // Free room on one GPU; on a GPU in MIG mode, its largest free instance.
  Milli free_milli(NodeId node, int gpu) const { return nodes_[node].free[gpu]; }
  bool in_mig_mode(NodeId node, int gpu) const { return in_mig(nodes_[node], gpu); }
  // Replaces a node's MIG instances (NodeSpec::mig) and frees all its GPUs: the caller takes
  // what runs there again.
  void set_mig(NodeId node, const std::vector<std::vector<MigInstance>>& layout);
  // The slot a fraction of `shape` would take on this GPU (a whole MIG instance, or its milli of
  // a shared GPU), or none when it does not fit there.
  std::optional<GpuSlot> fraction_slot(NodeId node, int gpu, const Shape& shape) const;
  // The slots that make up GPU `gpu` of `node` while nothing holds any of it: the whole GPU, or
  // every instance of a GPU in MIG mode; none while some of it is taken.
  std::optional<Placement> entire_gpu(NodeId node, int gpu) const;
  // Largest free room on one GPU of a schedulable node of `cluster` (any model), in milli.
  Milli largest_gpu_free(ClusterId cluster) const;
  // Largest number of whole GPUs free on one schedulable node of `cluster` with one of `models`.
  int largest_whole_free(ClusterId cluster, const std::vector<GpuModelId>& models) const;

  void take(const Placement& p);
  void release(const Placement& p);

  // Best-fit placement for `shape` on schedulable nodes of `cluster` whose model is accepted,
  // skipping nodes set in `excluded`. Deterministic: ties go to the lower node id.
  std::optional<Placement> find(ClusterId cluster, const Shape& shape,
                                const std::vector<GpuModelId>& models, const NodeMask* excluded,
                                bool gang_spans_blocks) const;
  // The same search under `rule`: BestFit is find(); Consolidate is find_consolidated();
  // LeastFragmenting is find_least_fragmenting() for `workload`. Every rule fits a request where
  // find() does: they differ only in where.
  std::optional<Placement> place(ClusterId cluster, const Shape& shape,
                                 const std::vector<GpuModelId>& models, const NodeMask* excluded,
                                 PlacementRule rule, bool gang_spans_blocks,
                                 std::span<const WorkloadShare> workload = {}) const {
    switch (rule) {
      case PlacementRule::Consolidate:
        return find_consolidated(cluster, shape, models, excluded);
      case PlacementRule::LeastFragmenting:
        return find_least_fragmenting(cluster, shape, models, excluded, gang_spans_blocks,
                                      workload);
      case PlacementRule::BestFit:
        break;
    }
    return find(cluster, shape, models, excluded, gang_spans_blocks);
  }
  // Fragmentation gradient descent (docs/policy.md section 14): a request up to one node goes,
  // among the schedulable nodes of `cluster` not in `excluded`, where its node's expected
  // fragmentation for `workload` rises least (the request alone when `workload` is empty). A
  // gang, a request naming a MIG profile, and with spare MIG nodes (dynamic MIG) a whole-GPU
  // request, are placed as find() places them.
  std::optional<Placement> find_least_fragmenting(ClusterId cluster, const Shape& shape,
                                                  const std::vector<GpuModelId>& models,
                                                  const NodeMask* excluded, bool gang_spans_blocks,
                                                  std::span<const WorkloadShare> workload) const;
  // The Helios simulator's consolidate placement (PolicyConfig::placement, Consolidate): a
  // request up to a node goes to the node with the fewest free whole GPUs that fits, ties by node
  // index; a gang takes the lowest-indexed nodes with gpus_per_node free (blocks ignored), all of
  // one model, and an uneven gang's remainder then goes to the node with the fewest free whole
  // GPUs that fits it among the rest. Fractions are placed as find() places them.
  std::optional<Placement> find_consolidated(ClusterId cluster, const Shape& shape,
                                             const std::vector<GpuModelId>& models,
                                             const NodeMask* excluded) const;
  // Whether `shape` could fit node `node` if it were empty (size, model, and for a fraction on a
  // node with GPUs in MIG mode, an instance that would hold it).
  bool could_ever_fit(NodeId node, const Shape& shape,
                      const std::vector<GpuModelId>& models) const {
    const NodeState& s = nodes_[node];
    if (static_cast<int>(s.free.size()) < shape.gpus_per_node ||
        !(models.empty() || std::find(models.begin(), models.end(), s.model) != models.end())) {
      return false;
    }
    return !shape.fractional() || (!shape.mig && s.mig_at == 0) ||
           fraction_could_ever_fit(s, shape);
  }
  // GPUs of `node` free for `shape` once `extra` (GPU index -> milli) is handed back.
  bool fits_node_with(NodeId node, const Shape& shape, const std::vector<Milli>& extra) const;

  // With dynamic MIG: a single-node whole-GPU request goes to a node without GPUs in MIG mode
  // when one fits, before the best fit among the others (docs/policy.md section 7.5).
  void set_spare_mig_nodes(bool on) { spare_mig_nodes_ = on; }
  bool has_mig(NodeId node) const {
    const NodeState& s = nodes_[node];
    if (s.mig_at == 0) return false;
    for (std::size_t g = 0; g < s.free.size(); ++g) {
      if (in_mig(s, g)) return true;
    }
    return false;
  }

  // Rises whenever capacity is handed back; a failed search stays failed while it does not change.
  std::uint64_t generation() const { return generation_; }
  // For a what-if search that handed capacity back and took it again: nothing changed, so a
  // failed search stays failed. `generation` is what generation() returned before.
  void restore_generation(std::uint64_t generation) { generation_ = generation; }
  // Rises on every change of free capacity.
  std::uint64_t version() const { return version_; }
  std::size_t node_count() const { return nodes_.size(); }

 private:
  struct NodeState {
    ClusterId cluster = 0;
    GpuModelId model = 0;
    // 1 + its index in mig_ when any GPU of the node is in MIG mode, else 0 (kept in what was
    // padding: the common node without MIG costs nothing more).
    std::uint16_t mig_at = 0;
    BlockId block = 0;
    bool schedulable = true;
    int whole_free = 0;
    int partial = 0;  // GPUs partly used
    std::vector<Milli> free;
  };
  // The MIG instances of a node with GPUs in MIG mode, per GPU: all of them, and those free, in
  // (milli, profile) order. A GPU with no instances is whole.
  struct MigNode {
    std::vector<std::vector<MigInstance>> all, free;
  };
  bool fraction_could_ever_fit(const NodeState& s, const Shape& shape) const;
  bool in_mig(const NodeState& s, std::size_t gpu) const {
    return s.mig_at != 0 && !mig_[s.mig_at - 1].all[gpu].empty();
  }
  std::vector<MigInstance>& mig_free(const NodeState& s, std::size_t gpu) {
    return mig_[s.mig_at - 1].free[gpu];
  }
  const std::vector<MigInstance>& mig_free(const NodeState& s, std::size_t gpu) const {
    return mig_[s.mig_at - 1].free[gpu];
  }
  using Key = std::pair<ClusterId, GpuModelId>;
  struct Index {
    std::set<std::pair<int, NodeId>> by_free;  // (whole GPUs free, node) of schedulable nodes
    std::set<NodeId> with_partial;             // schedulable nodes with a partly used GPU
  };

  void unindex(NodeId n);
  void reindex(NodeId n);
  std::optional<Placement> find_single(const Index& idx, const Shape& s, const NodeMask* ex) const;
  std::optional<Placement> find_fraction(const Index& idx, const Shape& s,
                                         const NodeMask* ex) const;
  std::optional<Placement> find_gang(const Index& idx, const Shape& s, const NodeMask* ex,
                                     bool span, bool* single_block) const;
  void whole_gpus_of(NodeId n, int count, Placement* out) const;

  std::vector<NodeState> nodes_;
  std::vector<MigNode> mig_;
  std::map<Key, Index> index_;
  std::uint64_t generation_ = 0;
  std::uint64_t version_ = 0;
  bool spare_mig_nodes_ = false;
};

}  // namespace allot::core
