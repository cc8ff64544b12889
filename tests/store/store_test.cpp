// The store on both backends: SQLite on real files in a temporary directory, and PostgreSQL on a
// throwaway cluster of the test binary's own (postgres_cluster.h), a fresh database per test.
// Migrations, every record kind, idempotency keys, atomic batches and group commit under
// concurrent writers; then what only one backend has (SQLite's files, PostgreSQL's connections).
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "postgres_cluster.h"
#include "store/open_store.h"
#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace allot::store {
namespace {

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("allot-store-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

JobRecord make_job(JobId id, const std::string& owner, const std::string& key) {
  JobRecord j;
  j.id = id;
  j.owner = owner;
  j.idempotency_key = key;
  j.name = "job" + std::to_string(id);
  j.budget = "/lab/team";
  j.spec_json = "{}";
  j.state = "pending";
  j.submit_time = 100;
  j.updated_at = 100;
  return j;
}

// Runs body(thread, i, id) for i in [0, per_thread) on each of `threads` threads at once; the ids
// are 1, 2, ... in the order the calls take them.
template <typename Body>
void concurrently(int threads, int per_thread, Body body) {
  std::atomic<JobId> next{1};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) body(t, i, next++);
    });
  }
  for (auto& t : ts) t.join();
}

std::unique_ptr<Store> open(const std::string& path) {
  auto r = open_sqlite(path);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
  return std::move(r.value());
}

// One test on each backend: GetParam() is "sqlite" or "postgres".
class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!postgres()) return;
    auto& pg = testing::PostgresCluster::get();
    pg.prepare();
    if (!pg.skip_reason().empty()) GTEST_SKIP() << pg.skip_reason();
    ASSERT_EQ(pg.error(), "");
    uri_ = pg.fresh_database();
    ASSERT_NE(uri_, "") << pg.error();
  }
  bool postgres() const { return GetParam() == "postgres"; }
  // What `allot server --store` would be given.
  std::string spec() const { return postgres() ? uri_ : "sqlite:" + dir_.file("a.db"); }
  core::Result<std::unique_ptr<Store>> try_open() const { return open_store(spec()); }
  // Opens the test's database (again: it keeps what was written before).
  std::unique_ptr<Store> open() const {
    auto r = try_open();
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
    return r.ok() ? std::move(r.value()) : nullptr;
  }
  // Runs SQL on the database directly, beside the store.
  void raw_exec(const std::string& sql) const {
    if (postgres()) {
      PGconn* c = PQconnectdb(uri_.c_str());
      PGresult* r = PQexec(c, sql.c_str());
      EXPECT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << sql << ": " << PQresultErrorMessage(r);
      PQclear(r);
      PQfinish(c);
      return;
    }
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(dir_.file("a.db").c_str(), &db), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sql;
    sqlite3_close(db);
  }

  TempDir dir_;
  std::string uri_;
};

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

TEST_P(StoreTest, MigratesFreshDatabaseAndReopens) {
  {
    auto s = open();
    EXPECT_EQ(s->schema_version(), sqlite_schema_latest());
    ASSERT_TRUE(s->write({op::InsertJob{make_job(1, "ann", "k1")}}).ok());
  }
  auto s = open();
  EXPECT_EQ(s->schema_version(), sqlite_schema_latest());
  ASSERT_TRUE(s->job(1).has_value());
  EXPECT_EQ(s->job(1)->owner, "ann");
  EXPECT_EQ(s->max_job_id(), 1u);
}

TEST_P(StoreTest, RefusesNewerSchema) {
  { open(); }
  raw_exec("UPDATE schema_version SET version = 999");
  auto r = try_open();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().reason.find("newer"), std::string::npos);
}

TEST(SqliteStore, UsesWalAndFullSync) {
  TempDir dir;
  auto s = open(dir.file("a.db"));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("a.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST_P(StoreTest, IdempotencyKeyIsUniquePerOwner) {
  auto s = open();
  ASSERT_TRUE(s->write({op::InsertJob{make_job(1, "ann", "k")}}).ok());
  auto dup = s->write({op::InsertJob{make_job(2, "ann", "k")}});
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().field, "idempotency_key");
  EXPECT_TRUE(s->write({op::InsertJob{make_job(3, "bob", "k")}}).ok());
  EXPECT_EQ(s->job_by_key("ann", "k")->id, 1u);
  EXPECT_EQ(s->job_by_key("bob", "k")->id, 3u);
  EXPECT_FALSE(s->job(2).has_value());
}

