// The working state of one cluster pass of Scheduler::cycle (Scheduler::ClusterScratch) and the
// small value types it is made of. Internal to the scheduler's own files (src/core/scheduler*.cpp
// and the seams listed in README's tour): nothing outside src/core includes it.
//
// Thread-safety: none of its own. A ClusterScratch belongs to one Scheduler, which is used by one
// thread at a time; a copy of the Scheduler starts without one (Scheduler::ScratchBox).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "core/queue_order.h"
#include "core/scheduler.h"

namespace allot::core {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline Milli total_milli(const Placement& p) {
  Milli m = 0;
  for (const GpuSlot& g : p) m += g.milli;
  return m;
}

// Speed only: asks the memory for the part of a job's entry that a walk reads (its spec) a few
// jobs ahead of its turn, so that a walk over a long queue does not wait for each entry in turn.
// (A walk over 10,000 settled jobs spent most of its time in these first touches.)
inline constexpr std::size_t kPrefetchDistance = 4;
inline void prefetch(const JobEntry* j) {
  if (!j) return;
  const char* p = reinterpret_cast<const char*>(&j->spec);
  for (std::size_t at = 0; at < sizeof(JobSpec); at += 64) __builtin_prefetch(p + at);
}

// A key for "this request shape failed against this pool state", so that the thousands of
// identical requests behind a blocked one cost a look-up, not a search.
struct ShapeKey {
  int nodes;
  int per_node;
  Milli milli;
  int last_node;         // an uneven gang's remainder (Shape::last_node_gpus)
  int mig;               // Shape::mig: a MIG profile asked for fits fewer GPUs than its milli
  std::uint64_t models;  // up to four model ids packed; ~0 when not cacheable
  auto operator<=>(const ShapeKey&) const = default;
};

inline std::uint64_t pack_models(const std::vector<GpuModelId>& models) {
  if (models.size() > 4) return ~std::uint64_t{0};
  std::array<GpuModelId, 4> sorted{};  // no allocation: this runs for every job considered
  std::copy(models.begin(), models.end(), sorted.begin());
  std::sort(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(models.size()));
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < models.size(); ++i) {
    v = (v << 16) | (static_cast<std::uint64_t>(sorted[i]) + 1);
  }
  return v;
}

inline ShapeKey shape_key(const JobSpec& spec) {
  return ShapeKey{spec.shape.nodes,          spec.shape.gpus_per_node, spec.shape.gpu_milli,
                  spec.shape.last_node_gpus, spec.shape.mig,           pack_models(spec.models)};
}

// Speed only (decisions unchanged): ShapeKey -> T as an open-addressing table, since a cycle looks
// up the memo of every job it considers and a walk sees only a few dozen distinct shapes. clear()
// keeps the capacity for the next pass.
template <class T>
class ShapeTable {
 public:
  T& operator[](const ShapeKey& k) {
    if ((used_ + 1) * 2 > slots_.size()) grow();
    Slot& slot = probe(slots_, k);
    if (!slot.used) {
      slot.used = true;
      slot.key = k;
      slot.value = T{};
      ++used_;
    }
    return slot.value;
  }
  void clear() {
    if (used_ == 0) return;
    for (Slot& slot : slots_) slot.used = false;
    used_ = 0;
  }

 private:
  struct Slot {
    bool used = false;
    ShapeKey key{};
    T value{};
  };
  static std::size_t hash(const ShapeKey& k) {
    std::uint64_t h = k.models * 0x9E3779B97F4A7C15ull;
    h ^= (static_cast<std::uint64_t>(k.nodes) << 40) ^
         (static_cast<std::uint64_t>(k.per_node) << 20) ^ static_cast<std::uint64_t>(k.milli);
    h *= 0xBF58476D1CE4E5B9ull;
    return static_cast<std::size_t>(h ^ (h >> 31));
  }
  static Slot& probe(std::vector<Slot>& slots, const ShapeKey& k) {
    const std::size_t mask = slots.size() - 1;
    for (std::size_t i = hash(k) & mask;; i = (i + 1) & mask) {
      if (!slots[i].used || slots[i].key == k) return slots[i];
    }
  }
  void grow() {
    std::vector<Slot> bigger(std::max<std::size_t>(64, slots_.size() * 2));
    for (Slot& slot : slots_) {
      if (slot.used) probe(bigger, slot.key) = std::move(slot);
    }
    slots_ = std::move(bigger);
  }
  std::vector<Slot> slots_;  // a power of two in size, at most half used
  std::size_t used_ = 0;
};

