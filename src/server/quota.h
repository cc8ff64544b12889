// Per-principal limits on job submission (docs/security.md, "The API's edge"): a sustained rate
// with a burst (a token bucket per principal), and a number of jobs waiting (pending or
// requeued) per owner. Over either: 429 with Retry-After. Administrators are not limited.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace allot::server {

struct SubmitLimits {
  double rate = 100;                 // submissions a second per principal, sustained (0: no limit)
  double burst = 1000;               // submissions at once, after a quiet spell
  std::int64_t max_waiting = 10000;  // waiting jobs per owner (0: no limit)
  // Waiting jobs per owner over all budgets, whatever a budget's own max_waiting (0: no limit).
  // Server-wide only: a budget's limits do not set it.
  std::int64_t max_waiting_total = 50000;
};

// `base` with the fields an administrator set in `own` in their place: a budget's or a user's
// limits as stored (JSON with any of rate, burst and max_waiting; "" or unreadable: none). A
// user's own limits replace the server-wide ones for that user (their max_waiting is then also
// their cap over all budgets, in place of max_waiting_total: `user` true); a budget's apply to
// submissions to it and below, before a user's (docs/security.md, "The API's edge").
SubmitLimits overlay_limits(SubmitLimits base, const std::string& own, bool user = false);

// Who may submit now: a token bucket and a count of waiting jobs per principal. Thread-safe
// (one mutex).
class SubmitQuota {
 public:
  using Clock = std::chrono::steady_clock;
  explicit SubmitQuota(SubmitLimits limits) : limits_(limits) {}

  const SubmitLimits& limits() const { return limits_; }

  // Takes one submission of `who` at `now`: 0 if it may go ahead, else the whole seconds until
  // it may (for Retry-After; at least 1). `limits`: a budget's own (its bucket keyed apart by
  // the caller), else the server-wide ones.
  int take(const std::string& who, Clock::time_point now) { return take(who, now, limits_); }
  int take(const std::string& who, Clock::time_point now, const SubmitLimits& limits);

  // Whether `owner` may have one more job waiting, given `waiting` of theirs in the scheduler's
  // snapshot number `snapshot`; counts it if so. The jobs accepted since that snapshot are added
  // (they are in the next one), so the count is behind by at most what is accepted while a
  // snapshot is being made.
  bool add_waiting(const std::string& owner, std::uint64_t snapshot, std::int64_t waiting) {
    return add_waiting(owner, snapshot, waiting, limits_.max_waiting);
  }
  bool add_waiting(const std::string& owner, std::uint64_t snapshot, std::int64_t waiting,
                   std::int64_t max_waiting);
  // Takes back one job counted by add_waiting for `owner` in `snapshot` (refused after all).
  void take_back_waiting(const std::string& owner, std::uint64_t snapshot);

 private:
  struct Bucket {
    double tokens;
    Clock::time_point at;
  };
  struct Added {
    std::uint64_t snapshot;
    std::int64_t n;
  };
  const SubmitLimits limits_;

  std::mutex mu_;
  // Guarded by mu_.
  std::unordered_map<std::string, Bucket> buckets_;  // principals with a valid token: bounded
  std::unordered_map<std::string, Added> added_;
};

}  // namespace allot::server
