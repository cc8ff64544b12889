// A scoped what-if on the GPU pool (docs/policy.md §8, "The choice is then checked"): GPUs handed
// back through the trial are taken again, and the pool's generation counter restored, when the
// trial goes out of scope, unless keep() was called; then the pool stays as the trial left it.
// Restoring the generation keeps cached failed searches valid: after an undone trial the pool is
// exactly as before, so a search that failed before fails again. Internal to src/core.
//
// Thread-safety: none; it edits the pool it was given, which must outlive it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/gpu_pool.h"

namespace allot::core {

class PoolTrial {
 public:
  explicit PoolTrial(GpuPool& pool) : pool_(pool), generation_(pool.generation()) {}
  PoolTrial(const PoolTrial&) = delete;
  PoolTrial& operator=(const PoolTrial&) = delete;
  ~PoolTrial() {
    if (kept_) return;
    for (const Placement* p : released_) pool_.take(*p);
    pool_.restore_generation(generation_);
  }

  // Hands `p` back to the pool for the trial. `p` must outlive the trial (it is taken again from
  // it), and must not be handed back twice.
  void release(const Placement& p) {
    pool_.release(p);
    released_.push_back(&p);
  }
  // The trial's changes stand: nothing is taken back on scope exit.
  void keep() { kept_ = true; }

 private:
  GpuPool& pool_;
  std::uint64_t generation_;
  std::vector<const Placement*> released_;
  bool kept_ = false;
};

}  // namespace allot::core
