// `allot store copy`'s core (store/store_copy.h): a SQLite store with every kind of record is
// copied into a fresh PostgreSQL database, and the PostgreSQL store then reads back the same
// records, ids and order; new ids continue past the copied ones; a non-empty target is refused,
// naming the table, unless forced.
#include "store/store_copy.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "postgres_cluster.h"
#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace allot::store {
namespace {

class StoreCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& pg = testing::PostgresCluster::get();
    pg.prepare();
    if (!pg.skip_reason().empty()) GTEST_SKIP() << pg.skip_reason();
    ASSERT_EQ(pg.error(), "");
    uri_ = pg.fresh_database();
    ASSERT_NE(uri_, "") << pg.error();
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() /
           ("allot-copy-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "allot.db").string();
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // A SQLite store with some of everything (two of most, so that order shows).
  void fill_sqlite() {
    auto s = open_sqlite(path_);
    ASSERT_TRUE(s.ok());
    auto& st = *s.value();
    for (JobId id : {JobId{7}, JobId{3}}) {
      JobRecord j;
      j.id = id;
      j.owner = "ann";
      j.idempotency_key = "k" + std::to_string(id);
      j.name = "train \"big\" \xc3\xa9";  // quotes and UTF-8 survive
      j.budget = "/lab/nlp";
      j.spec_json = R"({"gpus_per_node":2})";
      j.state = "pending";
      j.reason = "submitted";
      j.submit_time = 100 + static_cast<Time>(id);
      j.updated_at = j.submit_time;
      j.after = {1, 2};
      j.array_index = static_cast<int>(id);
      ASSERT_TRUE(st.write({op::InsertJob{j}}).ok());
      j.state = "succeeded";
      j.exit_code = 0;
      j.milli = 2000;
      j.allocated = true;
      ASSERT_TRUE(st.write({op::UpdateJob{j}, op::AddEvent{{id, 200, "pending", "succeeded", "x"}},
                            op::AddLedger{{0, id, "ann", "/lab/nlp", "c1", 150, 200, 2000, true}}})
                      .ok());
    }
    ASSERT_TRUE(st.write({op::PutBudget{{"/lab", 2.5, {"ann"}, false, {"bob"}, ""}},
                          op::PutBudget{{"/lab/nlp", 0.1234567890123456789, {}, false, {}, "{}"}},
                          op::AddAudit{{0, 10, "bob", "/lab", "share", "1", "2.5", 1}},
                          op::AddAudit{{0, 11, "bob", "/lab/nlp", "members", "", "ann", 1}}})
                    .ok());
    NodeRecord a, b;
    a.name = "n2";
    b.name = "n1";
    b.devices_json = R"([{"index":0}])";
    ASSERT_TRUE(st.write({op::PutNode{a}, op::PutNode{b},
                          op::AddNodeHealth{{"n2", 5, "down", false, 8, "silent"}},
                          op::AddNodeHealth{{"n1", 6, "healthy", true, 8, ""}}})
                    .ok());
    ASSERT_TRUE(st.write({op::PutToken{{0, "h1", "admin", "admin", "admin", "", 1, 0}},
                          op::PutToken{{0, "h2", "agent", "agent", "agent-n1", "n1", 2, 0}}})
                    .ok());
    ASSERT_TRUE(st.write({op::RevokeToken{1, 9}}).ok());
    TelemetryRecord t;
    t.job = 7;
    t.run = 1;
    t.budget = "/lab/nlp";
    t.samples = 3;
    t.util_sum = 1.0 / 3.0;
    t.first_time = 150;
    t.last_time = 160;
    ASSERT_TRUE(st.write({op::AddTelemetry{t}}).ok());
  }

  std::filesystem::path dir_;
  std::string path_, uri_;
};

template <typename T>
std::string as_text(const std::vector<T>& rows, std::string (*f)(const T&)) {
  std::string out;
  for (const auto& r : rows) out += f(r) + "\n";
  return out;
}
std::string job_text(const JobRecord& j) {
  return std::to_string(j.id) + j.owner + j.idempotency_key + j.name + j.budget + j.spec_json +
         j.state + j.reason + std::to_string(j.submit_time) + std::to_string(j.milli) +
         std::to_string(j.allocated) + std::to_string(j.exit_code.value_or(-9)) + id_list(j.after) +
         std::to_string(j.array_index);
}

TEST_F(StoreCopy, EveryRecordArrivesWithItsIdsAndOrder) {
  fill_sqlite();
  auto report = copy_sqlite_to_postgres(path_, uri_);
  ASSERT_TRUE(report.ok()) << report.error().message();
  std::map<std::string, std::int64_t> rows(report.value().tables.begin(),
                                           report.value().tables.end());
  EXPECT_EQ(rows["jobs"], 2);
  EXPECT_EQ(rows["tokens"], 2);
  EXPECT_EQ(rows["job_telemetry"], 2);  // the run and the whole job
  EXPECT_EQ(report.value().schema_version, sqlite_schema_latest());

  auto src = open_sqlite(path_);
  auto dst = open_postgres(uri_);
  ASSERT_TRUE(src.ok() && dst.ok());
  const Store& a = *src.value();
  const Store& b = *dst.value();
  JobQuery all;
  all.limit = 100;
  EXPECT_EQ(as_text(a.jobs(all), job_text), as_text(b.jobs(all), job_text));
  for (JobId id : {JobId{3}, JobId{7}}) {
    auto ea = a.job_events(id), eb = b.job_events(id);
    ASSERT_EQ(ea.size(), eb.size()) << id;
    ASSERT_EQ(ea.size(), 2u);
    for (std::size_t i = 0; i < ea.size(); ++i) {
      EXPECT_EQ(ea[i].from + ea[i].to + ea[i].reason + std::to_string(ea[i].time),
                eb[i].from + eb[i].to + eb[i].reason + std::to_string(eb[i].time));
    }
  }
  ASSERT_EQ(b.budgets().size(), 2u);
  EXPECT_EQ(b.budgets()[1].share, a.budgets()[1].share);  // every bit of the double
  EXPECT_EQ(b.budgets()[0].owners, std::vector<std::string>{"bob"});
  ASSERT_EQ(b.audit("", 10).size(), 2u);
  EXPECT_EQ(b.audit("", 10)[0].id, a.audit("", 10)[0].id);
  ASSERT_EQ(b.nodes().size(), 2u);
  EXPECT_EQ(b.nodes()[0].name, "n2");  // the order they were put in
  EXPECT_EQ(b.nodes()[1].devices_json, R"([{"index":0}])");
  ASSERT_EQ(b.node_health(100).size(), 2u);
  EXPECT_EQ(b.node_health(100)[0].reason, "silent");
  ASSERT_EQ(b.tokens().size(), 2u);
  EXPECT_EQ(b.token_by_hash("h1")->revoked, 9);
  EXPECT_EQ(b.token_by_hash("h2")->id, a.token_by_hash("h2")->id);
  EXPECT_EQ(b.ledger(0, 1000).size(), 2u);
  EXPECT_EQ(b.ledger_for_job(7).at(0).id, a.ledger_for_job(7).at(0).id);
  ASSERT_EQ(b.telemetry(7).size(), 2u);
  EXPECT_EQ(b.telemetry(7)[1].util_sum, 1.0 / 3.0);

  // New rows take ids past the copied ones.
  ASSERT_TRUE(dst.value()
                  ->write({op::PutToken{{0, "h3", "t", "user", "ann", "", 3, 0}},
                           op::AddLedger{{0, 7, "ann", "/lab/nlp", "c1", 300, 400, 1000, true}}})
                  .ok());
  EXPECT_EQ(b.token_by_hash("h3")->id, 3);
  EXPECT_EQ(b.ledger_for_job(7).back().id, 3);
}

TEST_F(StoreCopy, ANonEmptyTargetIsRefusedNamingTheTableUnlessForced) {
  fill_sqlite();
  ASSERT_TRUE(copy_sqlite_to_postgres(path_, uri_).ok());
  auto again = copy_sqlite_to_postgres(path_, uri_);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().field, "to");
  EXPECT_NE(again.error().reason.find("table budget_audit holds 2 rows"), std::string::npos)
      << again.error().reason;
  CopyOptions force;
  force.force = true;
  auto forced = copy_sqlite_to_postgres(path_, uri_, force);
  ASSERT_TRUE(forced.ok()) << forced.error().message();
  auto dst = open_postgres(uri_);
  ASSERT_TRUE(dst.ok());
  EXPECT_EQ(dst.value()->count_jobs(), 2);  // replaced, not doubled
  EXPECT_EQ(dst.value()->tokens().size(), 2u);
}

TEST_F(StoreCopy, BadSourcesAndTargetsAreNamed) {
  auto missing = copy_sqlite_to_postgres((dir_ / "none.db").string(), uri_);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().field, "from");
  std::ofstream(dir_ / "junk.db") << "not a database, not at all, no header here at all....";
  auto junk = copy_sqlite_to_postgres((dir_ / "junk.db").string(), uri_);
  ASSERT_FALSE(junk.ok());
  EXPECT_EQ(junk.error().field, "from");
  fill_sqlite();
  auto unreachable =
      copy_sqlite_to_postgres(path_, "postgresql://nobody@/none?host=/nonexistent-dir");
  ASSERT_FALSE(unreachable.ok());
  EXPECT_EQ(unreachable.error().field, "to");
}

}  // namespace
}  // namespace allot::store