TEST_P(StoreTest, FailedBatchChangesNothing) {
  auto s = open();
  ASSERT_TRUE(s->write({op::InsertJob{make_job(1, "ann", "k")}}).ok());
  // The event and the second job are in the same batch as a conflicting insert: none of it lands.
  auto r = s->write({op::InsertJob{make_job(2, "ann", "k2")},
                     op::AddEvent{{2, 5, "", "pending", "submitted"}},
                     op::InsertJob{make_job(3, "ann", "k")}});
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(s->job(2).has_value());
  EXPECT_TRUE(s->job_events(2).empty());
}

TEST_P(StoreTest, JobsLifecycleEventsAndQueries) {
  auto s = open();
  for (JobId id = 1; id <= 20; ++id) {
    auto j = make_job(id, id % 2 ? "ann" : "bob", "k" + std::to_string(id));
    j.budget = id <= 10 ? "/lab/a" : "/lab/ab";
    j.reason = "submitted";
    ASSERT_TRUE(s->write({op::InsertJob{j}}).ok());  // with its creation event
  }
  auto j = *s->job(4);
  j.state = "starting";
  j.exit_code = 3;
  ASSERT_TRUE(
      s->write({op::UpdateJob{j}, op::AddEvent{{4, 2, "pending", "starting", "placed"}}}).ok());
  EXPECT_EQ(s->job(4)->state, "starting");
  EXPECT_EQ(s->job(4)->exit_code, 3);
  auto ev = s->job_events(4);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].job, 4u);
  EXPECT_EQ(ev[0].time, 100);
  EXPECT_EQ(ev[0].from, "");
  EXPECT_EQ(ev[0].to, "pending");  // as inserted, though the row is now "starting"
  EXPECT_EQ(ev[0].reason, "submitted");
  EXPECT_EQ(ev[1].to, "starting");
  EXPECT_EQ(s->job(4)->submit_time, 100);  // the update kept the other columns
  EXPECT_EQ(s->job_events(4).size(), 2u);  // and the creation event

  JobQuery q;
  q.states = {"pending"};
  EXPECT_EQ(s->jobs(q).size(), 19u);
  q.owner = "ann";
  EXPECT_EQ(s->jobs(q).size(), 10u);
  JobQuery b;
  b.budget = "/lab/a";  // not /lab/ab
  EXPECT_EQ(s->jobs(b).size(), 10u);
  JobQuery page;
  page.limit = 5;
  page.after = 5;
  auto p = s->jobs(page);
  ASSERT_EQ(p.size(), 5u);
  EXPECT_EQ(p.front().id, 6u);
  page.descending = true;
  page.after = 5;
  p = s->jobs(page);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p.front().id, 4u);
  JobQuery within;
  within.budgets_within = {"/lab/ab"};
  within.owner_or_within = "ann";
  EXPECT_EQ(s->jobs(within).size(), 15u);  // 10 of /lab/ab + 5 of ann's in /lab/a
  EXPECT_EQ(s->active_jobs().size(), 20u);
  EXPECT_EQ(s->count_jobs(), 20);
}

// The database holds token hashes and every job's command and environment: the server's user's
// alone, also when the file was made before with a looser mode.
TEST(SqliteStore, DatabaseFilesArePrivate) {
  TempDir dir;
  const std::string path = dir.file("a.db");
  auto mode = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 07777u;
  };
  {
    auto s = open(path);
    ASSERT_TRUE(s->write({op::PutBudget{{"/lab", 1.0, {}, false, {}, ""}}}).ok());
    EXPECT_EQ(mode(path), 0600u);
    EXPECT_EQ(mode(path + "-wal"), 0600u);
  }
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto again = open(path);
  EXPECT_EQ(mode(path), 0600u);
}

