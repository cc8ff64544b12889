#include "server/quota.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

namespace allot::server {

SubmitLimits overlay_limits(SubmitLimits base, const std::string& own, bool user) {
  if (own.empty()) return base;
  const auto j = nlohmann::json::parse(own, nullptr, false);
  if (!j.is_object()) return base;
  auto number = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_number() ? std::optional<double>(it->get<double>())
                                            : std::nullopt;
  };
  if (auto v = number("rate")) base.rate = *v;
  if (auto v = number("burst")) base.burst = *v;
  if (auto v = number("max_waiting")) {
    base.max_waiting = static_cast<std::int64_t>(*v);
    if (user) base.max_waiting_total = base.max_waiting;
  }
  return base;
}

int SubmitQuota::take(const std::string& who, Clock::time_point now, const SubmitLimits& limits) {
  if (limits.rate <= 0) return 0;
  std::lock_guard lk(mu_);
  auto [it, fresh] = buckets_.try_emplace(who, Bucket{limits.burst, now});
  Bucket& b = it->second;
  if (!fresh) {
    const double elapsed = std::chrono::duration<double>(now - b.at).count();
    b.tokens = std::min(limits.burst, b.tokens + std::max(0.0, elapsed) * limits.rate);
    b.at = now;
  }
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return 0;
  }
  return std::max(1, static_cast<int>(std::ceil((1 - b.tokens) / limits.rate)));
}

bool SubmitQuota::prune(Waiting& w) const {
  while (!w.handed.empty() && w.handed.begin()->first <= taken_) {
    w.handed_jobs -= w.handed.begin()->second;
    w.handed.erase(w.handed.begin());
  }
  return w.reserved == 0 && w.handed.empty();
}

int SubmitQuota::reserve_waiting(const std::vector<WaitingCap>& caps, std::int64_t n,
                                 std::uint64_t taken) {
  std::lock_guard lk(mu_);
  if (taken < taken_) return kStale;  // what it counts may be pruned already
  taken_ = taken;
  for (std::size_t i = 0; i < caps.size(); ++i) {
    std::int64_t more = 0;
    if (auto it = waiting_.find(caps[i].key); it != waiting_.end()) {
      if (prune(it->second)) {
        waiting_.erase(it);
      } else {
        more = it->second.reserved + it->second.handed_jobs;
      }
    }
    if (caps[i].waiting + more + n > caps[i].most) return static_cast<int>(i);
  }
  for (const auto& c : caps) waiting_[c.key].reserved += n;
  return kReserved;
}

void SubmitQuota::release_waiting(const std::vector<std::string>& keys, std::int64_t n) {
  std::lock_guard lk(mu_);
  for (const auto& k : keys) {
    auto it = waiting_.find(k);
    if (it == waiting_.end()) continue;
    it->second.reserved = std::max<std::int64_t>(0, it->second.reserved - n);
    if (prune(it->second)) waiting_.erase(it);
  }
}

void SubmitQuota::handed_over(const std::vector<std::string>& keys, std::int64_t n,
                              std::uint64_t seq) {
  std::lock_guard lk(mu_);
  for (const auto& k : keys) {
    auto it = waiting_.find(k);
    if (it == waiting_.end()) continue;
    auto& w = it->second;
    w.reserved = std::max<std::int64_t>(0, w.reserved - n);
    if (seq > taken_) {  // else a snapshot has it already
      w.handed[seq] += n;
      w.handed_jobs += n;
    }
    if (prune(w)) waiting_.erase(it);
  }
}

}  // namespace allot::server
