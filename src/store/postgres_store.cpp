#include "store/postgres_store.h"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>

#include "store/job_columns.h"
#include "store/postgres_conn.h"
#include "store/postgres_ops.h"
#include "store/postgres_schema.h"

namespace allot::store {
namespace {

using core::Error;
using core::Result;
using core::Status;

// How the reason of a write refused by the lease's fence begins (is_fenced()).
constexpr std::string_view kFenced = "fenced: ";
// Any fixed number: every allot server on one database takes this lock to migrate its schema.
constexpr std::int64_t kMigrationLock = 0x616c6c6f74;  // "allot"
// Between tries to reach PostgreSQL again.
constexpr auto kRetryPause = std::chrono::milliseconds(200);

// A read that PostgreSQL refused (not a lost connection).
struct QueryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int latest_version() {
  return static_cast<int>(kPostgresMigrations.size());
}

std::string like_prefix(const std::string& path) {
  std::string out;
  for (char ch : path) {
    if (ch == '%' || ch == '_' || ch == '\\') out += '\\';
    out += ch;
  }
  if (out.empty() || out.back() != '/') out += '/';
  return out + "%";
}

const std::string kTelemetryCols =
    "job_id, run, budget, samples, seconds, gpu_seconds, used_gpu_seconds, util_sum, util_peak, "
    "mem_peak_mib, mem_total_mib, cpu_sum, io_sum, first_time, last_time, idle_seconds, "
    "starved_seconds";
const std::string kTokenCols = "id, hash, name, role, subject, scope, created, revoked";
const std::string kLedgerSelect =
    "SELECT id, job_id, owner, budget, cluster, start, \"end\", milli, allocated FROM ledger ";
const std::string kActive = "('pending','starting','running','preempting','requeued')";

// One row of a result, as job_from_row reads it.
struct PgRow {
  const PgResult& r;
  int row;
  std::int64_t integer(int col) const { return r.integer(row, col); }
  std::string text(int col) const { return r.text(row, col); }
  bool null(int col) const { return r.null(row, col); }
};
JobRecord read_job(const PgResult& r, int i) {
  return job_from_row(PgRow{r, i});
}
LedgerEntry read_ledger(const PgResult& r, int i) {
  return {r.integer(i, 0),     static_cast<JobId>(r.integer(i, 1)),
          r.text(i, 2),        r.text(i, 3),
          r.text(i, 4),        r.integer(i, 5),
          r.integer(i, 6),     r.integer(i, 7),
          r.integer(i, 8) != 0};
}
NodeRecord read_node(const PgResult& r, int i) {
  NodeRecord n;
  n.name = r.text(i, 0);
  n.cluster = r.text(i, 1);
  n.model = r.text(i, 2);
  n.gpus = static_cast<int>(r.integer(i, 3));
  n.block = r.text(i, 4);
  n.labels_json = r.text(i, 5);
  n.health = r.text(i, 6);
  n.health_reason = r.text(i, 7);
  n.cordoned = r.integer(i, 8) != 0;
  n.simulated = r.integer(i, 9) != 0;
  n.registered_at = r.integer(i, 10);
  n.last_heartbeat = r.integer(i, 11);
  n.address = r.text(i, 12);
  n.devices_json = r.text(i, 13);
  n.agent_json = r.text(i, 14);
  n.timed_out = r.integer(i, 15) != 0;
  return n;
}
TelemetryRecord read_telemetry(const PgResult& r, int i) {
  TelemetryRecord t;
  t.job = static_cast<JobId>(r.integer(i, 0));
  t.run = static_cast<int>(r.integer(i, 1));
  t.budget = r.text(i, 2);
  t.samples = r.integer(i, 3);
  t.seconds = r.real(i, 4);
  t.gpu_seconds = r.real(i, 5);
  t.used_gpu_seconds = r.real(i, 6);
  t.util_sum = r.real(i, 7);
  t.util_peak = r.real(i, 8);
  t.mem_peak_mib = r.integer(i, 9);
  t.mem_total_mib = r.integer(i, 10);
  t.cpu_sum = r.real(i, 11);
  t.io_sum = r.real(i, 12);
  t.first_time = r.integer(i, 13);
  t.last_time = r.integer(i, 14);
  t.idle_seconds = r.real(i, 15);
  t.starved_seconds = r.real(i, 16);
  return t;
}
TokenRecord read_token(const PgResult& r, int i) {
  return {r.integer(i, 0), r.text(i, 1), r.text(i, 2),    r.text(i, 3),
          r.text(i, 4),    r.text(i, 5), r.integer(i, 6), r.integer(i, 7)};
}

template <typename Read>
auto all(const PgResult& r, Read read) {
  std::vector<decltype(read(r, 0))> out;
  out.reserve(static_cast<std::size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i) out.push_back(read(r, i));
  return out;
}
template <typename Read>
auto first(const PgResult& r, Read read) {
  return r.rows() > 0 ? std::optional(read(r, 0)) : std::nullopt;
}

class PostgresStore final : public Store {
 public:
  PostgresStore(std::string uri, PostgresOptions opts)
      : uri_(std::move(uri)), opts_(opts), wconn_(uri_) {}
  ~PostgresStore() override {
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (writer_.joinable()) writer_.join();
  }