TEST_P(StoreTest, BudgetsAuditNodesTokensLedger) {
  auto s = open();
  ASSERT_TRUE(s->write({op::PutBudget{{"/lab", 2.0, {"ann", "bob"}, false, {}, ""}},
                        op::AddAudit{{0, 10, "admin", "/lab", "share", "", "2", 1}}})
                  .ok());
  ASSERT_TRUE(s->write({op::PutBudget{{"/lab", 3.0, {"ann"}, false, {}, ""}},
                        op::AddAudit{{0, 11, "admin", "/lab", "share", "2", "3", 7}}})
                  .ok());
  auto b = s->budgets();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].share, 3.0);
  EXPECT_EQ(b[0].members, std::vector<std::string>{"ann"});
  EXPECT_TRUE(b[0].owners.empty());
  ASSERT_TRUE(s->write({op::PutBudget{{"/lab", 3.0, {"ann"}, false, {"pat", "quinn"}, ""}}}).ok());
  EXPECT_EQ(s->budgets()[0].owners, (std::vector<std::string>{"pat", "quinn"}));
  ASSERT_TRUE(
      s->write({op::PutBudget{{"/lab", 3.0, {"ann"}, false, {"pat"}, R"({"rate":5})"}}}).ok());
  EXPECT_EQ(s->budgets()[0].submit_limits, R"({"rate":5})");
  // The default minimum runtime: none (-1) until set, then kept, 0 included.
  EXPECT_EQ(s->budgets()[0].default_min_runtime, -1);
  for (std::int64_t d : {3600, 0, -1}) {
    ASSERT_TRUE(
        s->write({op::PutBudget{{"/lab", 3.0, {"ann"}, false, {"pat"}, R"({"rate":5})", d}}}).ok());
    EXPECT_EQ(s->budgets()[0].default_min_runtime, d);
  }
  // Users' own submission limits: set, changed, dropped ("").
  EXPECT_TRUE(s->user_limits().empty());
  ASSERT_TRUE(s->write({op::PutUserLimits{{"ann", R"({"max_waiting":50})"}},
                        op::PutUserLimits{{"bob", R"({"rate":1})"}}})
                  .ok());
  ASSERT_TRUE(s->write({op::PutUserLimits{{"ann", R"({"max_waiting":60})"}}}).ok());
  auto u = s->user_limits();
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].user, "ann");
  EXPECT_EQ(u[0].limits, R"({"max_waiting":60})");
  ASSERT_TRUE(s->write({op::PutUserLimits{{"bob", ""}}}).ok());
  ASSERT_EQ(s->user_limits().size(), 1u);
  // Services: created, replaced by name, removed (a removed one is no longer listed, and its
  // name may be used again).
  EXPECT_TRUE(s->services().empty());
  store::ServiceRecord svc{"chat", "ann", "/lab", R"({"min_replicas":1})", "{}", 100, 100, false};
  ASSERT_TRUE(s->write({op::PutService{svc}}).ok());
  svc.state_json = R"({"desired":2})";
  svc.updated = 130;
  ASSERT_TRUE(s->write({op::PutService{svc}, op::PutService{{"asr", "bob", "/lab"}}}).ok());
  auto services = s->services();
  ASSERT_EQ(services.size(), 2u);
  EXPECT_EQ(services[1].name, "chat");  // by name
  EXPECT_EQ(services[1].owner, "ann");
  EXPECT_EQ(services[1].spec_json, R"({"min_replicas":1})");
  EXPECT_EQ(services[1].state_json, R"({"desired":2})");
  EXPECT_EQ(services[1].created, 100);
  EXPECT_EQ(services[1].updated, 130);
  svc.removed = true;
  ASSERT_TRUE(s->write({op::PutService{svc}}).ok());
  ASSERT_EQ(s->services().size(), 1u);
  EXPECT_EQ(s->services()[0].name, "asr");
  svc.removed = false;
  ASSERT_TRUE(s->write({op::PutService{svc}}).ok());
  EXPECT_EQ(s->services().size(), 2u);
  auto a = s->audit("/lab", 10);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].new_value, "3");  // newest first
  EXPECT_EQ(a[0].actor_token, 7);
  EXPECT_EQ(a[1].actor_token, 1);

  NodeRecord n;
  n.name = "n1";
  n.cluster = "local";
  n.model = "H100";
  ASSERT_TRUE(s->write({op::PutNode{n}}).ok());
  ASSERT_TRUE(s->write({op::TouchNode{"n1", 77}}).ok());
  EXPECT_EQ(s->node("n1")->last_heartbeat, 77);
  EXPECT_EQ(s->nodes().size(), 1u);

  TokenRecord t;
  t.hash = "abc";
  t.role = "user";
  t.subject = "ann";
  ASSERT_TRUE(s->write({op::PutToken{t}}).ok());
  EXPECT_FALSE(s->write({op::PutToken{t}}).ok());
  auto got = s->token_by_hash("abc");
  ASSERT_TRUE(got);
  ASSERT_TRUE(s->write({op::RevokeToken{got->id, 99}}).ok());
  EXPECT_EQ(s->token_by_hash("abc")->revoked, 99);

  ASSERT_TRUE(s->write({op::AddLedger{{0, 1, "ann", "/lab", "local", 100, 200, 8000, true}},
                        op::AddLedger{{0, 2, "bob", "/lab", "local", 300, 400, 1000, false}}})
                  .ok());
  EXPECT_EQ(s->ledger(0, 150).size(), 1u);
  EXPECT_EQ(s->ledger(150, 350).size(), 2u);
  EXPECT_EQ(s->ledger(400, 500).size(), 0u);
  EXPECT_EQ(s->ledger_for_job(1).at(0).milli_seconds(), 800000);
}

