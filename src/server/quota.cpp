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

bool SubmitQuota::add_waiting(const std::string& owner, std::uint64_t snapshot,
                              std::int64_t waiting, std::int64_t max_waiting) {
  if (max_waiting <= 0) return true;
  std::lock_guard lk(mu_);
  auto& a = added_[owner];
  if (a.snapshot != snapshot) a = {snapshot, 0};  // the snapshot counts what came before it
  if (waiting + a.n >= max_waiting) return false;
  ++a.n;
  return true;
}

void SubmitQuota::take_back_waiting(const std::string& owner, std::uint64_t snapshot) {
  std::lock_guard lk(mu_);
  auto it = added_.find(owner);
  if (it != added_.end() && it->second.snapshot == snapshot && it->second.n > 0) --it->second.n;
}

}  // namespace allot::server
