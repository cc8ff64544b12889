// Per-principal and per-address limits on API requests of every route (docs/security.md, "The
// API's edge"): a token bucket per key, each request taking its cost (1, more for expensive
// reads). Over: 429 with Retry-After. The table of buckets is bounded: when full, the buckets
// that have refilled are dropped, then the least recently used half.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>

namespace allot::server {

struct RequestLimits {
  double rate = 200;                 // requests a second per principal, sustained (0: no limit)
  double burst = 2000;               // requests at once, after a quiet spell
  double unauthenticated_rate = 20;  // requests a second per address without a valid token
  double unauthenticated_burst = 200;
  double expensive_cost = 10;        // what one /usage, /report or /advice request takes
  std::size_t max_tracked = 100000;  // buckets kept at most (principals and addresses)
};

// Token buckets by key. Thread-safe (one mutex).
class RequestLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // Takes `cost` from the bucket of `key` (rate per second, at most `burst`) at `now`: 0 if the
  // request may go ahead, else the whole seconds until it may (for Retry-After; at least 1). A
  // cost above the burst is taken as the burst (such a request waits for a full bucket).
  int take(const std::string& key, double cost, double rate, double burst, Clock::time_point now);

  explicit RequestLimiter(std::size_t max_tracked)
      : max_tracked_(max_tracked < 2 ? 2 : max_tracked) {}
  std::size_t tracked() const {
    std::lock_guard lk(mu_);
    return buckets_.size();
  }

 private:
  struct Bucket {
    double tokens;
    double rate, burst;
    Clock::time_point at;
  };
  void make_room(Clock::time_point now);  // holds mu_

  const std::size_t max_tracked_;
  mutable std::mutex mu_;
  // Guarded by mu_.
  std::unordered_map<std::string, Bucket> buckets_;
};

}  // namespace allot::server
