#include "server/request_limits.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace allot::server {

int RequestLimiter::take(const std::string& key, double cost, double rate, double burst,
                         Clock::time_point now) {
  if (rate <= 0) return 0;
  burst = std::max(1.0, burst);
  cost = std::clamp(cost, 0.0, burst);
  std::lock_guard lk(mu_);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_tracked_) make_room(now);
    it = buckets_.emplace(key, Bucket{burst, rate, burst, now}).first;
  }
  Bucket& b = it->second;
  const double elapsed = std::max(0.0, std::chrono::duration<double>(now - b.at).count());
  b.tokens = std::min(burst, b.tokens + elapsed * rate);
  b.rate = rate;
  b.burst = burst;
  b.at = std::max(b.at, now);
  if (b.tokens >= cost) {
    b.tokens -= cost;
    return 0;
  }
  return std::max(1, static_cast<int>(std::ceil((cost - b.tokens) / rate)));
}

void RequestLimiter::make_room(Clock::time_point now) {
  // A bucket that has refilled is the same as none: forgetting it changes no answer.
  std::erase_if(buckets_, [now](const auto& kv) {
    const Bucket& b = kv.second;
    const double elapsed = std::chrono::duration<double>(now - b.at).count();
    return b.tokens + elapsed * b.rate >= b.burst;
  });
  if (buckets_.size() < max_tracked_) return;
  // All busy (many keys at once): the least recently used half goes, so that this scan happens
  // at most once per max_tracked / 2 new keys.
  std::vector<Clock::time_point> ats;
  ats.reserve(buckets_.size());
  for (const auto& [k, b] : buckets_) ats.push_back(b.at);
  auto mid = ats.begin() + static_cast<std::ptrdiff_t>(ats.size() / 2);
  std::nth_element(ats.begin(), mid, ats.end());
  const Clock::time_point cut = *mid;
  std::erase_if(buckets_, [cut](const auto& kv) { return kv.second.at <= cut; });
}

}  // namespace allot::server