// GPU slots of placement `p` on node n (a placement lists its nodes in order).
inline int slots_on(const Placement& p, NodeId n) {
  if (!p.empty() && p.front().node == n && p.back().node == n) return static_cast<int>(p.size());
  int k = 0;
  for (const GpuSlot& g : p) k += g.node == n;
  return k;
}

// A budget node's rank in the fair-share walk: lowest standing first, then projected usage, id.
struct RankKey {
  double standing;
  MilliGpuSeconds projected;
  BudgetId id;
  auto operator<=>(const RankKey&) const = default;
};

// The ranked children of one budget node: an ordered set kept as a sorted vector, which a walk
// reuses from cycle to cycle without allocating (a node has a handful of children).
class RankSet {
 public:
  bool empty() const { return v_.empty(); }
  const RankKey& front() const { return v_.front(); }
  void insert(const RankKey& k) {
    auto it = std::lower_bound(v_.begin(), v_.end(), k);
    if (it == v_.end() || *it != k) v_.insert(it, k);
  }
  bool erase(const RankKey& k) {
    auto it = std::lower_bound(v_.begin(), v_.end(), k);
    if (it == v_.end() || *it != k) return false;
    v_.erase(it);
    return true;
  }
  void clear() { v_.clear(); }

 private:
  std::vector<RankKey> v_;
};

// ---------------------------------------------------------------------------------------------
// Per-cycle state of one cluster pass.

// What a pass has learnt about one request shape (see consider).
struct Scheduler::ShapeMemo {
  std::uint64_t failed_at = ~std::uint64_t{0};  // stamp at which the masked search failed
  std::uint64_t probed_at = ~std::uint64_t{0};  // stamp of fits_unmasked
  bool fits_unmasked = false;
  int matching = -1;  // nodes large enough with an accepted model
  int healthy = -1;   // of which schedulable
  std::uint64_t largest_at = ~std::uint64_t{0};
  int largest_free = 0;
};

