// End to end on PostgreSQL: a real `allot server --store postgres://...` process (the test's own
// throwaway PostgreSQL, tests/store/postgres_cluster.h) and a real agent with fake GPUs. A submit
// storm runs while the server is killed with SIGKILL and restarted against the same database;
// afterwards every acknowledged job is in the database once and runs to completion.
#include <gtest/gtest.h>

#include <cstdio>
#include <utility>

#include "../store/postgres_cluster.h"
#include "cli_run.h"
#include "kept_jobs.h"
#include "store/postgres_store.h"
#include "submit_storm.h"
#include "test_cluster.h"

namespace allot::e2e {
namespace {

using store::testing::PostgresCluster;

std::string fresh_postgres() {
  auto& pg = PostgresCluster::get();
  pg.prepare();
  if (!pg.error().empty()) throw std::runtime_error(pg.error());
  return pg.skip_reason().empty() ? pg.fresh_database() : "";
}

TEST(PostgresEndToEnd, KillNineDuringASubmitStormLosesNoAcknowledgedJobAndAllRun) {
  const std::string uri = fresh_postgres();
  if (uri.empty()) GTEST_SKIP() << PostgresCluster::get().skip_reason();
#if defined(__SANITIZE_ADDRESS__)
  const int kRounds = 2;
#else
  const int kRounds = 4;
#endif
  TestCluster c({"--store", uri, "--lease-seconds", "3", "--node-timeout-seconds", "20"});
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 8);

  SubmitStorm storm([&] { return c.port(); }, c.admin(),
                    [&](const std::string& key) {
                      return json{{"budget", "/lab/a"},
                                  {"gpus_per_node", 1},
                                  {"min_runtime", 60},
                                  {"command", c.marked(key, "sleep 1.1")}};
                    },
                    {.clients = 4, .jobs_per_client = 15, .pause = std::chrono::milliseconds(150)});
  std::size_t before_last_kill = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::this_thread::sleep_for(400ms);
    before_last_kill = storm.count();
    c.kill_server(SIGKILL);
    c.start_server();  // the same port, the same database
  }
  EXPECT_LT(before_last_kill, 60u) << "the storm ended before the kills: make it longer";
  ASSERT_TRUE(eventually([&] { return storm.count() == 60; }, 30000ms))
      << "acknowledged " << storm.count() << " of 60";
  storm.stop();
  const auto acked = storm.acked();

  // Every acknowledged job runs to completion on the agent (over a second: a billed segment), its
  // process started at least once.
  for (const auto& [key, id] : acked) {
    ASSERT_TRUE(c.wait_state(id, "succeeded", 60000ms)) << key << " (" << id << ")\n"
                                                        << c.history(id);
    EXPECT_FALSE(lines_of(c.out(key + ".log")).empty()) << key << " never ran";
  }
  // And the database holds each one once, billed.
  c.kill_server(SIGKILL);
  auto opened = store::open_postgres(uri);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  expect_only_acknowledged_jobs(*opened.value(), acked);
}

// The move to production: a server on SQLite with waiting jobs is stopped, `allot store copy`
// moves its state into PostgreSQL, and the server started on PostgreSQL knows the same jobs, the
// same token, and runs them once an agent comes.
TEST(PostgresEndToEnd, AStoreCopiedFromSqliteServesTheSameJobsWhichThenRun) {
  const std::string uri = fresh_postgres();
  if (uri.empty()) GTEST_SKIP() << PostgresCluster::get().skip_reason();
  TestCluster c;
  c.start_server();  // on SQLite: <dir>/allot.db
  c.budget("/lab/a", 1);
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(c.submit({{"budget", "/lab/a"},
                            {"gpus_per_node", 1},
                            {"name", "moved-" + std::to_string(i)},
                            {"command", c.marked("m" + std::to_string(i), "true")}}));
  }
  c.kill_server(SIGTERM);

  const std::string copy = "store copy --from sqlite:" + c.dir() + "/allot.db --to '" + uri + "'";
  auto [rc, out] = run_allot(copy);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("jobs"), std::string::npos) << out;
  EXPECT_NE(out.find("counts checked"), std::string::npos) << out;
  // Twice: the target is no longer empty.
  auto [rc2, out2] = run_allot(copy);
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_NE(out2.find("not empty: table"), std::string::npos) << out2;
  auto [rc3, out3] = run_allot("store copy --from sqlite:" + c.dir() + "/allot.db --to nowhere");
  EXPECT_EQ(rc3, 2) << out3;
  EXPECT_NE(out3.find("--to"), std::string::npos) << out3;

  c.set_server_flags({"--store", uri});
  c.start_server();  // the admin token made on SQLite is valid on PostgreSQL
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto j = c.job(ids[i]);
    EXPECT_EQ(j.value("name", ""), "moved-" + std::to_string(i)) << j.dump();
    EXPECT_EQ(j.value("state", ""), "pending") << j.dump();
  }
  c.start_agent("n1", 8);
  for (auto id : ids) EXPECT_TRUE(c.wait_state(id, "succeeded")) << c.history(id);
  // A new job takes the next id.
  const auto next = c.submit({{"budget", "/lab/a"}, {"gpus_per_node", 1}});
  EXPECT_EQ(next, ids.back() + 1);
  // It was written to PostgreSQL, not to the SQLite file beside.
  auto pg = store::open_postgres(uri);
  ASSERT_TRUE(pg.ok()) << pg.error().message();
  EXPECT_TRUE(pg.value()->job(next));
}

}  // namespace
}  // namespace allot::e2e
