// High availability on PostgreSQL, end to end (docs/store.md, "High availability"): two real
// `allot server --store postgres://...` processes on the test's own PostgreSQL
// (tests/store/postgres_cluster.h), one the leader and one standing by, a real agent given both
// addresses, and a submit storm sent to either server in turn (a standby answers 503 naming the
// leader, and the storm's client tries again). The leader is killed with SIGKILL three times,
// alternately A and B; each time the other one must take over and start a job within 10 s.
// Afterwards: every acknowledged job is in the database once and has run to completion, no job
// ever ran twice at once, and no job's process is left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

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

json health(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(0, 300000);
  c.set_read_timeout(2);
  auto r = c.Get("/api/v1/health");
  if (!r || r->status != 200) return json::object();
  auto j = json::parse(r->body, nullptr, false);
  return j.is_object() ? j : json::object();
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The start times (Unix seconds) of every job's runs, from the marks their commands left.
std::vector<double> starts(const Cluster& c, const std::map<std::string, std::uint64_t>& acked) {
  std::vector<double> out;
  for (const auto& [key, id] : acked) {
    for (const auto& line : lines_of(c.out(key + ".log"))) {
      std::istringstream in(line);
      std::string word, run;
      double t = 0;
      if (in >> word >> run >> t && word == "start") out.push_back(t);
    }
  }
  return out;
}

TEST(HighAvailability, KillingTheLeaderRepeatedlyDuringAStormLosesNothingAndRunsNoJobTwice) {
  const std::string uri = fresh_postgres();
  if (uri.empty()) GTEST_SKIP() << PostgresCluster::get().skip_reason();
  const std::vector<std::string> flags = {
      "--store", uri, "--lease-seconds", "15", "--node-timeout-seconds", "30"};
  TestCluster c(flags);  // server A: the Cluster's own
  c.start_server();
  ASSERT_TRUE(eventually([&] { return health(c.port()).value("role", "") == "leader"; }, 10000ms))
      << health(c.port()).dump();
  c.budget("/lab/a", 1);

  // Server B on the same database: a standby naming A.
  const int port_b = free_port();
  const std::string url_b = "http://127.0.0.1:" + std::to_string(port_b);
  Process b;
  auto start_b = [&] {
    std::vector<std::string> argv = {ALLOT_BIN,         "server", "--data",
                                     c.dir() + "/b.db", "--port", std::to_string(port_b),
                                     "--tick-ms",       "100"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    b.start(argv, c.dir() + "/server-b.log");
    ASSERT_TRUE(eventually([&] { return !health(port_b).empty(); }, 10000ms))
        << slurp(c.dir() + "/server-b.log");
  };
  start_b();
  auto hb = health(port_b);
  EXPECT_EQ(hb.value("role", ""), "standby") << hb.dump();
  EXPECT_EQ(hb.value("leader", ""), c.url()) << hb.dump();
  {
    // Anything else a standby is asked, it refuses with 503, naming the leader.
    httplib::Client cli("127.0.0.1", port_b);
    auto r = cli.Post("/api/v1/jobs", {{"Authorization", "Bearer " + c.admin()}}, "{}",
                      "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503);
    auto j = json::parse(r->body, nullptr, false);
    EXPECT_EQ(j.value("leader", ""), c.url()) << r->body;
    EXPECT_EQ(j["error"].value("field", ""), "leader") << r->body;
  }

  // The agent knows both; so does every client of the storm (each request to the next).
  c.start_agent("n1", 8, {"--server", c.url() + "," + url_b});
  std::atomic<int> turn{0};
  constexpr int kClients = 3, kPerClient = 50;
  SubmitStorm storm([&] { return turn++ % 2 == 0 ? c.port() : port_b; }, c.admin(),
                    [&](const std::string& key) {
                      // flock -n: a second run of the same job while one runs leaves a mark.
                      // Over a second: a billed segment.
                      const std::string o = c.out(key);
                      return json{{"budget", "/lab/a"},
                                  {"gpus_per_node", 1},
                                  {"min_runtime", 60},
                                  {"command", c.marked(key, "flock -n " + o +
                                                                ".lock sleep 1.1 || "
                                                                "echo overlap >> " +
                                                                o + ".twice")}};
                    },
                    {.clients = kClients,
                     .jobs_per_client = kPerClient,
                     .pause = std::chrono::milliseconds(200)});

  // Kill the leader three times: A, then B, then A.
  int leader = c.port(), standby = port_b;
  std::vector<double> failovers;
  std::size_t before_last_kill = 0;
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(1500ms);
    before_last_kill = storm.count();
    const double killed_at = now_seconds();
    if (leader == c.port()) {
      c.kill_server(SIGKILL);
    } else {
      b.signal(SIGKILL);
    }
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(eventually(
        [&] {
          auto h = health(standby);
          return h.value("role", "") == "leader" && h.value("cycles", 0) > 0;
        },
        15000ms))
        << "round " << round << ": no new leader: " << health(standby).dump();
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // A job's process started by the new leader's scheduling, within 10 s of the kill (what
    // the old leader assigned just before it starts within a poll of the agent: 100 ms).
    auto first_start = [&] {
      double first = 1e18;
      for (double s : starts(c, storm.acked())) {
        if (s > killed_at + 0.5) first = std::min(first, s);
      }
      return first;
    };
    ASSERT_TRUE(eventually([&] { return first_start() < killed_at + 10.0; },
                           std::chrono::milliseconds(static_cast<int>((10.0 - took) * 1000))))
        << "round " << round << ": the new leader (after " << took << " s) started no job "
        << "within 10 s of the kill";
    const double first = first_start();
    failovers.push_back(first - killed_at);
    std::printf("round %d: leader after %.2f s, a job started %.2f s after the kill\n", round, took,
                first - killed_at);
    std::fflush(stdout);
    // The killed one comes back, as a standby.
    if (leader == c.port()) {
      c.start_server();
    } else {
      start_b();
    }
    EXPECT_EQ(health(leader).value("role", ""), "standby") << health(leader).dump();
    std::swap(leader, standby);
  }
  for (double f : failovers) EXPECT_LT(f, 10.0);
  EXPECT_LT(before_last_kill, static_cast<std::size_t>(kClients * kPerClient))
      << "the storm ended before the last kill: make it longer";

  ASSERT_TRUE(eventually([&] { return storm.count() == kClients * kPerClient; }, 40000ms))
      << "acknowledged " << storm.count() << " of " << kClients * kPerClient;
  storm.stop();
  const auto acked = storm.acked();

  // Every acknowledged job runs to completion, never twice at once.
  Cluster& api = c;
  if (leader != c.port()) {
    // The Cluster's calls go to A: make A the leader again by stopping B cleanly (it lets the
    // lease go, and A takes it within a poll).
    b.signal(SIGTERM);
    ASSERT_TRUE(
        eventually([&] { return health(c.port()).value("role", "") == "leader"; }, 10000ms));
  }
  for (const auto& [key, id] : acked) {
    ASSERT_TRUE(api.wait_state(id, "succeeded", 60000ms)) << key << " (" << id << ")\n"
                                                          << api.history(id);
    EXPECT_FALSE(lines_of(c.out(key + ".log")).empty()) << key << " never ran";
    EXPECT_FALSE(std::filesystem::exists(c.out(key + ".twice"))) << key << " ran twice at once:\n"
                                                                 << slurp(c.out(key + ".log"));
  }
  // No job's process is left: every pid a job recorded is gone.
  for (const auto& [key, id] : acked) {
    for (const auto& pid : lines_of(c.out(key + ".pid"))) {
      EXPECT_TRUE(eventually([&] { return ::kill(std::stoi(pid), 0) != 0; }, 5000ms))
          << key << ": process " << pid << " outlived its job";
    }
  }
  // The database holds each acknowledged job once, billed.
  c.kill_server(SIGKILL);
  b.signal(SIGKILL);
  auto opened = store::open_postgres(uri);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  expect_only_acknowledged_jobs(*opened.value(), acked);
}

// A leader frozen (SIGSTOP) past its lease is replaced; resumed, it finds itself deposed and exits
// at once, saying so, rather than act as a second leader. The CLI, given both addresses in
// either order, finds the leader: past a dead server, and through a standby that names it.
TEST(HighAvailability, AFrozenLeaderIsReplacedAndExitsWhenResumedAndTheCliFollowsTheLeader) {
  const std::string uri = fresh_postgres();
  if (uri.empty()) GTEST_SKIP() << PostgresCluster::get().skip_reason();
  const std::vector<std::string> flags = {"--store", uri};
  TestCluster c(flags);
  c.start_server();
  ASSERT_TRUE(eventually([&] { return health(c.port()).value("role", "") == "leader"; }, 10000ms));
  c.budget("/lab/a", 1);
  const int port_b = free_port();
  const std::string url_b = "http://127.0.0.1:" + std::to_string(port_b);
  Process b;
  std::vector<std::string> argv = {ALLOT_BIN,         "server", "--data",
                                   c.dir() + "/b.db", "--port", std::to_string(port_b),
                                   "--tick-ms",       "100"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  b.start(argv, c.dir() + "/server-b.log");
  ASSERT_TRUE(eventually([&] { return health(port_b).value("role", "") == "standby"; }, 10000ms));

  const std::string env = "ALLOT_TOKEN=" + c.admin() + " ALLOT_ADDR=";
  const std::string submit = "submit --budget /lab/a --gpus 1 -- true";
  // The standby first in the list: it names the leader, A.
  auto first = run_allot(submit, env + url_b + "," + c.url());
  EXPECT_EQ(first.code, 0) << first.out;

  const pid_t a = c.server_pid();
  ::kill(a, SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] { return health(port_b).value("role", "") == "leader"; }, 10000ms))
      << slurp(c.dir() + "/server-b.log");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 10.0);
  ::kill(a, SIGCONT);
  int st = 0;
  ASSERT_TRUE(eventually([&] { return ::waitpid(a, &st, WNOHANG) == a; }, 5000ms))
      << "the deposed leader is still running";
  const auto log = slurp(c.dir() + "/server.log");
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 3) << log;
  EXPECT_NE(log.find("stopping now"), std::string::npos) << log;

  // A is gone: the CLI goes past it to B.
  auto second = run_allot(submit, env + c.url() + "," + url_b);
  EXPECT_EQ(second.code, 0) << second.out;
  // A restarted stands by, naming B, and the CLI follows it there.
  c.start_server();
  EXPECT_EQ(health(c.port()).value("role", ""), "standby");
  EXPECT_EQ(health(c.port()).value("leader", ""), url_b);
  auto third = run_allot(submit, env + c.url() + "," + url_b);
  EXPECT_EQ(third.code, 0) << third.out;
  auto ls = run_allot("ls", env + c.url() + "," + url_b);
  EXPECT_EQ(ls.code, 0) << ls.out;

  auto opened = store::open_postgres(uri);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  EXPECT_EQ(opened.value()->count_jobs(), 3);
  b.signal(SIGKILL);
}

}  // namespace
}  // namespace allot::e2e
