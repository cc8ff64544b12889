#include "store/postgres_lease.h"

#include "store/postgres_conn.h"

namespace allot::store {

using core::Error;
using core::Result;
using core::Status;

namespace {
// The schema's migration lock (postgres_store.cpp): the table is made once however many start.
constexpr const char* kMakeTable =
    "BEGIN; SELECT pg_advisory_xact_lock(418430873460); "
    "CREATE TABLE IF NOT EXISTS leader_lease (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "epoch BIGINT NOT NULL, holder TEXT NOT NULL, address TEXT NOT NULL, "
    "expires_at TIMESTAMPTZ NOT NULL); "
    "INSERT INTO leader_lease VALUES (1, 0, '', '', '-infinity') ON CONFLICT DO NOTHING; COMMIT";
// The lease's session: never wait long behind the writer's lock on the row, nor on a statement.
constexpr const char* kSession = "SET lock_timeout = '2s'; SET statement_timeout = '3s'";

double seconds(std::chrono::milliseconds d) {
  return static_cast<double>(d.count()) / 1000.0;
}
}  // namespace

LeaderLease::LeaderLease(std::unique_ptr<PgConn> c, LeaseOptions o)
    : conn_(std::move(c)), opts_(std::move(o)) {}
LeaderLease::~LeaderLease() = default;

Result<std::unique_ptr<LeaderLease>> LeaderLease::open(const std::string& uri, LeaseOptions o) {
  if (o.expiry < std::chrono::milliseconds(1000)) return Error{"lease", "expiry under 1 s"};
  auto c = std::make_unique<PgConn>(uri);
  if (auto s = c->connect(); !s.ok()) return s.error();
  if (auto r = c->run(kMakeTable); !r.ok()) {
    c->run("ROLLBACK");
    return Error{"store", "leader_lease: " + r.error()};
  }
  if (auto r = c->run(kSession); !r.ok()) return Error{"store", r.error()};
  return std::unique_ptr<LeaderLease>(new LeaderLease(std::move(c), std::move(o)));
}

Status LeaderLease::reconnect_if_lost() {
  if (conn_->healthy()) return core::ok_status();
  if (auto s = conn_->connect(); !s.ok()) return s;
  if (auto r = conn_->run(kSession); !r.ok()) return Error{"store", r.error()};
  return core::ok_status();
}

Result<std::optional<std::int64_t>> LeaderLease::try_take() {
  if (auto s = reconnect_if_lost(); !s.ok()) return s.error();
  // PostgreSQL's clock alone decides expiry: the servers' clocks may differ. A lease held at this
  // server's own address is taken back at once: the server restarted, since the one before it
  // no longer listens there (this one could bind the address).
  auto r = conn_->exec(
      "UPDATE leader_lease SET epoch = epoch + 1, holder = $1, address = $2, "
      "expires_at = clock_timestamp() + make_interval(secs => $3) "
      "WHERE id = 1 AND (expires_at < clock_timestamp() OR address = $2) RETURNING epoch",
      PgParams().all(opts_.holder, opts_.address, seconds(opts_.expiry)));
  if (!r.ok()) return Error{"store", "leader_lease: " + r.error()};
  if (r.rows() == 0) return std::optional<std::int64_t>();
  epoch_ = r.integer(0, 0);
  return std::optional<std::int64_t>(epoch_);
}

Result<bool> LeaderLease::renew() {
  if (epoch_ == 0) return Error{"lease", "not taken"};
  if (auto s = reconnect_if_lost(); !s.ok()) return s.error();
  auto r = conn_->exec(
      "UPDATE leader_lease SET expires_at = clock_timestamp() + make_interval(secs => $2) "
      "WHERE id = 1 AND epoch = $1 RETURNING epoch",
      PgParams().all(epoch_, seconds(opts_.expiry)));
  if (!r.ok()) return Error{"store", "leader_lease: " + r.error()};
  return r.rows() == 1;
}

Result<LeaseState> LeaderLease::current() {
  if (auto s = reconnect_if_lost(); !s.ok()) return s.error();
  auto r = conn_->run(
      "SELECT epoch, holder, address, (expires_at < clock_timestamp())::INT FROM leader_lease "
      "WHERE id = 1");
  if (!r.ok()) return Error{"store", "leader_lease: " + r.error()};
  if (r.rows() == 0) return LeaseState{};
  return LeaseState{r.integer(0, 0), r.text(0, 1), r.text(0, 2), r.integer(0, 3) != 0};
}

void LeaderLease::release() {
  if (epoch_ == 0 || !reconnect_if_lost().ok()) return;
  conn_->exec("UPDATE leader_lease SET expires_at = '-infinity' WHERE id = 1 AND epoch = $1",
              PgParams().add(epoch_));
}

}  // namespace allot::store