struct Scheduler::ClusterScratch {
  ClusterId cluster = 0;
  std::vector<MilliGpuSeconds> projected;   // usage + remaining contracts, per budget node
  std::vector<MilliGpuSeconds> rank_extra;  // unallocated starts this cycle (ranking only)
  std::vector<int> debug_gpus;              // per budget: GPUs of allocated debug jobs running
  // GPUs of running jobs inside the interactive allowance (§6): per leaf budget, and per owner.
  std::vector<int> allowance_gpus;
  std::map<std::string, int> allowance_by_owner;
  std::vector<double> allocation;  // milli-GPU-seconds owed over the window
  NodeMask mask;                   // nodes reserved for some holder
  std::vector<JobId> reserved_by;  // per node: the holder
  std::vector<JobId> previous;     // holders of last cycle's reservations (a handful)
  bool held_before(JobId id) const {
    return std::find(previous.begin(), previous.end(), id) != previous.end();
  }
  // Holders of last cycle's reservations already considered in this pass: their old nodes stay
  // closed to everyone else unless they re-planned (then they are in `made`).
  std::vector<JobId> passed;
  bool passed_by(JobId id) const {
    return std::find(passed.begin(), passed.end(), id) != passed.end();
  }
  std::vector<Reservation> made;  // this cycle's
  ShapeTable<ShapeMemo> memo;
  std::map<std::pair<ShapeKey, BudgetId>, std::uint64_t> preemption_failed;
  // Running jobs a funded request might take (unallocated, or past their contract), by node:
  // exposed_nodes holds (node, [first, last) into exposed), sorted by node.
  struct Exposed {
    JobEntry* job;
    bool allocated;
    bool within_share;  // unallocated, its leaf holds at most its share (spare_work_within_share)
    double lost;        // GPU-seconds lost if stopped now
    int gpus_here;      // its GPU slots on this node
  };
  std::vector<Exposed> exposed;
  std::vector<Milli>
      held_all;  // [leaf budget] milli-GPUs running, allocated or not (compute_projected)
  std::vector<Milli> held_now;  // held_all kept current through the cycle (share claims)
  Milli inference_held = 0;     // allocated inference jobs' milli-GPUs (policy.md §15)
  bool claiming = false;        // the request try_preempt serves is a share claim, not funded
  int claims_considered = 0;    // share claims that reached the preemption step this cycle
  std::size_t claimable = 0;    // exposed unallocated jobs of leaves above their share
  std::vector<std::pair<NodeId, std::pair<std::size_t, std::size_t>>> exposed_nodes;
  // Buffers of try_preempt, reused across attempts.
  struct PreemptCost {
    double allocated_lost = 0;     // GPU-seconds lost by allocated victims (minimised first)
    std::size_t within_share = 0;  // victims of budgets within their share (minimised next)
    double lost = 0;               // all GPU-seconds lost
    std::size_t count = 0;
    auto operator<=>(const PreemptCost&) const = default;
  };
  struct NodeOption {
    NodeId node;
    PreemptCost cost;
    std::size_t first, last;  // its victims: victim_buffer[first, last)
  };
  std::vector<NodeOption> option_buffer;
  std::vector<const Exposed*> candidate_buffer;
  std::vector<JobId> victim_buffer;
  std::vector<Milli> extra_buffer;
  std::vector<char> keep_buffer;
  std::vector<char> made_funded;  // per made reservation: its holder may preempt
  std::vector<int> made_free;     // per made reservation: most whole GPUs free on a node
  int made_free_max = 0;          // the most of made_free
  std::uint64_t made_free_at = ~std::uint64_t{0};
  std::vector<NodeId> opened_buffer;
  std::uint64_t mask_version = 0;
  int preemption_considered = 0;  // funded blocked jobs that reached the preemption step
  mutable std::tuple<std::uint64_t, std::uint64_t, std::size_t> usable_free_key{~0ull, 0, 0};
  mutable int usable_free = 0;
  mutable std::tuple<std::uint64_t, std::uint64_t, std::size_t> backfill_free_key{~0ull, 0, 0};
  mutable int backfill_free = 0;
  bool head_blocked = false;
  Time now = 0;
  bool explain = true;               // explain_all: waiting jobs' explanations go out
  int largest_waiting_per_node = 0;  // over waiting jobs that some node could hold
  // Buffers of plan_reservation.
  struct Ready {
    Time at;
    int free_now;
    NodeId node;
    BlockId block;
  };
  std::vector<Ready> ready_buffer;
  std::vector<std::pair<Time, int>> release_buffer;
  // The Selector's working state (see there), reused by every walk.
  struct WalkState {
    std::vector<RankSet> active;
    std::vector<RankKey> key, own_key;
    std::vector<char> in_parent;
    std::vector<Queue::const_iterator> it;
    std::vector<std::uint32_t> ahead;
  };
  WalkState walk;
  // may_take's memo: per victim budget, for the requester of the current search.
  std::uint64_t taker_stamp = 0;
  std::vector<std::uint64_t> taker_memo_at;
  std::vector<char> taker_memo;
  void new_requester() { ++taker_stamp; }

  // A fresh pass over cluster c. Buffers keep their capacity; every field that carries state from
  // one pass to the next is set here (the rest are cleared where they are used, or, like the
  // taker memo, are keyed so that old entries never match).
  void reset(ClusterId c, Time t) {
    cluster = c;
    now = t;
    previous.clear();
    passed.clear();
    made.clear();
    memo.clear();
    preemption_failed.clear();
    exposed.clear();
    exposed_nodes.clear();
    made_funded.clear();
    made_free.clear();
    made_free_at = ~std::uint64_t{0};
    mask_version = 0;
    preemption_considered = 0;
    claims_considered = 0;
    claimable = 0;
    usable_free_key = {~0ull, 0, 0};
    usable_free = 0;
    backfill_free_key = {~0ull, 0, 0};
    backfill_free = 0;
    head_blocked = false;
    largest_waiting_per_node = 0;
    allowance_by_owner.clear();
    // projected, rank_extra, debug_gpus, allocation: assigned by compute_projected; mask and
    // reserved_by: assigned by schedule_cluster.
  }
};

// Standing s(b) on the pass's projected usage (docs/policy.md §5). Defined here, inline, because
// the fair-share walk computes it for every key it sorts.
inline double Scheduler::standing_of(const ClusterScratch& s, BudgetId b,
                                     MilliGpuSeconds extra) const {
  const double a = s.allocation[b];
  const double p = static_cast<double>(s.projected[b] + extra);
  if (a <= 0.0) return kInf;  // no allocation: never within it, ranked last
  return p / a;
}

}  // namespace allot::core
