// The leader lease of the servers that share one PostgreSQL database (docs/design/0009): one row,
// leader_lease (epoch, holder, address, expires_at). A server takes it when it is free or has
// expired, which adds one to the epoch; the holder renews it about every second; a standby that
// finds it expired (no renewal for `expiry`, on PostgreSQL's clock) takes it with the next epoch.
// The store of the leader is opened with its epoch (PostgresOptions::fence_epoch): each of its
// transactions locks the row and checks that the epoch is still its own, so a deposed leader's
// late writes are refused (fencing).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"

namespace allot::store {

class PgConn;

struct LeaseOptions {
  std::string holder;   // who takes it, for people: "host:pid"
  std::string address;  // the URL clients reach this server at, told by standbys; one per server
  std::chrono::milliseconds expiry{5000};
};

struct LeaseState {
  std::int64_t epoch = 0;  // 0: never taken
  std::string holder, address;
  bool expired = true;
};

// One connection of its own (not the store's). Not thread-safe: one thread uses it.
class LeaderLease {
 public:
  // Connects and makes the lease table if it is missing (under the schema's advisory lock).
  static core::Result<std::unique_ptr<LeaderLease>> open(const std::string& uri, LeaseOptions o);
  ~LeaderLease();
  LeaderLease(const LeaderLease&) = delete;
  LeaderLease& operator=(const LeaderLease&) = delete;

  // Takes the lease if it is free, expired or held at this server's address (a restart, once the
  // caller has bound that address): the new epoch; nullopt if another holds it.
  core::Result<std::optional<std::int64_t>> try_take();
  // Extends the lease taken; false if another server has taken it since (this one is deposed).
  core::Result<bool> renew();
  // Who holds it now.
  core::Result<LeaseState> current();
  // Lets it expire now (a clean stop), so that a standby takes over without waiting.
  void release();
  std::int64_t epoch() const { return epoch_; }
  const LeaseOptions& options() const { return opts_; }

 private:
  LeaderLease(std::unique_ptr<PgConn> c, LeaseOptions o);
  core::Status reconnect_if_lost();

  std::unique_ptr<PgConn> conn_;
  LeaseOptions opts_;
  std::int64_t epoch_ = 0;
};

}  // namespace allot::store