// A database written by the first schema (before the agent protocol) opens, migrates in place and
// keeps its rows; the new columns take their defaults.
TEST_P(StoreTest, MigratesAVersionOneDatabase) {
  {
    auto s = open();
    NodeRecord n;
    n.name = "old";
    n.cluster = "c";
    n.model = "H100";
    ASSERT_TRUE(s->write({op::PutNode{n}, op::InsertJob{make_job(1, "ann", "k")}}).ok());
  }
  for (const char* sql : {"DROP TABLE node_health",
                          "DROP TABLE job_telemetry",
                          "ALTER TABLE nodes DROP COLUMN address",
                          "ALTER TABLE nodes DROP COLUMN devices",
                          "ALTER TABLE nodes DROP COLUMN agent",
                          "ALTER TABLE nodes DROP COLUMN timed_out",
                          "ALTER TABLE budgets DROP COLUMN owners",
                          "DROP INDEX jobs_budget_state",
                          "ALTER TABLE jobs DROP COLUMN created_state",
                          "ALTER TABLE jobs DROP COLUMN created_reason",
                          "ALTER TABLE budget_audit DROP COLUMN actor_token",
                          "ALTER TABLE budgets DROP COLUMN submit_limits",
                          "ALTER TABLE jobs DROP COLUMN held_by",
                          "ALTER TABLE jobs DROP COLUMN after_ok",
                          "ALTER TABLE jobs DROP COLUMN after_any",
                          "ALTER TABLE jobs DROP COLUMN array_job",
                          "ALTER TABLE jobs DROP COLUMN array_index",
                          "ALTER TABLE jobs DROP COLUMN array_limit",
                          "ALTER TABLE budgets DROP COLUMN default_min_runtime",
                          "DROP TABLE user_limits",
                          "DROP TABLE services",
                          "INSERT INTO job_events VALUES (1, 100, '', 'pending', 'submitted')",
                          "UPDATE schema_version SET version = 1"}) {
    raw_exec(sql);
  }
  auto s = open();
  EXPECT_EQ(s->schema_version(), sqlite_schema_latest());
  auto n = s->node("old");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->address, "");
  EXPECT_EQ(n->devices_json, "[]");
  EXPECT_EQ(n->agent_json, "{}");
  EXPECT_FALSE(n->timed_out);
  auto j = s->job(1);
  ASSERT_TRUE(j);
  // Migration 8: not held, no dependencies, not in an array.
  EXPECT_EQ(j->held_by, "");
  EXPECT_TRUE(j->after.empty());
  EXPECT_TRUE(j->after_any.empty());
  EXPECT_EQ(j->array_job, 0u);
  EXPECT_EQ(j->array_index, -1);
  // A job from before migration 5 has its creation event as a row, listed once.
  auto ev = s->job_events(1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].reason, "submitted");
}

