// FitIndex: the keys of one pending queue grouped by what one node must give each job (whole GPUs
// per node, or the milli of one GPU a fraction asks for), so that a walk passing over jobs that
// fit nowhere can jump to the next one that may fit instead of stepping through the backlog.
// Speed only: the walk's decisions are those of the step-by-step walk (walk_pruning.cpp, the
// property tests' lazy twin). Internal to src/core.
//
// Thread-safety: none; owned by the Scheduler, beside the queue it indexes.
#pragma once

#include <map>
#include <optional>
#include <set>

#include "core/job.h"
#include "core/types.h"

namespace allot::core {

template <class Key>
class FitIndex {
 public:
  void add(const Shape& shape, const Key& key) { group(shape)[size_of(shape)].insert(key); }

  void remove(const Shape& shape, const Key& key) {
    auto& g = group(shape);
    const auto it = g.find(size_of(shape));
    if (it == g.end()) return;
    it->second.erase(key);
    if (it->second.empty()) g.erase(it);
  }

  // The first key after `after` among jobs that need at most `whole` free GPUs on one node
  // (whole-GPU requests) or at most `milli` free on one GPU (fractions); none when no such job.
  std::optional<Key> next_fitting(const Key& after, int whole, Milli milli) const {
    std::optional<Key> best;
    auto scan = [&](const auto& groups, auto limit) {
      for (const auto& [size, keys] : groups) {
        if (size > limit) break;
        const auto it = keys.upper_bound(after);
        if (it != keys.end() && (!best || *it < *best)) best = *it;
      }
    };
    scan(whole_, static_cast<Milli>(whole));
    scan(fraction_, milli);
    return best;
  }

 private:
  static Milli size_of(const Shape& shape) {
    return shape.fractional() ? shape.gpu_milli : static_cast<Milli>(shape.gpus_per_node);
  }
  std::map<Milli, std::set<Key>>& group(const Shape& shape) {
    return shape.fractional() ? fraction_ : whole_;
  }

  std::map<Milli, std::set<Key>> whole_;     // by GPUs per node
  std::map<Milli, std::set<Key>> fraction_;  // by milli of one GPU
};

}  // namespace allot::core
