// End to end on PostgreSQL: a real `allot server --store postgres://...` process (the test's own
// throwaway PostgreSQL, tests/store/postgres_cluster.h) and a real agent with fake GPUs. A submit
// storm runs while the server is killed with SIGKILL and restarted against the same database;
// afterwards every acknowledged job is in the database once and runs to completion.
#include <gtest/gtest.h>

#include "../store/postgres_cluster.h"
#include "cluster.h"
#include "kept_jobs.h"
#include "store/postgres_store.h"
#include "submit_storm.h"

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
  Cluster c({"--store", uri, "--lease-seconds", "3", "--node-timeout-seconds", "20"});
  c.start_server();
  EXPECT_NE(slurp(c.dir() + "/server.log").find("PostgreSQL"), std::string::npos);
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
  EXPECT_EQ(opened.value()->count_jobs(), static_cast<std::int64_t>(acked.size()))
      << "a job that no client was acknowledged for, or one written twice";
  expect_acknowledged_jobs_kept(*opened.value(), acked);
}

}  // namespace
}  // namespace allot::e2e