// What the controller's gate needs survives the store: who holds a job, what it waits for and
// its place in an array.
TEST_P(StoreTest, KeepsHoldDependenciesAndArrayPlace) {
  auto s = open();
  auto j = make_job(7, "ann", "k7");
  j.held_by = "bob";
  j.after = {3, 12345678901ULL};
  j.after_any = {5};
  j.array_job = 6;
  j.array_index = 1;
  j.array_limit = 4;
  ASSERT_TRUE(s->write({op::InsertJob{j}}).ok());
  auto got = s->job(7);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->held_by, "bob");
  EXPECT_EQ(got->after, (std::vector<JobId>{3, 12345678901ULL}));
  EXPECT_EQ(got->after_any, (std::vector<JobId>{5}));
  EXPECT_EQ(got->array_job, 6u);
  EXPECT_EQ(got->array_index, 1);
  EXPECT_EQ(got->array_limit, 4);
  got->held_by.clear();
  got->after.clear();
  ASSERT_TRUE(s->write({op::UpdateJob{*got}}).ok());
  auto updated = s->job(7);
  EXPECT_EQ(updated->held_by, "");
  EXPECT_TRUE(updated->after.empty());
  EXPECT_EQ(updated->after_any, (std::vector<JobId>{5}));
}

TEST_P(StoreTest, NodeAgentFieldsHealthHistoryAndTelemetry) {
  auto s = open();
  NodeRecord n;
  n.name = "n1";
  n.cluster = "c";
  n.model = "H100";
  n.address = "10.0.0.1";
  n.devices_json = R"([{"index":0}])";
  n.agent_json = R"({"version":"0.1.0"})";
  n.timed_out = true;
  ASSERT_TRUE(s->write({op::PutNode{n}}).ok());
  auto got = s->node("n1");
  EXPECT_EQ(got->address, "10.0.0.1");
  EXPECT_EQ(got->devices_json, n.devices_json);
  EXPECT_EQ(got->agent_json, n.agent_json);
  EXPECT_TRUE(got->timed_out);

  ASSERT_TRUE(s->write({op::AddNodeHealth{{"n1", 10, "healthy", false, 8, ""}},
                        op::AddNodeHealth{{"n1", 20, "down", false, 8, "no heartbeat for 45 s"}},
                        op::AddNodeHealth{{"n1", 30, "healthy", true, 8, "back"}}})
                  .ok());
  auto h = s->node_health(30);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1].health, "down");
  EXPECT_EQ(h[1].reason, "no heartbeat for 45 s");
  EXPECT_EQ(s->node_health(31).back().cordoned, true);

  TelemetryRecord d;
  d.job = 5;
  d.run = 1;
  d.budget = "/lab";
  d.samples = 10;
  d.seconds = 10;
  d.gpu_seconds = 20;
  d.used_gpu_seconds = 10;
  d.util_sum = 500;
  d.util_peak = 70;
  d.mem_peak_mib = 100;
  d.mem_total_mib = 1000;
  d.first_time = 100;
  d.last_time = 110;
  ASSERT_TRUE(s->write({op::AddTelemetry{d}}).ok());
  d.util_peak = 60;
  d.mem_peak_mib = 300;
  d.first_time = 110;
  d.last_time = 120;
  ASSERT_TRUE(s->write({op::AddTelemetry{d}}).ok());
  d.run = 2;
  ASSERT_TRUE(s->write({op::AddTelemetry{d}}).ok());
  auto rows = s->telemetry(5);
  ASSERT_EQ(rows.size(), 3u);  // total (run 0), run 1, run 2
  EXPECT_EQ(rows[0].run, 0);
  EXPECT_EQ(rows[0].samples, 30);
  EXPECT_EQ(rows[1].samples, 20);
  EXPECT_DOUBLE_EQ(rows[1].util_mean(), 50);
  EXPECT_DOUBLE_EQ(rows[1].util_peak, 70);
  EXPECT_EQ(rows[1].mem_peak_mib, 300);
  EXPECT_EQ(rows[1].first_time, 100);
  EXPECT_EQ(rows[1].last_time, 120);
  EXPECT_DOUBLE_EQ(rows[0].gpu_seconds, 60);
  EXPECT_EQ(s->telemetry_between(0, 100).size(), 0u);
  EXPECT_EQ(s->telemetry_between(115, 200).size(), 1u);
  EXPECT_EQ(s->telemetry_between(121, 200).size(), 0u);
}

TEST_P(StoreTest, ConcurrentWritersAreAllDurableAndGrouped) {
  constexpr int kThreads = 8, kPerThread = 200;
  {
    auto s = open();
    std::atomic<int> failures{0};
    concurrently(kThreads, kPerThread, [&](int t, int i, JobId id) {
      auto r =
          s->write({op::InsertJob{make_job(id, "u" + std::to_string(t), "k" + std::to_string(i))},
                    op::AddEvent{{id, 1, "", "pending", "submitted"}}});
      if (!r.ok()) ++failures;
      // Acknowledged means readable at once.
      if (!s->job(id)) ++failures;
    });
    EXPECT_EQ(failures.load(), 0);
  }
  auto s = open();
  EXPECT_EQ(s->count_jobs(), kThreads * kPerThread);
}

