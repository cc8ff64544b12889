#include "core/usage_window.h"

#include <algorithm>
#include <cmath>

namespace allot::core {

UsageWindow::UsageWindow(Duration lookback, Duration bucket, Duration half_life)
    : bucket_(std::max<Duration>(1, bucket)), half_life_(std::max<Duration>(0, half_life)) {
  if (half_life_ > 0) {
    decay_per_bucket_ = std::exp2(-static_cast<double>(bucket_) / static_cast<double>(half_life_));
    return;  // decayed usage needs no ring of buckets
  }
  const Duration n = std::max<Duration>(1, (lookback + bucket_ - 1) / bucket_);
  slots_.resize(static_cast<std::size_t>(n));
}

Duration UsageWindow::window_seconds() const {
  if (half_life_ > 0) {
    return static_cast<Duration>(static_cast<double>(half_life_) / std::log(2.0));
  }
  return bucket_ * static_cast<Duration>(slots_.size());
}

void UsageWindow::ensure_nodes(std::size_t n) {
  if (totals_.size() >= n) return;
  totals_.resize(n, 0);
  for (auto& s : slots_) s.resize(n, 0);
}

void UsageWindow::advance(Time t) {
  if (t <= now_) return;
  const std::int64_t target = t / bucket_;
  if (half_life_ > 0) {
    if (target > current_bucket_) {
      const double f = std::pow(decay_per_bucket_, static_cast<double>(target - current_bucket_));
      for (auto& total : totals_) {
        total = static_cast<MilliGpuSeconds>(std::llround(static_cast<double>(total) * f));
      }
    }
    current_bucket_ = target;
    now_ = t;
    return;
  }
  const std::int64_t n = static_cast<std::int64_t>(slots_.size());
  // Expire the buckets that leave the window: at most one full turn of the ring.
  for (std::int64_t b = current_bucket_ + 1, steps = 0; b <= target && steps < n; ++b, ++steps) {
    auto& slot = slots_[static_cast<std::size_t>(b % n)];
    for (std::size_t i = 0; i < slot.size(); ++i) {
      totals_[i] -= slot[i];
      slot[i] = 0;
    }
  }
  current_bucket_ = target;
  now_ = t;
}

void UsageWindow::add(BudgetId node, Time from, Time to, Milli rate) {
  from = std::max<Time>(from, 0);  // time starts at 0
  if (rate == 0 || to <= from) return;
  ensure_nodes(static_cast<std::size_t>(node) + 1);
  if (half_life_ > 0) {
    to = std::min(to, now_);
    for (std::int64_t b = from / bucket_; b <= current_bucket_; ++b) {
      const Time lo = std::max(from, b * bucket_);
      const Time hi = std::min(to, (b + 1) * bucket_);
      if (hi <= lo) {
        if (b * bucket_ >= to) break;
        continue;
      }
      const double age = static_cast<double>(current_bucket_ - b);
      totals_[node] += static_cast<MilliGpuSeconds>(
          std::llround(static_cast<double>(rate * (hi - lo)) * std::pow(decay_per_bucket_, age)));
    }
    return;
  }
  const std::int64_t n = static_cast<std::int64_t>(slots_.size());
  const std::int64_t first_live = current_bucket_ - n + 1;
  to = std::min(to, now_);
  std::int64_t b = std::max(from / bucket_, first_live);
  for (; b <= current_bucket_; ++b) {
    const Time lo = std::max(from, b * bucket_);
    const Time hi = std::min(to, (b + 1) * bucket_);
    if (hi <= lo) {
      if (b * bucket_ >= to) break;
      continue;
    }
    const MilliGpuSeconds amount = rate * (hi - lo);
    slots_[static_cast<std::size_t>(b % n)][node] += amount;
    totals_[node] += amount;
  }
}

}  // namespace allot::core
