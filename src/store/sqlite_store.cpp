#include "store/sqlite_store.h"

#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "store/job_columns.h"
#include "store/sqlite_schema.h"

namespace allot::store {
namespace {

using core::Error;
using core::Result;
using core::Status;

int latest_version() {
  return static_cast<int>(kSqliteMigrations.size());
}

// One connection with its prepared statements, cached by SQL text.
class Conn {
 public:
  Conn() = default;
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;
  ~Conn() {
    for (auto& [sql, st] : stmts_) sqlite3_finalize(st);
    if (db_) sqlite3_close(db_);
  }
  Status open(const std::string& path, bool readonly) {
    int flags = SQLITE_OPEN_NOMUTEX |
                (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
      return Error{"store", "cannot open " + path + ": " + sqlite3_errmsg(db_)};
    }
    sqlite3_busy_timeout(db_, 10000);
    if (!readonly) {
      if (auto s = exec("PRAGMA journal_mode=WAL"); !s.ok()) return s;
      if (auto s = exec("PRAGMA synchronous=FULL"); !s.ok()) return s;
    }
    return core::ok_status();
  }
  // Bounds the database file (pages of its page size); writes beyond fail as on a full disk.
  Status limit_pages(std::int64_t pages) {
    if (pages <= 0) return core::ok_status();
    return exec(("PRAGMA max_page_count=" + std::to_string(pages)).c_str());
  }
  Status exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      return Error{"store", msg};
    }
    return core::ok_status();
  }
  sqlite3_stmt* prepare(const std::string& sql) {
    // Hot statements are static strings: found by address first, without comparing SQL text.
    if (auto f = by_address_.find(&sql); f != by_address_.end() && f->second.first == sql.size()) {
      sqlite3_reset(f->second.second);
      sqlite3_clear_bindings(f->second.second);
      return f->second.second;
    }
    auto it = stmts_.find(sql);
    if (it != stmts_.end()) {
      sqlite3_reset(it->second);
      sqlite3_clear_bindings(it->second);
      return it->second;
    }
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &st, nullptr) !=
        SQLITE_OK) {
      throw std::runtime_error(std::string("sqlite prepare: ") + sqlite3_errmsg(db_) + " in " +
                               sql);
    }
    stmts_.emplace(sql, st);
    return st;
  }
  sqlite3* db() const { return db_; }
  // Marks `sql` (a string that lives as long as the connection) for the address fast path.
  sqlite3_stmt* prepare_static(const std::string& sql) {
    auto* st = prepare(sql);
    by_address_[&sql] = {sql.size(), st};
    return st;
  }

 private:
  sqlite3* db_ = nullptr;
  std::map<std::string, sqlite3_stmt*> stmts_;
  std::unordered_map<const std::string*, std::pair<std::size_t, sqlite3_stmt*>> by_address_;
};

