// Usage over a sliding lookback window, kept incrementally in time buckets: charging and reading
// cost the same however long the history is. One window holds every budget node of one cluster.
//
// Thread-safety: none; owned by one Scheduler and used by one thread at a time, like all of
// src/core (which has no threads, I/O or clock).
#pragma once

#include <vector>

#include "core/types.h"

namespace allot::core {

class UsageWindow {
 public:
  // `lookback` is rounded up to a whole number of buckets. With `half_life` > 0 the window does
  // not slide: usage decays by half every half_life instead (at bucket boundaries), and
  // window_seconds() is the mean age of a decayed charge, half_life / ln 2.
  UsageWindow(Duration lookback, Duration bucket, Duration half_life = 0);

  // Moves the window's end to `t` (monotone; earlier times are ignored), expiring old buckets.
  void advance(Time t);
  // Charges `rate` milli-GPUs to `node` over [from, to). Parts outside the window are dropped;
  // parts after the window's end are clamped to it (call advance first).
  void add(BudgetId node, Time from, Time to, Milli rate);
  // Usage of `node` inside the window, in milli-GPU-seconds.
  MilliGpuSeconds total(BudgetId node) const { return node < totals_.size() ? totals_[node] : 0; }
  void ensure_nodes(std::size_t n);
  Duration window_seconds() const;
  Duration bucket_seconds() const { return bucket_; }
  Time now() const { return now_; }
  // The next time at which a bucket expires (usage can drop then without any event).
  Time next_expiry() const { return (now_ / bucket_ + 1) * bucket_; }

 private:
  Duration bucket_;
  Duration half_life_ = 0;
  double decay_per_bucket_ = 1.0;
  std::vector<std::vector<MilliGpuSeconds>> slots_;  // [bucket slot][node]
  std::vector<MilliGpuSeconds> totals_;
  Time now_ = 0;
  std::int64_t current_bucket_ = 0;  // bucket index of now_
};

}  // namespace allot::core
