// Indexes of a pending queue's keys by request size, so that a walk passing over jobs that can do
// nothing can jump to the next one that may act instead of stepping through the backlog. Speed
// only: the walk's decisions are those of the step-by-step walk (walk_pruning.cpp; the property
// tests' lazy twin compares them). Internal to src/core.
//
// Thread-safety: none; owned by the Scheduler, beside the queue they index.
#pragma once

#include <map>
#include <optional>
#include <set>

#include "core/job.h"
#include "core/types.h"

namespace allot::core {

// Keys grouped by a size (GPUs per node, milli of one GPU, milli in all).
template <class Key>
class SizeIndex {
 public:
  void add(Milli size, const Key& key) { groups_[size].insert(key); }

  void remove(Milli size, const Key& key) {
    const auto it = groups_.find(size);
    if (it == groups_.end()) return;
    it->second.erase(key);
    if (it->second.empty()) groups_.erase(it);
  }

  // Lowers *best to the first key after `after` whose size passes `fits`, a test monotone in the
  // size: once it fails, it fails for every larger size.
  template <class Fits>
  void first_after(const Key& after, Fits fits, std::optional<Key>* best) const {
    for (const auto& [size, keys] : groups_) {
      if (!fits(size)) break;
      const auto it = keys.upper_bound(after);
      if (it != keys.end() && (!*best || *it < **best)) *best = *it;
    }
  }

 private:
  std::map<Milli, std::set<Key>> groups_;
};

// Keys by what one node must give each job: whole GPUs on one node, or the milli of one GPU a
// fraction asks for.
template <class Key>
class FitIndex {
 public:
  void add(const Shape& shape, const Key& key) {
    shape.fractional() ? fraction_.add(shape.gpu_milli, key) : whole_.add(shape.gpus_per_node, key);
  }
  void remove(const Shape& shape, const Key& key) {
    shape.fractional() ? fraction_.remove(shape.gpu_milli, key)
                       : whole_.remove(shape.gpus_per_node, key);
  }

  // Lowers *best to the first key after `after` among jobs that need at most `whole` free GPUs on
  // one node (whole-GPU requests) or at most `milli` free on one GPU (fractions).
  void first_fitting(const Key& after, int whole, Milli milli, std::optional<Key>* best) const {
    whole_.first_after(
        after, [&](Milli size) { return size <= whole; }, best);
    fraction_.first_after(
        after, [&](Milli size) { return size <= milli; }, best);
  }

 private:
  SizeIndex<Key> whole_;     // by GPUs per node
  SizeIndex<Key> fraction_;  // by milli of one GPU
};

}  // namespace allot::core