// One-insert batches (a submission each) commit without a savepoint of their own: racing
// submissions of the same keys land in the same groups, and each key still goes to exactly one,
// without undoing the others in its group.
TEST_P(StoreTest, RacingOneJobWritesOfTheSameKeysEachLandOnce) {
  constexpr int kThreads = 8, kKeys = 300;
  std::vector<std::vector<JobId>> won(kThreads);
  {
    auto s = open();
    std::atomic<int> wrong{0};
    concurrently(kThreads, kKeys, [&](int t, int i, JobId id) {
      auto r = s->write({op::InsertJob{make_job(id, "ann", "k" + std::to_string(i))}});
      if (r.ok()) {
        won[t].push_back(id);
        if (!s->job(id)) ++wrong;  // acknowledged means readable at once
      } else if (r.error().field != "idempotency_key" || s->job(id)) {
        ++wrong;  // refused for another reason, or left a row behind
      }
    });
    EXPECT_EQ(wrong.load(), 0);
  }
  auto s = open();
  EXPECT_EQ(s->count_jobs(), kKeys);
  std::set<std::string> keys;
  for (const auto& ids : won) {
    for (JobId id : ids) {
      auto j = s->job(id);
      ASSERT_TRUE(j) << "acknowledged job " << id << " is gone";
      keys.insert(j->idempotency_key);
    }
  }
  EXPECT_EQ(keys.size(), static_cast<std::size_t>(kKeys));
}

// A full disk (here: a bound on the file) makes SQLite roll the whole transaction back: none of
// the group is committed, and what comes after the failure in the group must not be written on
// its own outside the transaction while its writer is told it failed. Every acknowledged job is
// there after a reopen, and no refused one is.
TEST(SqliteStore, AFullDatabaseAcknowledgesOnlyWhatItCommitted) {
  TempDir dir;
  const std::string path = dir.file("a.db");
  constexpr int kThreads = 8, kPerThread = 150;
  std::vector<std::vector<JobId>> acked(kThreads), refused(kThreads);
  {
    SqliteOptions o;
    o.max_pages = 200;  // 800 KiB: full after a few hundred of these jobs
    auto r = open_sqlite(path, o);
    ASSERT_TRUE(r.ok()) << r.error().message();
    auto s = std::move(r.value());
    concurrently(kThreads, kPerThread, [&](int t, int i, JobId id) {
      JobRecord j = make_job(id, "u" + std::to_string(t), "k" + std::to_string(i));
      j.spec_json = "{\"pad\":\"" + std::string(2000, 'x') + "\"}";
      // Alternately one statement and a batch of two (a savepoint of its own).
      WriteBatch b{op::InsertJob{j}};
      if (i % 2) b.push_back(op::AddEvent{{id, 1, "pending", "pending", "noted"}});
      (s->write(std::move(b)).ok() ? acked : refused)[t].push_back(id);
    });
  }
  std::size_t n_acked = 0, n_refused = 0;
  for (int t = 0; t < kThreads; ++t) n_acked += acked[t].size(), n_refused += refused[t].size();
  ASSERT_GT(n_acked, 0u);
  ASSERT_GT(n_refused, 0u) << "the bound was never reached";
  auto s = open(path);
  for (int t = 0; t < kThreads; ++t) {
    for (JobId id : acked[t]) EXPECT_TRUE(s->job(id)) << "acknowledged job " << id << " is gone";
    for (JobId id : refused[t]) EXPECT_FALSE(s->job(id)) << "refused job " << id << " was written";
  }
  EXPECT_EQ(s->count_jobs(), n_acked);
}