  Status init() {
    if (opts_.max_readers == 0) return Error{"max_readers", "must be at least 1"};
    if (auto s = wconn_.connect(); !s.ok()) return s;
    if (auto s = durable_session(); !s.ok()) return s;
    if (auto s = migrate(); !s.ok()) return s;
    writer_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "allot-store");
      writer_loop();
    });
    return core::ok_status();
  }

  Status write(WriteBatch batch) override {
    std::promise<Status> done;
    auto fut = done.get_future();
    write_async(std::move(batch), [&done](Status s) { done.set_value(std::move(s)); });
    return fut.get();
  }

  void write_async(WriteBatch batch, std::function<void(Status)> done) override {
    auto p = std::make_unique<Pending>(Pending{std::move(batch), std::move(done)});
    bool wake = false;
    std::unique_ptr<Pending> refused;
    Status why = Error{"store", "closed"};
    {
      std::lock_guard lk(mu_);
      if (stopping_) {
        refused = std::move(p);
      } else if (queue_.size() >= opts_.max_queued_batches) {
        refused = std::move(p);
        why = Error{"store", "too many writes waiting for PostgreSQL (" +
                                 std::to_string(opts_.max_queued_batches) + ")"};
      } else {
        wake = queue_.empty();
        queue_.push_back(std::move(p));
      }
    }
    if (refused) return refused->done(why);
    if (wake) cv_.notify_one();
  }

  std::optional<JobRecord> job(JobId id) const override {
    return first(query("SELECT " + kJobColumns + " FROM jobs WHERE id = $1",
                       PgParams().add(static_cast<std::int64_t>(id))),
                 read_job);
  }

  std::optional<JobRecord> job_by_key(const std::string& owner,
                                      const std::string& key) const override {
    return first(query("SELECT " + kJobColumns + " FROM jobs WHERE owner = $1 AND idem_key = $2",
                       PgParams().all(owner, key)),
                 read_job);
  }

  std::vector<JobRecord> jobs(const JobQuery& q) const override {
    std::string sql = "SELECT " + kJobColumns + " FROM jobs WHERE TRUE";
    PgParams p;
    auto next = [&p] { return "$" + std::to_string(p.size() + 1); };
    if (!q.states.empty()) {
      sql += " AND state IN (";
      for (std::size_t i = 0; i < q.states.size(); ++i) {
        sql += (i ? "," : "") + next();
        p.add(q.states[i]);
      }
      sql += ")";
    }
    if (!q.owner.empty()) {
      sql += " AND owner = " + next();
      p.add(q.owner);
    }
    if (!q.budget.empty() && !q.budget_subtree) {
      sql += " AND budget = " + next();
      p.add(q.budget);
    } else if (!q.budget.empty()) {
      sql += " AND (budget = " + next();
      p.add(q.budget);
      sql += " OR budget LIKE " + next() + " ESCAPE '\\')";
      p.add(like_prefix(q.budget));
    }
    if (!q.budgets_within.empty() || !q.owner_or_within.empty()) {
      sql += " AND (FALSE";
      if (!q.owner_or_within.empty()) {
        sql += " OR owner = " + next();
        p.add(q.owner_or_within);
      }
      for (const auto& b : q.budgets_within) {
        sql += " OR budget = " + next();
        p.add(b);
        sql += " OR budget LIKE " + next() + " ESCAPE '\\'";
        p.add(like_prefix(b));
      }
      sql += ")";
    }
    if (q.after) {
      sql += (q.descending ? " AND id < " : " AND id > ") + next();
      p.add(static_cast<std::int64_t>(q.after));
    }
    sql += q.descending ? " ORDER BY id DESC" : " ORDER BY id ASC";
    sql += " LIMIT " + next();
    p.add(q.limit);
    return all(query(sql, p), read_job);
  }

  std::vector<JobRecord> active_jobs() const override {
    return all(
        query("SELECT " + kJobColumns + " FROM jobs WHERE state IN " + kActive + " ORDER BY id",
              {}),
        read_job);
  }

  std::vector<JobRecord> jobs_overlapping(Time from, Time to) const override {
    return all(query("SELECT " + kJobColumns + " FROM jobs WHERE submit_time < $1 AND (state IN " +
                         kActive + " OR updated_at > $2) ORDER BY id",
                     PgParams().all(to, from)),
               read_job);
  }

  std::vector<JobEvent> job_events(JobId id) const override {
    // The creation event kept in the job's row (migration 5), then the stored ones.
    auto r = query(
        "SELECT submit_time, '', created_state, created_reason, 0 AS k, 0::BIGINT AS ord FROM "
        "jobs WHERE id = $1 AND created_state <> '' UNION ALL SELECT time, from_state, to_state, "
        "reason, 1, ord FROM job_events WHERE job_id = $1 ORDER BY k, ord",
        PgParams().add(static_cast<std::int64_t>(id)));
    return all(r, [id](const PgResult& e, int i) {
      return JobEvent{id, e.integer(i, 0), e.text(i, 1), e.text(i, 2), e.text(i, 3)};
    });
  }

  JobId max_job_id() const override {
    return static_cast<JobId>(query("SELECT COALESCE(MAX(id), 0) FROM jobs", {}).integer(0, 0));
  }

  std::int64_t count_jobs() const override {
    return query("SELECT COUNT(*) FROM jobs", {}).integer(0, 0);
  }

  std::vector<BudgetRecord> budgets() const override {
    return all(query("SELECT path, share, members, removed, owners, submit_limits, "
                     "default_min_runtime FROM budgets ORDER BY ord",
                     {}),
               [](const PgResult& r, int i) {
                 return BudgetRecord{r.text(i, 0),
                                     r.real(i, 1),
                                     parse_name_list(r.text(i, 2)),
                                     r.integer(i, 3) != 0,
                                     parse_name_list(r.text(i, 4)),
                                     r.text(i, 5),
                                     r.integer(i, 6)};
               });
  }

  std::vector<ServiceRecord> services() const override {
    return all(query("SELECT name, owner, budget, spec_json, state_json, created, updated FROM "
                     "services WHERE removed = 0 ORDER BY name",
                     {}),
               [](const PgResult& r, int i) {
                 return ServiceRecord{r.text(i, 0), r.text(i, 1),    r.text(i, 2),    r.text(i, 3),
                                      r.text(i, 4), r.integer(i, 5), r.integer(i, 6), false};
               });
  }

  std::vector<UserLimitsRecord> user_limits() const override {
    return all(
        query("SELECT user_name, limits FROM user_limits WHERE limits <> '' ORDER BY user_name",
              {}),
        [](const PgResult& r, int i) {
          return UserLimitsRecord{r.text(i, 0), r.text(i, 1)};
        });
  }

  std::vector<AuditEntry> audit(const std::string& prefix, int limit) const override {
    return all(query("SELECT id, time, actor, path, field, old_value, new_value, actor_token FROM "
                     "budget_audit WHERE ($1 = '' OR path = $1 OR path LIKE $2 ESCAPE '\\') "
                     "ORDER BY id DESC LIMIT $3",
                     PgParams().all(prefix, like_prefix(prefix), limit)),
               [](const PgResult& r, int i) {
                 return AuditEntry{r.integer(i, 0), r.integer(i, 1), r.text(i, 2), r.text(i, 3),
                                   r.text(i, 4),    r.text(i, 5),    r.text(i, 6), r.integer(i, 7)};
               });
  }

  std::vector<NodeRecord> nodes() const override {
    return all(query("SELECT " + kPgNodeCols + " FROM nodes ORDER BY ord", {}), read_node);
  }

  std::optional<NodeRecord> node(const std::string& name) const override {
    return first(
        query("SELECT " + kPgNodeCols + " FROM nodes WHERE name = $1", PgParams().add(name)),
        read_node);
  }

  std::optional<TokenRecord> token_by_hash(const std::string& hash) const override {
    return first(
        query("SELECT " + kTokenCols + " FROM tokens WHERE hash = $1", PgParams().add(hash)),
        read_token);
  }

  std::vector<TokenRecord> tokens() const override {
    return all(query("SELECT " + kTokenCols + " FROM tokens ORDER BY id", {}), read_token);
  }

  std::vector<LedgerEntry> ledger(Time from, Time to) const override {
    return all(query(kLedgerSelect + "WHERE \"end\" > $1 AND start < $2 ORDER BY id",
                     PgParams().all(from, to)),
               read_ledger);
  }

  std::vector<LedgerEntry> ledger_for_job(JobId id) const override {
    return all(query(kLedgerSelect + "WHERE job_id = $1 ORDER BY id",
                     PgParams().add(static_cast<std::int64_t>(id))),
               read_ledger);
  }

  std::vector<NodeHealthEvent> node_health(Time to) const override {
    return all(query("SELECT node, time, health, cordoned, gpus, reason FROM node_health WHERE "
                     "time < $1 ORDER BY time, ord",
                     PgParams().add(to)),
               [](const PgResult& r, int i) {
                 return NodeHealthEvent{r.text(i, 0),
                                        r.integer(i, 1),
                                        r.text(i, 2),
                                        r.integer(i, 3) != 0,
                                        static_cast<int>(r.integer(i, 4)),
                                        r.text(i, 5)};
               });
  }

  std::vector<TelemetryRecord> telemetry(JobId id) const override {
    return all(query("SELECT " + kTelemetryCols +
                         " FROM job_telemetry WHERE job_id = $1 ORDER BY "
                         "run",
                     PgParams().add(static_cast<std::int64_t>(id))),
               read_telemetry);
  }

  std::vector<TelemetryRecord> telemetry_between(Time from, Time to) const override {
    return all(query("SELECT " + kTelemetryCols +
                         " FROM job_telemetry WHERE run = 0 AND "
                         "last_time >= $1 AND first_time < $2 ORDER BY job_id",
                     PgParams().all(from, to)),
               read_telemetry);
  }

  int schema_version() const override { return version_; }

 private:
  struct Pending {
    WriteBatch batch;
    std::function<void(Status)> done;
  };

  // The writer's session commits durably whatever the server's default says.
  Status durable_session() {
    auto r = wconn_.run("SHOW synchronous_commit");
    if (!r.ok()) return Error{"store", r.error()};
    if (r.rows() > 0 && r.text(0, 0) == "off") {
      if (auto s = wconn_.run("SET synchronous_commit = on"); !s.ok()) {
        return Error{"store", s.error()};
      }
    }
    // A writer stopped mid-transaction (SIGSTOP, a hung host) holds the lease row's lock: let
    // PostgreSQL end its session so that a standby's takeover is not held up for long.
    if (opts_.fence_epoch != 0) {
      if (auto s = wconn_.run("SET idle_in_transaction_session_timeout = '3s'"); !s.ok()) {
        return Error{"store", s.error()};
      }
    }
    return core::ok_status();
  }

  Status migrate() {
    auto fail = [this](const std::string& what, const PgResult& r) -> Status {
      wconn_.run("ROLLBACK");
      return Error{"store", what + ": " + r.error()};
    };
    if (auto r = wconn_.run("BEGIN"); !r.ok()) return fail("BEGIN", r);
    if (auto r = wconn_.run("SELECT pg_advisory_xact_lock(" + std::to_string(kMigrationLock) + ")");
        !r.ok()) {
      return fail("lock", r);
    }
    if (auto r = wconn_.run("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)");
        !r.ok()) {
      return fail("schema_version", r);
    }
    auto r = wconn_.run("SELECT version FROM schema_version");
    if (!r.ok()) return fail("schema_version", r);
    int version = 0;
    if (r.rows() > 0) {
      version = static_cast<int>(r.integer(0, 0));
    } else if (auto ins = wconn_.run("INSERT INTO schema_version VALUES (0)"); !ins.ok()) {
      return fail("schema_version", ins);
    }
    if (version > latest_version()) {
      wconn_.run("ROLLBACK");
      return Error{"store", "database schema version " + std::to_string(version) +
                                " is newer than this build knows (" +
                                std::to_string(latest_version()) + "): upgrade allot"};
    }
    for (int v = version; v < latest_version(); ++v) {
      if (auto m = wconn_.run(kPostgresMigrations[static_cast<std::size_t>(v)]); !m.ok()) {
        return fail("migration " + std::to_string(v + 1) + " failed", m);
      }
      if (auto u = wconn_.run("UPDATE schema_version SET version = " + std::to_string(v + 1));
          !u.ok()) {
        return fail("schema_version", u);
      }
    }
    if (auto c = wconn_.run("COMMIT"); !c.ok()) return fail("COMMIT", c);
    version_ = latest_version();
    return core::ok_status();
  }

  // A read connection from the pool, returned on destruction (dropped if it broke).
  struct Lease {
    const PostgresStore* store = nullptr;
    std::unique_ptr<PgConn> conn;
    Lease(const PostgresStore* s, std::unique_ptr<PgConn> c) : store(s), conn(std::move(c)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() {
      {
        std::lock_guard lk(store->pool_mu_);
        if (conn && conn->healthy()) {
          store->idle_.push_back(std::move(conn));
        } else {
          --store->open_readers_;
        }
      }
      store->pool_cv_.notify_one();
    }
    PgConn* operator->() const { return conn.get(); }
  };
  Lease reader() const {
    std::unique_lock lk(pool_mu_);
    pool_cv_.wait(lk, [&] { return !idle_.empty() || open_readers_ < opts_.max_readers; });
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(c));
    }
    ++open_readers_;
    lk.unlock();
    auto c = std::make_unique<PgConn>(uri_);
    if (auto s = c->connect(); !s.ok()) {
      {
        std::lock_guard relk(pool_mu_);
        --open_readers_;
      }
      pool_cv_.notify_one();
      throw std::runtime_error(s.error().message());
    }
    return Lease(this, std::move(c));
  }

  // Runs a read; a connection that broke (the server restarted) is replaced once.
  // Runs a read; a connection that broke (PostgreSQL restarted or failed over) is replaced, for
  // up to opts_.reconnect_for.
  PgResult query(const std::string& sql, const PgParams& params) const {
    const auto deadline = std::chrono::steady_clock::now() + opts_.reconnect_for;
    for (int attempt = 0;; ++attempt) {
      std::string why;
      try {
        auto c = reader();
        auto r = c->exec(sql, params);
        if (r.ok()) return r;
        if (c->healthy()) throw QueryError("store: " + r.error());
        why = c->last_error();
      } catch (const QueryError&) {
        throw;  // PostgreSQL answered: not a connection to make again
      } catch (const std::runtime_error& e) {
        why = e.what();  // no connection could be made
      }
      if (attempt > 0 && std::chrono::steady_clock::now() >= deadline) {
        throw std::runtime_error("store: " + why);
      }
      if (attempt > 0) std::this_thread::sleep_for(kRetryPause);
    }
  }

  Status apply_telemetry(const TelemetryRecord& d) {
    static const std::string sql =
        "INSERT INTO job_telemetry AS t (" + kTelemetryCols + ") VALUES (" +
        pg_placeholders(1, 17) +
        ") ON CONFLICT (job_id, run) DO UPDATE SET "
        "samples = t.samples + excluded.samples, seconds = t.seconds + excluded.seconds, "
        "gpu_seconds = t.gpu_seconds + excluded.gpu_seconds, "
        "used_gpu_seconds = t.used_gpu_seconds + excluded.used_gpu_seconds, "
        "util_sum = t.util_sum + excluded.util_sum, "
        "util_peak = GREATEST(t.util_peak, excluded.util_peak), "
        "mem_peak_mib = GREATEST(t.mem_peak_mib, excluded.mem_peak_mib), "
        "mem_total_mib = GREATEST(t.mem_total_mib, excluded.mem_total_mib), "
        "cpu_sum = t.cpu_sum + excluded.cpu_sum, io_sum = t.io_sum + excluded.io_sum, "
        "first_time = LEAST(t.first_time, excluded.first_time), "
        "last_time = GREATEST(t.last_time, excluded.last_time), "
        "idle_seconds = t.idle_seconds + excluded.idle_seconds, "
        "starved_seconds = t.starved_seconds + excluded.starved_seconds";
    for (int run : {d.run, 0}) {
      auto r = wconn_.exec(
          sql, PgParams().all(static_cast<std::int64_t>(d.job), run, d.budget, d.samples, d.seconds,
                              d.gpu_seconds, d.used_gpu_seconds, d.util_sum, d.util_peak,
                              d.mem_peak_mib, d.mem_total_mib, d.cpu_sum, d.io_sum, d.first_time,
                              d.last_time, d.idle_seconds, d.starved_seconds));
      if (!r.ok()) return Error{"store", r.error()};
    }
    return core::ok_status();
  }

  Status apply(const WriteOp& w) {
    if (const auto* t = std::get_if<op::AddTelemetry>(&w)) return apply_telemetry(t->delta);
    auto st = write_statement(w);
    auto r = wconn_.exec(*st.sql, st.params);
    if (!r.ok()) return Error{"store", r.error()};
    // Inserts of jobs and tokens skip a taken key (ON CONFLICT DO NOTHING) rather than fail,
    // which would abort the whole group's transaction.
    if (r.affected() == 0) {
      if (std::holds_alternative<op::InsertJob>(w)) {
        return Error{"idempotency_key", "a job with this key (or id) already exists"};
      }
      if (std::holds_alternative<op::PutToken>(w)) return Error{"token", "already exists"};
    }
    return core::ok_status();
  }

  // Applies one batch inside the group's transaction: all of it or none of it.
  Status apply_batch(const WriteBatch& batch) {
    if (batch.size() == 1 && !std::holds_alternative<op::AddTelemetry>(batch[0])) {
      return apply(batch[0]);  // one statement is atomic on its own
    }
    if (auto r = wconn_.run("SAVEPOINT b"); !r.ok()) return Error{"store", r.error()};
    Status result = core::ok_status();
    for (const auto& w : batch) {
      result = apply(w);
      if (!result.ok()) break;
    }
    if (!result.ok()) wconn_.run("ROLLBACK TO SAVEPOINT b");
    wconn_.run("RELEASE SAVEPOINT b");
    return result;
  }

  static bool one_insert(const WriteBatch& b) {
    return b.size() == 1 && std::holds_alternative<op::InsertJob>(b[0]);
  }

  // The one-job batches group[from, to) in as few INSERTs as the fixed statement sizes allow.
  // A row skipped for a taken id or key is refused as apply() refuses it; rows skipped because an
  // earlier row of the same run took the key are refused too, as they would be one by one.
  void insert_jobs(const std::vector<std::unique_ptr<Pending>>& group, std::size_t from,
                   std::size_t to, std::vector<Status>& results) {
    for (std::size_t i = from; i < to;) {
      const int n = insert_jobs_chunk(static_cast<int>(to - i));
      PgParams p;
      for (int k = 0; k < n; ++k) {
        add_insert_job_params(p, std::get<op::InsertJob>(group[i + k]->batch[0]).job);
      }
      auto r = wconn_.exec(insert_jobs_sql(n), p);
      if (!r.ok()) {
        for (int k = 0; k < n; ++k) results[i + k] = Error{"store", r.error()};
        return;  // the transaction is aborted (or the connection lost): the caller sees it
      }
      std::multiset<std::int64_t> written;
      for (int row = 0; row < r.rows(); ++row) written.insert(r.integer(row, 0));
      for (int k = 0; k < n; ++k) {
        const auto id =
            static_cast<std::int64_t>(std::get<op::InsertJob>(group[i + k]->batch[0]).job.id);
        if (auto it = written.find(id); it != written.end()) {
          written.erase(it);
          results[i + k] = core::ok_status();
        } else {
          results[i + k] = Error{"idempotency_key", "a job with this key (or id) already exists"};
        }
      }
      i += static_cast<std::size_t>(n);
    }
  }

  // Connects the writer again, retrying until `deadline` (PostgreSQL restarting or failing over).
  Status reconnect(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      auto s = wconn_.connect();
      if (s.ok()) s = durable_session();
      if (s.ok() || std::chrono::steady_clock::now() >= deadline || stopping()) return s;
      std::this_thread::sleep_for(kRetryPause);
    }
  }

  // After the connection broke during COMMIT: did transaction `xid` commit? (txid_status: PG 10)
  std::optional<bool> committed(const std::string& xid,
                                std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      if (!wconn_.healthy() && !reconnect(deadline).ok()) return std::nullopt;
      auto r = wconn_.exec("SELECT txid_status($1::BIGINT)", PgParams().add(xid));
      if (r.ok() && r.rows() == 1 && !r.null(0, 0)) {
        const auto status = r.text(0, 0);
        if (status == "committed") return true;
        if (status == "aborted") return false;
        // "in progress": the old backend has not yet seen its connection go; ask again.
      }
      if (std::chrono::steady_clock::now() >= deadline || stopping()) return std::nullopt;
      std::this_thread::sleep_for(kRetryPause);
    }
  }

  enum class Attempt { kDone, kRetry };

  // One try at the group in one transaction. kRetry: the connection broke and nothing of the
  // group is committed, so the whole group may run again on a new one.
  Attempt try_group(const std::vector<std::unique_ptr<Pending>>& group,
                    std::vector<Status>& results, Status& tx,
                    std::chrono::steady_clock::time_point deadline) {
    results.assign(group.size(), core::ok_status());
    if (!wconn_.healthy()) {
      if (tx = reconnect(deadline); !tx.ok()) return Attempt::kDone;
    }
    // One round trip: PQexec runs both and answers with the last one's result. Fenced: the
    // lease row, locked until COMMIT (a standby's takeover waits for it), must still carry this
    // server's epoch, else no row comes back.
    auto xid = wconn_.run(begin_sql_);
    if (!xid.ok() || xid.rows() != 1) {
      if (!wconn_.healthy()) return Attempt::kRetry;
      tx = xid.ok() ? fenced() : Status(Error{"store", "BEGIN: " + xid.error()});
      wconn_.run("ROLLBACK");
      return Attempt::kDone;
    }
    for (std::size_t i = 0; i < group.size();) {
      // A run of submissions (one job each) goes in multi-row INSERTs, a few round trips.
      std::size_t end = i;
      while (end < group.size() && one_insert(group[end]->batch)) ++end;
      if (end - i >= 2) {
        insert_jobs(group, i, end, results);
      } else {
        results[i] = apply_batch(group[i]->batch);
        end = i + 1;
      }
      if (!wconn_.healthy()) return Attempt::kRetry;
      for (std::size_t k = i; k < end; ++k) {
        if (!results[k].ok() && wconn_.tx_failed()) {
          // The error ended the transaction: nothing of the group commits.
          tx = Error{"store", "the transaction was rolled back: " + results[k].error().reason};
          wconn_.run("ROLLBACK");
          return Attempt::kDone;
        }
      }
      i = end;
    }
    auto c = wconn_.run("COMMIT");  // synchronous_commit: the WAL is flushed when this returns
    if (c.ok()) {
      tx = core::ok_status();
      return Attempt::kDone;
    }
    if (wconn_.healthy()) {
      tx = Error{"store", "COMMIT: " + c.error()};
      wconn_.run("ROLLBACK");
      return Attempt::kDone;
    }
    // The connection broke during COMMIT: ask PostgreSQL what became of the transaction.
    const auto done = committed(xid.text(0, 0), deadline);
    if (!done) {
      tx = Error{"store", "commit outcome unknown, the connection to PostgreSQL was lost: " +
                              wconn_.last_error()};
      return Attempt::kDone;
    }
    if (*done) {
      tx = core::ok_status();
      return Attempt::kDone;
    }
    return Attempt::kRetry;
  }

  // One group in one transaction, tried again on a new connection while PostgreSQL is away for
  // less than opts_.reconnect_for; the status of the transaction (results: each batch's own).
  Status commit_group(const std::vector<std::unique_ptr<Pending>>& group,
                      std::vector<Status>& results) {
    const auto deadline = std::chrono::steady_clock::now() + opts_.reconnect_for;
    Status tx = core::ok_status();
    for (;;) {
      if (try_group(group, results, tx, deadline) == Attempt::kDone) return tx;
      if (std::chrono::steady_clock::now() >= deadline || stopping()) {
        return Error{"store", "the connection to PostgreSQL was lost: " + wconn_.last_error()};
      }
    }
  }

  Status fenced() const {
    return Error{"store", std::string(kFenced) + "the leader lease (epoch " +
                              std::to_string(opts_.fence_epoch) +
                              ") was taken by another server; this one's writes are refused"};
  }

  bool stopping() {
    std::lock_guard lk(mu_);
    return stopping_;
  }

  void writer_loop() {
    std::vector<std::unique_ptr<Pending>> group;
    std::vector<Status> results;
    for (;;) {
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty() && stopping_) return;
        while (!queue_.empty() && group.size() < opts_.max_batches_per_commit) {
          group.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      const Status tx = commit_group(group, results);
      for (std::size_t i = 0; i < group.size(); ++i) group[i]->done(tx.ok() ? results[i] : tx);
      group.clear();
    }
  }

  std::string uri_;
  PostgresOptions opts_;
  PgConn wconn_;  // used by init() then only by the writer thread
  std::string begin_sql_ =
      opts_.fence_epoch == 0
          ? "BEGIN; SELECT txid_current()"
          : "BEGIN; SELECT txid_current() FROM leader_lease WHERE id = 1 AND epoch = " +
                std::to_string(opts_.fence_epoch) + " FOR SHARE";
  int version_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Pending>> queue_;
  bool stopping_ = false;
  std::thread writer_;

  mutable std::mutex pool_mu_;
  mutable std::condition_variable pool_cv_;
  mutable std::vector<std::unique_ptr<PgConn>> idle_;
  mutable std::size_t open_readers_ = 0;
};

}  // namespace

bool is_fenced(const core::Error& e) {
  return e.field == "store" && e.reason.starts_with(kFenced);
}

int postgres_schema_latest() {
  return latest_version();
}

Result<std::unique_ptr<Store>> open_postgres(const std::string& uri, PostgresOptions opts) {
  auto s = std::make_unique<PostgresStore>(uri, opts);
  if (auto st = s->init(); !st.ok()) return st.error();
  return std::unique_ptr<Store>(std::move(s));
}

}  // namespace allot::store
