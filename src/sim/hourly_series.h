// A quantity that is constant between events (a rate, in milli-GPUs) integrated over time into
// fixed buckets (an hour by default), in exact integer milli-GPU-seconds.
#pragma once

#include <algorithm>
#include <vector>

#include "core/types.h"

namespace allot::sim {

class BucketSeries {
 public:
  BucketSeries() = default;
  BucketSeries(core::Time origin, core::Duration bucket)
      : origin_(origin), bucket_(bucket), last_(origin) {}

  // The rate changes to `rate` at time t (t never goes back).
  void set(core::Time t, core::Milli rate) {
    flush(t);
    rate_ = rate;
  }
  void add(core::Time t, core::Milli delta) { set(t, rate_ + delta); }
  core::Milli rate() const { return rate_; }

  // Integrates the current rate up to t.
  void flush(core::Time t) {
    if (t <= last_) return;
    if (rate_ == 0) {
      last_ = t;
      return;
    }
    while (last_ < t) {
      const std::size_t b = static_cast<std::size_t>((last_ - origin_) / bucket_);
      const core::Time end = std::min(t, origin_ + static_cast<core::Time>(b + 1) * bucket_);
      if (values_.size() <= b) values_.resize(b + 1, 0);
      const core::MilliGpuSeconds v = rate_ * (end - last_);
      values_[b] += v;
      total_ += v;
      last_ = end;
    }
  }
  // Bucket values; buckets past the end of the data read as 0.
  core::MilliGpuSeconds at(std::size_t b) const { return b < values_.size() ? values_[b] : 0; }
  core::MilliGpuSeconds total() const { return total_; }
  std::size_t size() const { return values_.size(); }

 private:
  core::Time origin_ = 0;
  core::Duration bucket_ = core::kHour;
  core::Time last_ = 0;
  core::Milli rate_ = 0;
  std::vector<core::MilliGpuSeconds> values_;
  core::MilliGpuSeconds total_ = 0;
};

}  // namespace allot::sim