// SQLite checkpoints the WAL into the database past wal_checkpoint_pages, then writes the WAL
// from its start again: its file stays near the bound instead of growing with every commit.
TEST(SqliteStore, TheWalIsCheckpointedPastItsBound) {
  auto wal_bytes = [](int pages) {
    TempDir dir;
    const std::string path = dir.file("a.db");
    SqliteOptions o;
    o.wal_checkpoint_pages = pages;
    auto r = open_sqlite(path, o);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return std::uintmax_t{0};
    auto s = std::move(r.value());
    for (JobId id = 1; id <= 400; ++id) {
      EXPECT_TRUE(s->write({op::InsertJob{make_job(id, "u", "k" + std::to_string(id))}}).ok());
    }
    return std::filesystem::file_size(path + "-wal");
  };
  const auto bounded = wal_bytes(50), unbounded = wal_bytes(1 << 20);
  EXPECT_LT(bounded, 100u * 4120) << "50 pages and one commit's frames";
  EXPECT_GT(unbounded, 4 * bounded);
}

// write_async answers once, from the store's thread, only after the batch is durable; a refused
// batch (a taken key) and a store that is closing answer with the error.
TEST_P(StoreTest, WriteAsyncAnswersOnceWhenDurable) {
  std::vector<std::promise<core::Status>> answers(3);
  std::atomic<int> calls{0};
  {
    auto s = open();
    for (int i = 0; i < 3; ++i) {
      // Jobs 1 and 2 share an idempotency key: the second is refused.
      auto job =
          make_job(static_cast<JobId>(i + 1), "u", i == 0 ? "k0" : "k" + std::to_string(i - 1));
      s->write_async({op::InsertJob{job}}, [&, i](core::Status st) {
        ++calls;
        answers[static_cast<std::size_t>(i)].set_value(std::move(st));
      });
    }
    EXPECT_TRUE(answers[0].get_future().get().ok());
    auto refused = answers[1].get_future().get();
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().field, "idempotency_key");
    EXPECT_TRUE(answers[2].get_future().get().ok());
    EXPECT_TRUE(s->job(1) && s->job(3));
  }
  EXPECT_EQ(calls, 3);
  auto s = open();  // what was acknowledged is there after a reopen
  EXPECT_TRUE(s->job(1) && s->job(3));
  EXPECT_FALSE(s->job(2));
}

// Both backends know the same schema versions.
TEST(PostgresStore, HasTheSameSchemaVersionsAsSqlite) {
  EXPECT_EQ(postgres_schema_latest(), sqlite_schema_latest());
}

TEST(OpenStore, NamesTheFieldOfABadSpec) {
  for (const char* bad : {"mysql://x", "sqlite:", "allot.db", ""}) {
    auto r = open_store(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().field, "store") << bad;
  }
  // Nothing listens on port 1: a clean error, not a crash or a hang.
  auto r = open_store("postgres://allot@127.0.0.1:1/x?connect_timeout=2");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "store");
  EXPECT_NE(r.error().reason.find("cannot connect"), std::string::npos) << r.error().reason;
}

class PostgresOnly : public StoreTest {};
INSTANTIATE_TEST_SUITE_P(Backends, PostgresOnly, ::testing::Values("postgres"),
                         [](const auto& info) { return info.param; });

// PostgreSQL ends every connection of the store (as a restart or a failover would): the next
// write and read connect again instead of failing or crashing, and nothing acknowledged is lost.
TEST_P(PostgresOnly, ConnectionsEndedByTheServerAreMadeAgain) {
  auto s = open();
  ASSERT_TRUE(s->write({op::InsertJob{make_job(1, "ann", "k1")}}).ok());
  ASSERT_TRUE(s->job(1));
  PGconn* admin = PQconnectdb(testing::PostgresCluster::get().admin_uri().c_str());
  ASSERT_EQ(PQstatus(admin), CONNECTION_OK);
  PGresult* r = PQexec(admin,
                       "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname "
                       "LIKE 't%' AND pid <> pg_backend_pid()");
  EXPECT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQresultErrorMessage(r);
  EXPECT_GE(PQntuples(r), 2) << "the writer's and a reader's connections";
  PQclear(r);
  PQfinish(admin);
  auto w = s->write({op::InsertJob{make_job(2, "ann", "k2")}});
  EXPECT_TRUE(w.ok()) << w.error().message();
  EXPECT_TRUE(s->job(1));
  EXPECT_TRUE(s->job(2));
}

