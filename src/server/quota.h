// Per-principal limits on job submission (docs/security.md, "The API's edge"): a sustained rate
// with a burst (a token bucket per principal), and a number of jobs waiting (pending or
// requeued) per owner. Over either: 429 with Retry-After. Administrators are not limited.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

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

  // One count of waiting jobs under its cap: an owner's ("OWNER") or an owner's within a budget
  // ("OWNER /path"), as the scheduler's snapshot counts them.
  struct WaitingCap {
    std::string key;
    std::int64_t waiting = 0;  // the key's jobs waiting in the snapshot
    std::int64_t most = 0;     // its cap (> 0)
  };
  static constexpr int kReserved = -1;
  static constexpr int kStale = -2;
  // Reserves `n` more waiting jobs under every cap in `caps` (all or none), counting on top of
  // the snapshot's counts what was reserved and not yet handed to the scheduler, and what was
  // handed to it after the snapshot's first `taken` submissions (Snapshot::submits_taken), so
  // that the count is exact however far behind the snapshot is. kReserved; else the index of
  // the cap it would pass; or kStale when a newer snapshot was seen already (read the snapshot
  // again and ask again).
  int reserve_waiting(const std::vector<WaitingCap>& caps, std::int64_t n, std::uint64_t taken);
  // Jobs reserved under `keys` that were refused after all: given back.
  void release_waiting(const std::vector<std::string>& keys, std::int64_t n);
  // Jobs reserved under `keys` handed to the scheduler, the last of them as submission number
  // `seq` (Controller::submitted()): counted until a snapshot has taken it in.
  void handed_over(const std::vector<std::string>& keys, std::int64_t n, std::uint64_t seq);

 private:
  struct Bucket {
    double tokens;
    Clock::time_point at;
  };
  struct Waiting {
    std::int64_t reserved = 0;
    std::map<std::uint64_t, std::int64_t> handed;  // submission number -> jobs
    std::int64_t handed_jobs = 0;                  // the sum of `handed`
  };
  // Forgets what snapshots have taken in; true if nothing of the key is left to count.
  bool prune(Waiting& w) const;
  const SubmitLimits limits_;

  std::mutex mu_;
  // Guarded by mu_.
  std::unordered_map<std::string, Bucket> buckets_;  // principals with a valid token: bounded
  std::unordered_map<std::string, Waiting> waiting_;
  std::uint64_t taken_ = 0;  // the newest snapshot's submits_taken seen
};

// Jobs reserved under a quota's caps (SubmitQuota::reserve_waiting): given back when the hold
// goes unless they were handed over first.
class WaitingHold {
 public:
  WaitingHold(SubmitQuota& quota, std::vector<std::string> keys, std::int64_t n)
      : quota_(quota), keys_(std::move(keys)), n_(n) {}
  ~WaitingHold() {
    if (!handed_) quota_.release_waiting(keys_, n_);
  }
  WaitingHold(const WaitingHold&) = delete;
  WaitingHold& operator=(const WaitingHold&) = delete;
  // Written and handed to the scheduler, the last as submission number `seq`.
  void handed_over(std::uint64_t seq) {
    handed_ = true;
    quota_.handed_over(keys_, n_, seq);
  }

 private:
  SubmitQuota& quota_;
  const std::vector<std::string> keys_;
  const std::int64_t n_;
  bool handed_ = false;
};

}  // namespace allot::server