// Binding helpers: bind_args(st, a, b, c...) binds ?1, ?2, ?3... (not named bind: with a
// std::string argument, ADL finds std::bind, a better match, and nothing would be bound).
void bind_one(sqlite3_stmt* st, int i, std::int64_t v) {
  sqlite3_bind_int64(st, i, v);
}
void bind_one(sqlite3_stmt* st, int i, int v) {
  sqlite3_bind_int64(st, i, v);
}
void bind_one(sqlite3_stmt* st, int i, bool v) {
  sqlite3_bind_int(st, i, v ? 1 : 0);
}
void bind_one(sqlite3_stmt* st, int i, double v) {
  sqlite3_bind_double(st, i, v);
}
void bind_one(sqlite3_stmt* st, int i, const std::string& v) {
  sqlite3_bind_text(st, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}
void bind_one(sqlite3_stmt* st, int i, const std::optional<int>& v) {
  if (v) {
    sqlite3_bind_int(st, i, *v);
  } else {
    sqlite3_bind_null(st, i);
  }
}
template <typename... A>
void bind_args(sqlite3_stmt* st, const A&... a) {
  int i = 1;
  (bind_one(st, i++, a), ...);
}

std::string col_text(sqlite3_stmt* st, int i) {
  auto* p = sqlite3_column_text(st, i);
  return p ? std::string(reinterpret_cast<const char*>(p),
                         static_cast<std::size_t>(sqlite3_column_bytes(st, i)))
           : std::string();
}
std::int64_t col_int(sqlite3_stmt* st, int i) {
  return sqlite3_column_int64(st, i);
}

// Writes every column of kJobColumns of a job (inserting it if it is new), leaving the others.
std::string upsert_job_sql() {
  std::string sql = "INSERT INTO jobs (" + kJobColumns + ") VALUES (?";
  for (int i = 1; i < kJobColumnCount; ++i) sql += ",?";
  return sql + ") ON CONFLICT(id) DO UPDATE SET " + job_upsert_set();
}

// The current row of a statement, as job_from_row reads it.
struct SqliteRow {
  sqlite3_stmt* st;
  std::int64_t integer(int col) const { return col_int(st, col); }
  std::string text(int col) const { return col_text(st, col); }
  bool null(int col) const { return sqlite3_column_type(st, col) == SQLITE_NULL; }
};
JobRecord read_job(sqlite3_stmt* st) {
  return job_from_row(SqliteRow{st});
}

// Binds a job's columns (kJobColumns) to ?1.. and returns the next parameter's index.
int bind_job(sqlite3_stmt* st, const JobRecord& j) {
  int i = 1;
  job_column_values(j, [&](const auto& v) { bind_one(st, i++, v); });
  return i;
}

const char* kLedgerSelect =
    "SELECT id, job_id, owner, budget, cluster, start, end, milli, allocated FROM ledger ";

LedgerEntry read_ledger(sqlite3_stmt* st) {
  LedgerEntry e;
  e.id = col_int(st, 0);
  e.job = static_cast<JobId>(col_int(st, 1));
  e.owner = col_text(st, 2);
  e.budget = col_text(st, 3);
  e.cluster = col_text(st, 4);
  e.start = col_int(st, 5);
  e.end = col_int(st, 6);
  e.milli = col_int(st, 7);
  e.allocated = col_int(st, 8) != 0;
  return e;
}

class SqliteStore final : public Store {
 public:
  SqliteStore(std::string path, SqliteOptions opts) : path_(std::move(path)), opts_(opts) {}
  ~SqliteStore() override {
    {
      std::lock_guard lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (writer_.joinable()) writer_.join();
  }

  Status init() {
    // The database holds every token's hash and every job's command and environment: only the
    // server's user reads it. SQLite gives its -wal and -shm files the database file's mode.
    if (path_ != ":memory:" && !path_.empty()) {
      const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      if (fd < 0) return Error{"store", "cannot open " + path_ + ": " + std::strerror(errno)};
      const bool private_mode = ::fchmod(fd, 0600) == 0;
      ::close(fd);
      if (!private_mode) {
        return Error{"store", "cannot make " + path_ + " private (0600): " + std::strerror(errno)};
      }
      for (const char* suffix : {"-wal", "-shm"}) ::chmod((path_ + suffix).c_str(), 0600);
    }
    if (auto s = wconn_.open(path_, false); !s.ok()) return s;
    if (auto s =
            wconn_.exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)");
        !s.ok()) {
      return s;
    }
    int version = 0;
    {
      auto* st = wconn_.prepare("SELECT version FROM schema_version");
      if (sqlite3_step(st) == SQLITE_ROW) {
        version = static_cast<int>(col_int(st, 0));
      } else {
        if (auto s = wconn_.exec("INSERT INTO schema_version VALUES (0)"); !s.ok()) return s;
      }
      sqlite3_reset(st);
    }
    if (version > latest_version()) {
      return Error{"store", "database schema version " + std::to_string(version) +
                                " is newer than this build knows (" +
                                std::to_string(latest_version()) + "): upgrade allot"};
    }
    for (int v = version; v < latest_version(); ++v) {
      if (auto s = wconn_.exec("BEGIN IMMEDIATE"); !s.ok()) return s;
      auto s = wconn_.exec(kSqliteMigrations[static_cast<std::size_t>(v)]);
      if (s.ok()) {
        s = wconn_.exec(("UPDATE schema_version SET version = " + std::to_string(v + 1)).c_str());
      }
      if (!s.ok()) {
        wconn_.exec("ROLLBACK");
        return Error{"store",
                     "migration " + std::to_string(v + 1) + " failed: " + s.error().reason};
      }
      if (auto c = wconn_.exec("COMMIT"); !c.ok()) return c;
    }
    version_ = latest_version();
    if (auto s = wconn_.limit_pages(opts_.max_pages); !s.ok()) return s;
    if (auto s = wconn_.exec(
            ("PRAGMA wal_autocheckpoint=" + std::to_string(opts_.wal_checkpoint_pages)).c_str());
        !s.ok()) {
      return s;
    }
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
    {
      std::lock_guard lk(mu_);
      if (stopping_) {
        refused = std::move(p);
      } else {
        wake = queue_.empty();  // else the writer has been woken and will take this one too
        queue_.push_back(std::move(p));
      }
    }
    if (refused) return refused->done(Error{"store", "closed"});  // not queued
    if (wake) cv_.notify_one();
  }

  // Every row of `sql` (bound to `args`), each read by `read`.
  template <typename Read, typename... A>
  auto rows(const std::string& sql, Read read, const A&... args) const {
    auto c = reader();
    auto* st = c->prepare(sql);
    if constexpr (sizeof...(A) > 0) bind_args(st, args...);
    std::vector<decltype(read(st))> out;
    while (sqlite3_step(st) == SQLITE_ROW) out.push_back(read(st));
    sqlite3_reset(st);
    return out;
  }

  std::optional<JobRecord> job(JobId id) const override {
    auto c = reader();
    auto* st = c->prepare("SELECT " + kJobColumns + " FROM jobs WHERE id = ?");
    bind_args(st, static_cast<std::int64_t>(id));
    std::optional<JobRecord> out;
    if (sqlite3_step(st) == SQLITE_ROW) out = read_job(st);
    sqlite3_reset(st);
    return out;
  }

  std::optional<JobRecord> job_by_key(const std::string& owner,
                                      const std::string& key) const override {
    auto c = reader();
    auto* st = c->prepare("SELECT " + kJobColumns + " FROM jobs WHERE owner = ? AND idem_key = ?");
    bind_args(st, owner, key);
    std::optional<JobRecord> out;
    if (sqlite3_step(st) == SQLITE_ROW) out = read_job(st);
    sqlite3_reset(st);
    return out;
  }

  std::vector<JobRecord> jobs(const JobQuery& q) const override {
    std::string sql = "SELECT " + kJobColumns + " FROM jobs WHERE 1";
    std::vector<std::string> args;
    if (!q.states.empty()) {
      sql += " AND state IN (";
      for (std::size_t i = 0; i < q.states.size(); ++i) {
        sql += i ? ",?" : "?";
        args.push_back(q.states[i]);
      }
      sql += ")";
    }
    if (!q.owner.empty()) {
      sql += " AND owner = ?";
      args.push_back(q.owner);
    }
    if (!q.budget.empty() && !q.budget_subtree) {
      sql += " AND budget = ?";  // served in id order by jobs_budget_state / jobs_budget
      args.push_back(q.budget);
    } else if (!q.budget.empty()) {
      sql += " AND (budget = ? OR budget LIKE ? ESCAPE '\\')";
      args.push_back(q.budget);
      args.push_back(like_prefix(q.budget));
    }
    if (!q.budgets_within.empty() || !q.owner_or_within.empty()) {
      sql += " AND (0";
      if (!q.owner_or_within.empty()) {
        sql += " OR owner = ?";
        args.push_back(q.owner_or_within);
      }
      for (const auto& b : q.budgets_within) {
        sql += " OR budget = ? OR budget LIKE ? ESCAPE '\\'";
        args.push_back(b);
        args.push_back(like_prefix(b));
      }
      sql += ")";
    }
    if (q.after) sql += q.descending ? " AND id < ?" : " AND id > ?";
    sql += q.descending ? " ORDER BY id DESC" : " ORDER BY id ASC";
    sql += " LIMIT ?";
    auto c = reader();
    auto* st = c->prepare(sql);
    int i = 1;
    for (const auto& a : args) bind_one(st, i++, a);
    if (q.after) bind_one(st, i++, static_cast<std::int64_t>(q.after));
    bind_one(st, i++, q.limit);
    std::vector<JobRecord> out;
    while (sqlite3_step(st) == SQLITE_ROW) out.push_back(read_job(st));
    sqlite3_reset(st);
    return out;
  }

  std::vector<JobRecord> active_jobs() const override {
    return rows("SELECT " + kJobColumns +
                    " FROM jobs WHERE state IN ('pending','starting','running','preempting',"
                    "'requeued') ORDER BY id",
                read_job);
  }

  std::vector<JobRecord> jobs_overlapping(Time from, Time to) const override {
    return rows("SELECT " + kJobColumns +
                    " FROM jobs WHERE submit_time < ? AND (state IN ('pending','starting',"
                    "'running','preempting','requeued') OR updated_at > ?) ORDER BY id",
                read_job, to, from);
  }

  std::vector<JobEvent> job_events(JobId id) const override {
    std::vector<JobEvent> out;
    {
      auto c = reader();
      static const std::string created =
          "SELECT submit_time, created_state, created_reason FROM jobs WHERE id = ?";
      auto* st = c->prepare(created);
      bind_args(st, static_cast<std::int64_t>(id));
      if (sqlite3_step(st) == SQLITE_ROW && !col_text(st, 1).empty()) {
        out.push_back(JobEvent{id, col_int(st, 0), "", col_text(st, 1), col_text(st, 2)});
      }
      sqlite3_reset(st);
    }
    auto stored = rows(
        "SELECT job_id, time, from_state, to_state, reason FROM job_events WHERE job_id = ? "
        "ORDER BY rowid",
        [](sqlite3_stmt* st) {
          return JobEvent{static_cast<JobId>(col_int(st, 0)), col_int(st, 1), col_text(st, 2),
                          col_text(st, 3), col_text(st, 4)};
        },
        static_cast<std::int64_t>(id));
    out.insert(out.end(), std::make_move_iterator(stored.begin()),
               std::make_move_iterator(stored.end()));
    return out;
  }

  JobId max_job_id() const override {
    auto c = reader();
    auto* st = c->prepare("SELECT COALESCE(MAX(id), 0) FROM jobs");
    JobId out = 0;
    if (sqlite3_step(st) == SQLITE_ROW) out = static_cast<JobId>(col_int(st, 0));
    sqlite3_reset(st);
    return out;
  }

  std::int64_t count_jobs() const override {
    auto c = reader();
    auto* st = c->prepare("SELECT COUNT(*) FROM jobs");
    std::int64_t out = 0;
    if (sqlite3_step(st) == SQLITE_ROW) out = col_int(st, 0);
    sqlite3_reset(st);
    return out;
  }

  std::vector<BudgetRecord> budgets() const override {
    return rows(
        "SELECT path, share, members, removed, owners, submit_limits, default_min_runtime FROM "
        "budgets ORDER BY rowid",
        [](sqlite3_stmt* st) {
          return BudgetRecord{col_text(st, 0),
                              sqlite3_column_double(st, 1),
                              parse_name_list(col_text(st, 2)),
                              col_int(st, 3) != 0,
                              parse_name_list(col_text(st, 4)),
                              col_text(st, 5),
                              col_int(st, 6)};
        });
  }

  std::vector<ServiceRecord> services() const override {
    return rows(
        "SELECT name, owner, budget, spec_json, state_json, created, updated FROM services "
        "WHERE removed = 0 ORDER BY name",
        [](sqlite3_stmt* st) {
          return ServiceRecord{col_text(st, 0),
                               col_text(st, 1),
                               col_text(st, 2),
                               col_text(st, 3),
                               col_text(st, 4),
                               sqlite3_column_int64(st, 5),
                               sqlite3_column_int64(st, 6),
                               false};
        });
  }

  std::vector<UserLimitsRecord> user_limits() const override {
    return rows("SELECT user_name, limits FROM user_limits WHERE limits <> '' ORDER BY user_name",
                [](sqlite3_stmt* st) {
                  return UserLimitsRecord{col_text(st, 0), col_text(st, 1)};
                });
  }

  std::vector<AuditEntry> audit(const std::string& prefix, int limit) const override {
    return rows(
        "SELECT id, time, actor, path, field, old_value, new_value, actor_token FROM budget_audit "
        "WHERE (? = '' OR path = ? OR path LIKE ? ESCAPE '\\') ORDER BY id DESC LIMIT ?",
        [](sqlite3_stmt* st) {
          return AuditEntry{col_int(st, 0),  col_int(st, 1),  col_text(st, 2), col_text(st, 3),
                            col_text(st, 4), col_text(st, 5), col_text(st, 6), col_int(st, 7)};
        },
        prefix, prefix, like_prefix(prefix), limit);
  }

  std::vector<NodeRecord> nodes() const override {
    return rows(std::string("SELECT ") + kNodeCols + " FROM nodes ORDER BY rowid", read_node);
  }

  std::optional<NodeRecord> node(const std::string& name) const override {
    auto c = reader();
    auto* st = c->prepare(std::string("SELECT ") + kNodeCols + " FROM nodes WHERE name = ?");
    bind_args(st, name);
    std::optional<NodeRecord> out;
    if (sqlite3_step(st) == SQLITE_ROW) out = read_node(st);
    sqlite3_reset(st);
    return out;
  }

  std::optional<TokenRecord> token_by_hash(const std::string& hash) const override {
    auto c = reader();
    auto* st = c->prepare(std::string("SELECT ") + kTokenCols + " FROM tokens WHERE hash = ?");
    bind_args(st, hash);
    std::optional<TokenRecord> out;
    if (sqlite3_step(st) == SQLITE_ROW) out = read_token(st);
    sqlite3_reset(st);
    return out;
  }

  std::vector<TokenRecord> tokens() const override {
    return rows(std::string("SELECT ") + kTokenCols + " FROM tokens ORDER BY id", read_token);
  }

  std::vector<LedgerEntry> ledger(Time from, Time to) const override {
    return rows(std::string(kLedgerSelect) + "WHERE end > ? AND start < ? ORDER BY id", read_ledger,
                from, to);
  }

  std::vector<LedgerEntry> ledger_for_job(JobId id) const override {
    return rows(std::string(kLedgerSelect) + "WHERE job_id = ? ORDER BY id", read_ledger,
                static_cast<std::int64_t>(id));
  }

  std::vector<NodeHealthEvent> node_health(Time to) const override {
    return rows(
        "SELECT node, time, health, cordoned, gpus, reason FROM node_health WHERE time < ? "
        "ORDER BY time, rowid",
        [](sqlite3_stmt* st) {
          return NodeHealthEvent{col_text(st, 0),
                                 col_int(st, 1),
                                 col_text(st, 2),
                                 col_int(st, 3) != 0,
                                 static_cast<int>(col_int(st, 4)),
                                 col_text(st, 5)};
        },
        to);
  }

  std::vector<TelemetryRecord> telemetry(JobId id) const override {
    return rows(std::string("SELECT ") + kTelemetryCols +
                    " FROM job_telemetry WHERE job_id = ? ORDER BY run",
                read_telemetry, static_cast<std::int64_t>(id));
  }

  std::vector<TelemetryRecord> telemetry_between(Time from, Time to) const override {
    return rows(std::string("SELECT ") + kTelemetryCols +
                    " FROM job_telemetry WHERE run = 0 AND last_time >= ? AND first_time < ? "
                    "ORDER BY job_id",
                read_telemetry, from, to);
  }

  int schema_version() const override { return version_; }

 private:
  struct Pending {
    WriteBatch batch;
    std::function<void(Status)> done;
  };

  static constexpr const char* kNodeCols =
      "name, cluster, model, gpus, block, labels, health, health_reason, cordoned, simulated, "
      "registered_at, last_heartbeat, address, devices, agent, timed_out";
  static constexpr const char* kTelemetryCols =
      "job_id, run, budget, samples, seconds, gpu_seconds, used_gpu_seconds, util_sum, util_peak, "
      "mem_peak_mib, mem_total_mib, cpu_sum, io_sum, first_time, last_time, idle_seconds, "
      "starved_seconds";
  static constexpr const char* kTokenCols =
      "id, hash, name, role, subject, scope, created, revoked";

  static NodeRecord read_node(sqlite3_stmt* st) {
    NodeRecord n;
    n.name = col_text(st, 0);
    n.cluster = col_text(st, 1);
    n.model = col_text(st, 2);
    n.gpus = static_cast<int>(col_int(st, 3));
    n.block = col_text(st, 4);
    n.labels_json = col_text(st, 5);
    n.health = col_text(st, 6);
    n.health_reason = col_text(st, 7);
    n.cordoned = col_int(st, 8) != 0;
    n.simulated = col_int(st, 9) != 0;
    n.registered_at = col_int(st, 10);
    n.last_heartbeat = col_int(st, 11);
    n.address = col_text(st, 12);
    n.devices_json = col_text(st, 13);
    n.agent_json = col_text(st, 14);
    n.timed_out = col_int(st, 15) != 0;
    return n;
  }
  static TelemetryRecord read_telemetry(sqlite3_stmt* st) {
    TelemetryRecord t;
    t.job = static_cast<JobId>(col_int(st, 0));
    t.run = static_cast<int>(col_int(st, 1));
    t.budget = col_text(st, 2);
    t.samples = col_int(st, 3);
    t.seconds = sqlite3_column_double(st, 4);
    t.gpu_seconds = sqlite3_column_double(st, 5);
    t.used_gpu_seconds = sqlite3_column_double(st, 6);
    t.util_sum = sqlite3_column_double(st, 7);
    t.util_peak = sqlite3_column_double(st, 8);
    t.mem_peak_mib = col_int(st, 9);
    t.mem_total_mib = col_int(st, 10);
    t.cpu_sum = sqlite3_column_double(st, 11);
    t.io_sum = sqlite3_column_double(st, 12);
    t.first_time = col_int(st, 13);
    t.last_time = col_int(st, 14);
    t.idle_seconds = sqlite3_column_double(st, 15);
    t.starved_seconds = sqlite3_column_double(st, 16);
    return t;
  }
  static TokenRecord read_token(sqlite3_stmt* st) {
    return {col_int(st, 0),  col_text(st, 1), col_text(st, 2), col_text(st, 3),
            col_text(st, 4), col_text(st, 5), col_int(st, 6),  col_int(st, 7)};
  }
  static std::string like_prefix(const std::string& path) {
    std::string out;
    for (char ch : path) {
      if (ch == '%' || ch == '_' || ch == '\\') out += '\\';
      out += ch;
    }
    if (out.empty() || out.back() != '/') out += '/';
    return out + "%";
  }

  // A read connection from the pool, returned on destruction.
  struct Lease {
    const SqliteStore* store;
    std::unique_ptr<Conn> conn;
    ~Lease() {
      if (conn) {
        std::lock_guard lk(store->pool_mu_);
        store->pool_.push_back(std::move(conn));
      }
    }
    Conn* operator->() const { return conn.get(); }
  };
  Lease reader() const {
    {
      std::lock_guard lk(pool_mu_);
      if (!pool_.empty()) {
        auto c = std::move(pool_.back());
        pool_.pop_back();
        return Lease{this, std::move(c)};
      }
    }
    auto c = std::make_unique<Conn>();
    if (auto s = c->open(path_, true); !s.ok()) throw std::runtime_error(s.error().message());
    return Lease{this, std::move(c)};
  }

  bool in_transaction() const { return sqlite3_get_autocommit(wconn_.db()) == 0; }

  // Runs a short statement through the prepared-statement cache (not sqlite3_exec, which parses
  // it each time).
  void step_sql(const char* sql) {
    auto* st = wconn_.prepare(sql);
    sqlite3_step(st);
    sqlite3_reset(st);
  }

  Status step(sqlite3_stmt* st) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc == SQLITE_DONE) return core::ok_status();
    return Error{"store", sqlite3_errmsg(wconn_.db())};
  }

  // Two rows: the run's and the whole job's (run 0).
  Status apply_telemetry(const TelemetryRecord& d) {
    for (int run : {d.run, 0}) {
      auto* st = wconn_.prepare(
          std::string("INSERT INTO job_telemetry (") + kTelemetryCols +
          ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(job_id, run) DO UPDATE SET "
          "samples = samples + excluded.samples, seconds = seconds + excluded.seconds, "
          "gpu_seconds = gpu_seconds + excluded.gpu_seconds, "
          "used_gpu_seconds = used_gpu_seconds + excluded.used_gpu_seconds, "
          "util_sum = util_sum + excluded.util_sum, "
          "util_peak = MAX(util_peak, excluded.util_peak), "
          "mem_peak_mib = MAX(mem_peak_mib, excluded.mem_peak_mib), "
          "mem_total_mib = MAX(mem_total_mib, excluded.mem_total_mib), "
          "cpu_sum = cpu_sum + excluded.cpu_sum, io_sum = io_sum + excluded.io_sum, "
          "first_time = MIN(first_time, excluded.first_time), "
          "last_time = MAX(last_time, excluded.last_time), "
          "idle_seconds = idle_seconds + excluded.idle_seconds, "
          "starved_seconds = starved_seconds + excluded.starved_seconds");
      bind_args(st, static_cast<std::int64_t>(d.job), run, d.budget, d.samples, d.seconds,
                d.gpu_seconds, d.used_gpu_seconds, d.util_sum, d.util_peak, d.mem_peak_mib,
                d.mem_total_mib, d.cpu_sum, d.io_sum, d.first_time, d.last_time, d.idle_seconds,
                d.starved_seconds);
      if (auto s = step(st); !s.ok()) return s;
    }
    return core::ok_status();
  }

  Status apply(const WriteOp& w) {
    if (const auto* t = std::get_if<op::AddTelemetry>(&w)) return apply_telemetry(t->delta);
    sqlite3_stmt* st = nullptr;
    std::visit(
        [&](const auto& o) {
          using T = std::decay_t<decltype(o)>;
          if constexpr (std::is_same_v<T, op::InsertJob>) {
            // With its creation event: the state and reason it starts in.
            const auto& j = o.job;
            static const std::string sql = [] {
              std::string q =
                  "INSERT INTO jobs (" + kJobColumns + ", created_state, created_reason) VALUES (?";
              for (int i = 1; i < kJobColumnCount + 2; ++i) q += ",?";
              return q + ")";
            }();
            st = wconn_.prepare_static(sql);
            const int next = bind_job(st, j);
            bind_one(st, next, j.state);
            bind_one(st, next + 1, j.reason);
          } else if constexpr (std::is_same_v<T, op::UpdateJob>) {
            // Every column but the creation event's (a REPLACE would reset them).
            const auto& j = o.job;
            static const std::string sql = upsert_job_sql();
            st = wconn_.prepare_static(sql);
            bind_job(st, j);
          } else if constexpr (std::is_same_v<T, op::AddEvent>) {
            const auto& e = o.event;
            static const std::string sql = "INSERT INTO job_events VALUES (?,?,?,?,?)";
            st = wconn_.prepare_static(sql);
            bind_args(st, static_cast<std::int64_t>(e.job), e.time, e.from, e.to, e.reason);
          } else if constexpr (std::is_same_v<T, op::PutBudget>) {
            const auto& b = o.budget;
            st = wconn_.prepare(
                "INSERT INTO budgets (path, share, members, removed, owners, submit_limits, "
                "default_min_runtime) VALUES (?,?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET "
                "share = excluded.share, members = excluded.members, removed = excluded.removed, "
                "owners = excluded.owners, submit_limits = excluded.submit_limits, "
                "default_min_runtime = excluded.default_min_runtime");
            bind_args(st, b.path, b.share, name_list(b.members), b.removed, name_list(b.owners),
                      b.submit_limits, b.default_min_runtime);
          } else if constexpr (std::is_same_v<T, op::AddAudit>) {
            const auto& a = o.entry;
            st = wconn_.prepare(
                "INSERT INTO budget_audit (time, actor, path, field, old_value, new_value, "
                "actor_token) VALUES (?,?,?,?,?,?,?)");
            bind_args(st, a.time, a.actor, a.path, a.field, a.old_value, a.new_value,
                      a.actor_token);
          } else if constexpr (std::is_same_v<T, op::PutNode>) {
            const auto& n = o.node;
            st = wconn_.prepare(std::string("REPLACE INTO nodes (") + kNodeCols +
                                ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
            bind_args(st, n.name, n.cluster, n.model, n.gpus, n.block, n.labels_json, n.health,
                      n.health_reason, n.cordoned, n.simulated, n.registered_at, n.last_heartbeat,
                      n.address, n.devices_json, n.agent_json, n.timed_out);
          } else if constexpr (std::is_same_v<T, op::TouchNode>) {
            st = wconn_.prepare("UPDATE nodes SET last_heartbeat = ? WHERE name = ?");
            bind_args(st, o.at, o.name);
          } else if constexpr (std::is_same_v<T, op::PutToken>) {
            const auto& t = o.token;
            st = wconn_.prepare(
                "INSERT INTO tokens (hash, name, role, subject, scope, created, revoked) VALUES "
                "(?,?,?,?,?,?,?)");
            bind_args(st, t.hash, t.name, t.role, t.subject, t.scope, t.created, t.revoked);
          } else if constexpr (std::is_same_v<T, op::RevokeToken>) {
            st = wconn_.prepare("UPDATE tokens SET revoked = ? WHERE id = ? AND revoked = 0");
            bind_args(st, o.at, o.id);
          } else if constexpr (std::is_same_v<T, op::AddLedger>) {
            const auto& e = o.entry;
            st = wconn_.prepare(
                "INSERT INTO ledger (job_id, owner, budget, cluster, start, end, milli, "
                "allocated) VALUES (?,?,?,?,?,?,?,?)");
            bind_args(st, static_cast<std::int64_t>(e.job), e.owner, e.budget, e.cluster, e.start,
                      e.end, e.milli, e.allocated);
          } else if constexpr (std::is_same_v<T, op::AddNodeHealth>) {
            const auto& e = o.event;
            st = wconn_.prepare("INSERT INTO node_health VALUES (?,?,?,?,?,?)");
            bind_args(st, e.node, e.time, e.health, e.cordoned, e.gpus, e.reason);
          } else if constexpr (std::is_same_v<T, op::PutUserLimits>) {
            st = wconn_.prepare(
                "INSERT INTO user_limits (user_name, limits) VALUES (?,?) ON CONFLICT(user_name) "
                "DO UPDATE SET limits = excluded.limits");
            bind_args(st, o.record.user, o.record.limits);
          } else if constexpr (std::is_same_v<T, op::PutService>) {
            const auto& v = o.service;
            st = wconn_.prepare(
                "INSERT INTO services (name, owner, budget, spec_json, state_json, created, "
                "updated, removed) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET "
                "owner = excluded.owner, budget = excluded.budget, spec_json = "
                "excluded.spec_json, state_json = excluded.state_json, created = "
                "excluded.created, updated = excluded.updated, removed = excluded.removed");
            bind_args(st, v.name, v.owner, v.budget, v.spec_json, v.state_json, v.created,
                      v.updated, v.removed);
          }
        },
        w);
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc == SQLITE_DONE) return core::ok_status();
    if (rc == SQLITE_CONSTRAINT || (rc & 0xff) == SQLITE_CONSTRAINT) {
      if (std::holds_alternative<op::InsertJob>(w)) {
        return Error{"idempotency_key", "a job with this key (or id) already exists"};
      }
      if (std::holds_alternative<op::PutToken>(w)) return Error{"token", "already exists"};
    }
    return Error{"store", sqlite3_errmsg(wconn_.db())};
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
      results.assign(group.size(), core::ok_status());
      Status tx = wconn_.exec("BEGIN IMMEDIATE");
      if (tx.ok()) {
        for (std::size_t i = 0; i < group.size(); ++i) {
          const auto& batch = group[i]->batch;
          // One statement is atomic on its own: a failing one (a taken idempotency key) backs
          // out its own changes and leaves the transaction going. Larger batches need a
          // savepoint to be all or nothing.
          if (batch.size() == 1 && !std::holds_alternative<op::AddTelemetry>(batch[0])) {
            results[i] = apply(batch[0]);
          } else {
            step_sql("SAVEPOINT b");
            for (const auto& w : batch) {
              auto s = apply(w);
              if (!s.ok()) {
                results[i] = s;
                break;
              }
            }
            if (!results[i].ok() && in_transaction()) step_sql("ROLLBACK TO b");
            if (in_transaction()) step_sql("RELEASE b");
          }
          if (!results[i].ok() && !in_transaction()) {
            // The error ended the whole transaction (SQLite rolls back on a full disk, an I/O
            // error or out of memory): nothing of the group is on disk, and the batches after
            // it must not run outside a transaction, each committed on its own.
            tx = Error{"store", "the transaction was rolled back: " + results[i].error().reason};
            break;
          }
        }
        if (tx.ok()) {
          tx = wconn_.exec("COMMIT");  // synchronous=FULL: on disk when this returns
          if (!tx.ok()) wconn_.exec("ROLLBACK");
        }
      }
      for (std::size_t i = 0; i < group.size(); ++i) {
        group[i]->done(tx.ok() ? results[i] : tx);
      }
      group.clear();
    }
  }

  std::string path_;
  SqliteOptions opts_;
  Conn wconn_;  // used by init() then only by the writer thread
  int version_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Pending>> queue_;
  bool stopping_ = false;
  std::thread writer_;

  mutable std::mutex pool_mu_;
  mutable std::vector<std::unique_ptr<Conn>> pool_;
};

}  // namespace

int sqlite_schema_latest() {
  return latest_version();
}

Result<std::unique_ptr<Store>> open_sqlite(const std::string& path, SqliteOptions opts) {
  auto s = std::make_unique<SqliteStore>(path, opts);
  if (auto st = s->init(); !st.ok()) return st.error();
  return std::unique_ptr<Store>(std::move(s));
}

}  // namespace allot::store