// With the server down for longer than reconnect_for, writes fail with the reason (field
// "store") and reads throw, as SQLite's do on an I/O error; once it is back, the same store object
// works again, and nothing refused was written.
TEST_P(PostgresOnly, AServerDownTooLongFailsWritesCleanlyUntilItIsBack) {
  auto& pg = testing::PostgresCluster::get();
  PostgresOptions o;
  o.reconnect_for = std::chrono::milliseconds(300);
  auto r = open_postgres(uri_, o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  auto s = std::move(r.value());
  ASSERT_TRUE(s->write({op::InsertJob{make_job(1, "ann", "k1")}}).ok());
  ASSERT_TRUE(pg.stop()) << pg.error();
  auto w = s->write({op::InsertJob{make_job(2, "ann", "k2")}});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().field, "store");
  std::promise<core::Status> answer;
  s->write_async({op::InsertJob{make_job(3, "ann", "k3")}},
                 [&](core::Status st) { answer.set_value(std::move(st)); });
  EXPECT_FALSE(answer.get_future().get().ok());
  EXPECT_THROW(s->job(1), std::runtime_error);
  ASSERT_TRUE(pg.start()) << pg.error();
  EXPECT_TRUE(s->write({op::InsertJob{make_job(4, "ann", "k4")}}).ok());
  EXPECT_TRUE(s->job(1));
  EXPECT_FALSE(s->job(2)) << "a refused write was committed";
  EXPECT_FALSE(s->job(3));
  EXPECT_TRUE(s->job(4));
}

// A restart shorter than reconnect_for is not seen by callers: a write and a read made while
// PostgreSQL is down wait for it and succeed (the server's controller stops on a failed write).
TEST_P(PostgresOnly, WritesAndReadsRideOutAShortRestart) {
  auto& pg = testing::PostgresCluster::get();
  auto s = open();
  ASSERT_TRUE(s->write({op::InsertJob{make_job(1, "ann", "k1")}}).ok());
  ASSERT_TRUE(pg.stop()) << pg.error();
  std::thread back([&pg] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    pg.start();
  });
  auto w = s->write({op::InsertJob{make_job(2, "ann", "k2")}});
  back.join();
  EXPECT_TRUE(w.ok()) << w.error().message();
  ASSERT_TRUE(pg.stop()) << pg.error();
  std::thread back2([&pg] {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    pg.start();
  });
  std::optional<JobRecord> j;
  EXPECT_NO_THROW(j = s->job(2));
  back2.join();
  EXPECT_TRUE(j);
  EXPECT_EQ(s->count_jobs(), 2);
}

// Connections cut again and again during a submit storm (as by a flapping network or a
// failover): every write is answered, each acknowledged one is there exactly once and no refused
// one was written. The writer runs a group again only when PostgreSQL says it did not commit.
TEST_P(PostgresOnly, ConnectionsCutDuringAStormLoseAndDuplicateNothing) {
  constexpr int kThreads = 8, kPerThread = 150;
  auto s = open();
  std::atomic<bool> storming{true};
  std::thread cutter([&] {
    PGconn* admin = PQconnectdb(testing::PostgresCluster::get().admin_uri().c_str());
    while (storming) {
      PQclear(PQexec(admin,
                     "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname "
                     "LIKE 't%' AND pid <> pg_backend_pid()"));
      std::this_thread::sleep_for(std::chrono::milliseconds(15));
    }
    PQfinish(admin);
  });
  std::vector<std::vector<JobId>> acked(kThreads), refused(kThreads);
  concurrently(kThreads, kPerThread, [&](int t, int i, JobId id) {
    auto r =
        s->write({op::InsertJob{make_job(id, "u" + std::to_string(t), "k" + std::to_string(i))},
                  op::AddEvent{{id, 1, "pending", "pending", "noted"}}});
    (r.ok() ? acked : refused)[t].push_back(id);
  });
  storming = false;
  cutter.join();
  std::size_t n_acked = 0;
  for (int t = 0; t < kThreads; ++t) {
    n_acked += acked[t].size();
    for (JobId id : acked[t]) {
      EXPECT_TRUE(s->job(id)) << "acknowledged job " << id << " is gone";
      EXPECT_EQ(s->job_events(id).size(), 2u) << "job " << id;
    }
    for (JobId id : refused[t]) EXPECT_FALSE(s->job(id)) << "refused job " << id << " was written";
  }
  EXPECT_EQ(n_acked, static_cast<std::size_t>(kThreads * kPerThread)) << "all rode it out";
  EXPECT_EQ(s->count_jobs(), static_cast<std::int64_t>(n_acked));
}

}  // namespace
}  // namespace allot::store
