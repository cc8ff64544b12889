// End to end: a real `allot server` and real `allot agent` processes (fake GPU backends) on
// loopback; jobs are real processes. Each test builds its own cluster in a temporary directory.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <thread>

#include "cli_run.h"
#include "http_filter.h"
#include "proxy.h"
#include "test_cluster.h"

namespace allot::e2e {
namespace {

// Short leases so that partitions play out in seconds: an agent gives its jobs up after 2 s
// without the server; the server declares a node down after 8 s of silence.
const std::vector<std::string> kFastServer = {
    "--lease-seconds", "2", "--node-timeout-seconds", "8", "--stop-grace-seconds", "1"};

std::map<int, std::string> uuids_of(Cluster& c, const std::string& node) {
  std::map<int, std::string> out;
  auto n = c.get("/api/v1/nodes/" + node);
  for (const auto& d : n.body.value("devices", json::array())) {
    out[d.value("index", -1)] = d.value("uuid", "");
  }
  return out;
}

double start_time(const std::string& line) {  // "start <run> <seconds.nanos>"
  auto sp = line.rfind(' ');
  return std::stod(line.substr(sp + 1));
}

TEST(EndToEnd, JobsRunAsProcessesOnTheirGpusAndEndWithTheirExitCode) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 8);
  c.start_agent("n2", 8);

  const auto a = c.submit(
      {{"budget", "/lab/a"},
       {"gpus_per_node", 2},
       {"min_runtime", 60},
       {"command", c.marked("a", "echo $CUDA_VISIBLE_DEVICES > " + c.out("a.env") +
                                     "; echo hello from $ALLOT_JOB_ID; echo oops >&2; exit 3")}});
  const auto b = c.submit({{"budget", "/lab/a"},
                           {"gpus_per_node", 8},
                           {"min_runtime", 60},
                           {"command", c.marked("b", "exit 0")}});
  ASSERT_TRUE(c.wait_state(a, "failed")) << c.history(a);
  ASSERT_TRUE(c.wait_state(b, "succeeded")) << c.history(b);
  auto ja = c.job(a);
  EXPECT_EQ(ja["exit_code"], 3);
  EXPECT_EQ(ja["runs"], 1);

  // The job saw exactly the GPUs it was placed on, by UUID.
  std::vector<std::string> want;
  for (const auto& slot : ja["placement"]) {
    want.push_back(uuids_of(c, slot["node"].get<std::string>()).at(slot["gpu"].get<int>()));
  }
  std::string joined;
  for (const auto& u : want) joined += (joined.empty() ? "" : ",") + u;
  ASSERT_EQ(want.size(), 2u);
  EXPECT_EQ(slurp(c.out("a.env")), joined + "\n");

  // Its output is retrievable through the server.
  EXPECT_TRUE(eventually([&] {
    auto r = c.get("/api/v1/jobs/" + std::to_string(a) + "/logs?stream=stdout");
    return r.status == 200 && r.raw == "hello from " + std::to_string(a) + "\n";
  })) << c.get("/api/v1/jobs/" + std::to_string(a) + "/logs?stream=stdout").raw;
  auto err = c.get("/api/v1/jobs/" + std::to_string(a) + "/logs?stream=stderr");
  EXPECT_EQ(err.raw, "oops\n");

  // A job that cannot start fails, and says why where its owner looks.
  const auto bad = c.submit({{"budget", "/lab/a"}, {"gpus_per_node", 1}, {"min_runtime", 60}});
  const auto missing = c.submit({{"budget", "/lab/a"},
                                 {"gpus_per_node", 1},
                                 {"min_runtime", 60},
                                 {"command", {"/no/such/program"}}});
  ASSERT_TRUE(c.wait_state(bad, "failed")) << c.history(bad);
  ASSERT_TRUE(c.wait_state(missing, "failed")) << c.history(missing);
  EXPECT_EQ(c.job(bad)["exit_code"], 127);
  EXPECT_EQ(c.job(missing)["exit_code"], 127);
  EXPECT_TRUE(eventually([&] {
    return c.get("/api/v1/jobs/" + std::to_string(bad) + "/logs?stream=stderr")
               .raw.find("no command to run") != std::string::npos;
  }));
  EXPECT_TRUE(eventually([&] {
    return c.get("/api/v1/jobs/" + std::to_string(missing) + "/logs?stream=stderr")
               .raw.find("/no/such/program") != std::string::npos;
  })) << c.get("/api/v1/jobs/" + std::to_string(missing) + "/logs?stream=stderr").raw;
}

// MIG (docs/policy.md section 7.3): the instances a fake node registers are what the scheduler
// hands out; a job naming a profile sees exactly an instance of it; one naming a profile no GPU
// is split into waits and says so.
TEST(EndToEnd, AJobNamingAMigProfileRunsOnAnInstanceOfIt) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  c.node_yaml_extra("n1", "mig:\n  1: [1g.10gb, 3g.40gb]\n");
  c.start_agent("n1", 2);
  std::map<std::string, std::string> uuid_of_profile;
  const auto n1 = c.get("/api/v1/nodes/n1");
  for (const auto& d : n1.body["devices"]) {
    for (const auto& m : d.value("mig", json::array())) {
      uuid_of_profile[m["profile"].get<std::string>()] = m["uuid"].get<std::string>();
    }
  }
  ASSERT_EQ(uuid_of_profile.size(), 2u) << n1.raw;
  auto mig_job = [&](const std::string& tag, const std::string& profile) {
    return c.submit({{"budget", "/lab/a"},
                     {"mig", profile},
                     {"min_runtime", 60},
                     {"command", c.marked(tag, "echo $CUDA_VISIBLE_DEVICES > " + c.out(tag))}});
  };
  const auto big = mig_job("big", "3g.40gb");
  const auto small = mig_job("small", "1g.10gb");
  const auto none = mig_job("none", "2g.20gb");
  ASSERT_TRUE(c.wait_state(big, "succeeded")) << c.history(big);
  ASSERT_TRUE(c.wait_state(small, "succeeded")) << c.history(small);
  EXPECT_EQ(slurp(c.out("big")), uuid_of_profile["3g.40gb"] + "\n");
  EXPECT_EQ(slurp(c.out("small")), uuid_of_profile["1g.10gb"] + "\n");
  EXPECT_EQ(c.job(big)["placement"][0]["mig"], "3g.40gb");
  EXPECT_EQ(c.job(none)["state"], "pending");
  EXPECT_TRUE(eventually([&] {
    return c.get("/api/v1/jobs/" + std::to_string(none) + "/why").raw.find("is split into one") !=
           std::string::npos;
  })) << c.get("/api/v1/jobs/" + std::to_string(none) + "/why").raw;
}

// `allot server --placement fgd` (docs/policy.md section 14): a share goes where the recent mix
// of requests fragments least. The mix: a 400-milli job running on n1 and three 500-milli
// requests, cancelled; then a 200-milli job when n2 has joined. Best fit would put it on n1's
// partly used GPU, leaving 400 that no 500 can use; the gradient puts it on n2.
TEST(EndToEnd, FragmentationAwarePlacementPutsAShareWhereTheMixFragmentsLeast) {
  std::vector<std::string> flags = kFastServer;
  for (const char* f : {"--placement", "fgd"}) flags.emplace_back(f);
  TestCluster c(flags);
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 1);
  auto share = [&](const std::string& tag, int milli) {
    return c.submit({{"budget", "/lab/a"},
                     {"gpus_per_node", 1},
                     {"gpu_milli", milli},
                     {"min_runtime", 0},
                     {"command", c.marked(tag, "sleep 300")}});
  };
  const auto first = share("first", 400);
  ASSERT_TRUE(c.wait_state(first, "running")) << c.history(first);
  for (int k = 0; k < 3; ++k) {
    const auto half = share("half" + std::to_string(k), 500);
    auto r = c.post("/api/v1/jobs/" + std::to_string(half) + "/cancel", {{"reason", "test"}});
    ASSERT_EQ(r.status, 200) << r.raw;
    ASSERT_TRUE(c.wait_state(half, "cancelled")) << c.history(half);
  }
  c.start_agent("n2", 1);
  const auto small = share("small", 200);
  ASSERT_TRUE(c.wait_state(small, "running")) << c.history(small);
  EXPECT_EQ(c.job(first)["placement"][0]["node"], "n1");
  EXPECT_EQ(c.job(small)["placement"][0]["node"], "n2") << c.job(small).dump();
  const CliRun bad = run_allot("server --placement tightest");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("--placement"), std::string::npos) << bad.out;
}

// Dynamic MIG (docs/policy.md section 7.5) end to end: a job naming a profile has an idle GPU
// split for it, the fake agent makes the layout (taking its reconfiguration time) and registers
// again, and the job runs on the new instance; then a job that needs every GPU whole has the GPU
// made whole again once the hold is over, and runs on whole GPUs.
TEST(EndToEnd, DynamicMigSplitsAGpuForAProfileAndGivesItBackToTraining) {
  std::vector<std::string> flags = kFastServer;
  for (const char* f : {"--mig-dynamic", "--mig-hold", "2"}) flags.emplace_back(f);
  TestCluster c(flags);
  c.start_server();
  c.budget("/lab/a", 1);
  c.node_yaml_extra("n1", "mig_reconfigure_seconds: 0.3\n");
  c.start_agent("n1", 2);
  const auto inference = c.submit(
      {{"budget", "/lab/a"},
       {"mig", "3g.40gb"},
       {"min_runtime", 60},
       {"command", c.marked("inference", "echo $CUDA_VISIBLE_DEVICES > " + c.out("inference"))}});
  ASSERT_TRUE(c.wait_state(inference, "succeeded")) << c.history(inference);
  EXPECT_EQ(slurp(c.out("inference")).rfind("MIG-", 0), 0u) << slurp(c.out("inference"));
  EXPECT_NE(c.history(inference).find("being split into MIG instances 3g.40gb"), std::string::npos)
      << c.history(inference);
  std::size_t split = 0;
  const json split_node = c.get("/api/v1/nodes/n1").body;
  for (const auto& d : split_node["devices"]) split += !d.value("mig", json::array()).empty();
  EXPECT_EQ(split, 1u) << split_node.dump();

  const auto training = c.submit(
      {{"budget", "/lab/a"},
       {"gpus_per_node", 2},
       {"min_runtime", 60},
       {"command", c.marked("training", "echo $CUDA_VISIBLE_DEVICES > " + c.out("training"))}});
  ASSERT_TRUE(c.wait_state(training, "succeeded")) << c.history(training);
  const std::string gpus = slurp(c.out("training"));
  EXPECT_EQ(gpus.find("MIG-"), std::string::npos) << gpus;
  EXPECT_NE(gpus.find(','), std::string::npos) << gpus;  // two whole GPUs
  const json whole_node = c.get("/api/v1/nodes/n1").body;
  for (const auto& d : whole_node["devices"]) {
    EXPECT_TRUE(d.value("mig", json::array()).empty()) << d.dump();
  }
  const std::string log = slurp(c.agent_log("n1"));
  EXPECT_NE(log.find("MIG layout"), std::string::npos) << log;
}

// A run record damaged in the agent's state directory (a field of another type) is passed over
// with a line in the agent's log: the agent starts and runs jobs (it once ended at start).
TEST(EndToEnd, ADamagedRunRecordDoesNotKeepTheAgentFromStarting) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  std::filesystem::create_directories(c.dir() + "/state-n1/agent/runs");
  std::ofstream(c.dir() + "/state-n1/agent/runs/9.1.json") << R"({"job": "nine", "run": [1]})";
  c.start_agent("n1", 8);
  const auto j = c.submit(
      {{"budget", "/lab/a"}, {"gpus_per_node", 1}, {"min_runtime", 60}, {"command", {"true"}}});
  ASSERT_TRUE(c.wait_state(j, "succeeded")) << c.history(j);
  EXPECT_NE(slurp(c.agent_log("n1")).find("9.1.json cannot be read"), std::string::npos)
      << slurp(c.agent_log("n1"));
}

// A server that refuses a run's log uploads for good (403: an ended or stale run) or is busy
// for a while (503, as a standby or a starting server answers) must not keep the run's exit from
// being reported: once refused, the agent gives the stream up and reports the exit; a busy answer
// is retried and every byte arrives. (A refused upload once left the agent waiting for logs it
// would never ship, and the job stayed running.)
TEST(EndToEnd, ARefusedOrBusyLogUploadStillEndsTheJob) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  std::atomic<int> busy_left{0};
  std::atomic<bool> refuse{true};
  HttpFilter filter(c.port(), [&](const httplib::Request& req) -> std::optional<int> {
    if (req.method != "POST" || req.path.find("/logs") == std::string::npos) return std::nullopt;
    if (refuse) return 403;
    if (busy_left > 0) {
      --busy_left;
      return 503;
    }
    return std::nullopt;
  });
  // (Assignment watches held 1 s, not 25: the filter ends with the test, once what it forwards
  // has been answered.)
  c.start_agent(
      "n1", 8,
      {"--server", "http://127.0.0.1:" + std::to_string(filter.port()), "--watch-seconds", "1"});

  // Refused for good: the job still ends with its exit code; the server has none of its output.
  const auto a = c.submit({{"budget", "/lab/a"},
                           {"gpus_per_node", 1},
                           {"min_runtime", 60},
                           {"command", {"sh", "-c", "echo refused; exit 3"}}});
  ASSERT_TRUE(c.wait_state(a, "failed", 20000ms)) << c.history(a);
  EXPECT_EQ(c.job(a)["exit_code"], 3);
  EXPECT_GT(filter.answered(), 0);
  EXPECT_EQ(c.get("/api/v1/jobs/" + std::to_string(a) + "/logs?stream=stdout").raw.find("refused"),
            std::string::npos);

  // Busy for the next six uploads, then answered: every byte arrives, and the job succeeds.
  busy_left = 6;
  refuse = false;
  const int refused_before = filter.answered();
  const auto b =
      c.submit({{"budget", "/lab/a"},
                {"gpus_per_node", 1},
                {"min_runtime", 60},
                {"command", {"sh", "-c", "for i in 1 2 3; do echo line $i; done; exit 0"}}});
  ASSERT_TRUE(c.wait_state(b, "succeeded", 30000ms)) << c.history(b);
  EXPECT_EQ(filter.answered() - refused_before, 6);
  EXPECT_EQ(c.get("/api/v1/jobs/" + std::to_string(b) + "/logs?stream=stdout").raw,
            "line 1\nline 2\nline 3\n");
}

// An unallocated (minimum runtime 0), resumable job on all 8 GPUs of /lab/a whose first run runs
// `on_term` as its SIGTERM trap and otherwise spins; later runs exit 0 at once.
std::uint64_t submit_victim(TestCluster& c, const std::string& on_term) {
  return c.submit({{"budget", "/lab/a"},
                   {"gpus_per_node", 8},
                   {"min_runtime", 0},
                   {"resumable", true},
                   {"command", c.marked("v", "if [ \"$ALLOT_RUN\" = 1 ]; then trap '" + on_term +
                                                 "' TERM; while true; do sleep 0.05; done; fi; "
                                                 "exit 0")}});
}

// An allocated job on the same 8 GPUs, from /lab/b, that notes (in w.overlap) whether the
// victim's first run is still alive when it starts.
std::uint64_t submit_winner(TestCluster& c, const std::string& then = "exit 0") {
  return c.submit({{"budget", "/lab/b"},
                   {"gpus_per_node", 8},
                   {"min_runtime", 60},
                   {"command", c.marked("w", "if kill -0 $(head -1 " + c.out("v.pid") +
                                                 "); then echo shared >> " + c.out("w.overlap") +
                                                 "; fi; " + then)}});
}

// The agent watches its assignments (agent/watcher.h): a job starts as soon as the cycle that
// places it is published, not at the agent's next poll. The agent here polls every 10 s, so three
// jobs in a row each starting within a second of its submit could not come from polling (about a
// 1-in-1,000 chance).
TEST(EndToEnd, AWatchingAgentStartsAJobWithinASecondOfItsSubmit) {
  TestCluster c({"--tick-ms", "1000"});
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 8, {"--poll-ms", "10000"});
  std::this_thread::sleep_for(std::chrono::seconds(1));  // its first poll done, its watch held
  for (int i = 0; i < 3; ++i) {
    const std::string mark = c.out("w" + std::to_string(i));
    const double sent =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    c.submit({{"budget", "/lab/a"},
              {"gpus_per_node", 1},
              {"min_runtime", 60},
              {"command",
               {"/bin/sh", "-c",
                "date +%s.%N > " + mark + ".tmp; mv " + mark + ".tmp " + mark + "; sleep 30"}}});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (!std::filesystem::exists(mark) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(std::filesystem::exists(mark)) << "job " << i << " never started";
    EXPECT_LT(std::stod(slurp(mark)) - sent, 1.0) << "job " << i;
  }
}

// The victim ran twice, the winner once, and the winner started only after the victim's first run
// was gone (it saw no live process of it).
void expect_winner_after_victim(TestCluster& c) {
  EXPECT_FALSE(std::filesystem::exists(c.out("w.overlap")))
      << "the winner started while the victim still held the GPUs";
  const auto vs = lines_of(c.out("v.log"));
  const auto ws = lines_of(c.out("w.log"));
  ASSERT_EQ(vs.size(), 2u);
  ASSERT_EQ(ws.size(), 1u);
  EXPECT_LT(start_time(vs[0]), start_time(ws[0]));
}

TEST(EndToEnd, AMoreDeservingJobPreemptsWithSigtermThenSigkillAndTheVictimRequeues) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  c.budget("/lab/b", 1);
  c.start_agent("n1", 8);

  // Its first run ignores SIGTERM.
  const auto victim = submit_victim(c, "echo term >> " + c.out("v.term"));
  ASSERT_TRUE(c.wait_state(victim, "running")) << c.history(victim);
  const auto winner = submit_winner(c, "sleep 1; exit 0");
  ASSERT_TRUE(c.wait_state(winner, "succeeded", 30000ms)) << c.history(winner);
  ASSERT_TRUE(c.wait_state(victim, "succeeded", 30000ms)) << c.history(victim);

  EXPECT_EQ(slurp(c.out("v.term")), "term\n") << "the victim saw SIGTERM once";
  auto v = c.job(victim);
  EXPECT_EQ(v["runs"], 2);
  const std::string h = c.history(victim);
  EXPECT_NE(h.find("->preempting"), std::string::npos) << h;
  EXPECT_NE(h.find("preempting->requeued"), std::string::npos) << h;
  // It ignored SIGTERM, so the agent killed it after the grace period.
  EXPECT_NE(h.find("killed by signal 9"), std::string::npos) << h;
  expect_winner_after_victim(c);
  // The victim's second run came after the winner.
  const auto vs = lines_of(c.out("v.log"));
  ASSERT_EQ(vs.size(), 2u);
  EXPECT_LT(start_time(lines_of(c.out("w.log"))[0]), start_time(vs[1]));
}

// The server dies while a victim spends its grace period. The restarted server carries the stop
// through: the victim keeps its SIGTERM and grace (no SIGKILL from an agent that lost track), and
// the winner starts only once the victim's processes are gone.
TEST(EndToEnd, AServerRestartMidPreemptionKeepsTheGraceAndNeverSharesAGpu) {
  TestCluster c(
      {"--lease-seconds", "10", "--node-timeout-seconds", "20", "--stop-grace-seconds", "3"});
  c.start_server();
  c.budget("/lab/a", 1);
  c.budget("/lab/b", 1);
  c.start_agent("n1", 8);
  // On SIGTERM its first run checkpoints for 1.5 s, then exits.
  const auto victim = submit_victim(c, "sleep 1.5; echo saved >> " + c.out("v.term") + "; exit 0");
  ASSERT_TRUE(c.wait_state(victim, "running")) << c.history(victim);
  const auto winner = submit_winner(c);
  ASSERT_TRUE(c.wait_state(victim, "preempting")) << c.history(victim);
  c.kill_server(SIGKILL);
  std::this_thread::sleep_for(200ms);
  c.start_server();
  ASSERT_TRUE(c.wait_state(winner, "succeeded", 30000ms)) << c.history(winner);
  ASSERT_TRUE(c.wait_state(victim, "succeeded", 30000ms)) << c.history(victim);
  EXPECT_NE(slurp(c.out("v.term")).find("saved"), std::string::npos)
      << "the victim's checkpoint was cut short";
  expect_winner_after_victim(c);
}

TEST(EndToEnd, ACancelledJobGetsSigtermAndItsGpusWaitUntilItIsGone) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 8);
  const auto cancelled =
      c.submit({{"budget", "/lab/a"},
                {"gpus_per_node", 8},
                {"min_runtime", 60},
                {"command", c.marked("c", "trap 'sleep 0.2; echo term > " + c.out("c.term") +
                                              "; exit 0' TERM; sleep 600 & wait")}});
  ASSERT_TRUE(c.wait_state(cancelled, "running")) << c.history(cancelled);
  const auto next = c.submit({{"budget", "/lab/a"},
                              {"gpus_per_node", 8},
                              {"min_runtime", 60},
                              {"command", c.marked("n", "if kill -0 $(head -1 " + c.out("c.pid") +
                                                            "); then echo shared >> " +
                                                            c.out("n.overlap") + "; fi; exit 0")}});
  auto r = c.post("/api/v1/jobs/" + std::to_string(cancelled) + "/cancel", {{"reason", "test"}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["state"], "cancelled");
  ASSERT_TRUE(c.wait_state(next, "succeeded")) << c.history(next);
  EXPECT_EQ(slurp(c.out("c.term")), "term\n") << "the cancelled job saw SIGTERM";
  EXPECT_FALSE(std::filesystem::exists(c.out("n.overlap")))
      << "the next job started while the cancelled one still held the GPUs";
}

TEST(EndToEnd, AnUnhealthyNodeDrainsAsMinimumRuntimesExpire) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 8, {"--heartbeat-ms", "200"});
  c.start_agent("n2", 8, {"--heartbeat-ms", "200"});
  const auto j = c.submit({{"budget", "/lab/a"},
                           {"gpus_per_node", 8},
                           {"min_runtime", 4},
                           {"resumable", true},
                           {"command", c.marked("d", "sleep 600")}});
  ASSERT_TRUE(c.wait_state(j, "running")) << c.history(j);
  const std::string first = c.job(j)["placement"][0]["node"];
  const std::string other = first == "n1" ? "n2" : "n1";
  // An uncorrected ECC error climbs on GPU 5 of the node the job runs on.
  std::ofstream(c.control_dir(first) + "/gpu5.ecc_uncorrected") << "3\n";
  ASSERT_TRUE(eventually([&] {
    return c.get("/api/v1/nodes/" + first).body.value("health", "") == "unhealthy";
  })) << c.get("/api/v1/nodes/" + first).raw;
  EXPECT_NE(c.get("/api/v1/nodes/" + first).body.value("health_reason", "").find("5"),
            std::string::npos);
  // The job keeps its minimum runtime, then is drained and requeued onto the healthy node.
  ASSERT_TRUE(eventually([&] {
    auto x = c.job(j);
    return x.value("runs", 0) == 2 && x.value("state", "") == "running";
  })) << c.history(j);
  auto x = c.job(j);
  EXPECT_EQ(x["placement"][0]["node"], other);
  const auto starts = lines_of(c.out("d.log"));
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_GE(start_time(starts[1]) - start_time(starts[0]), 3.0) << "drained before its contract";
  EXPECT_NE(c.history(j).find("drain"), std::string::npos) << c.history(j);
}

TEST(EndToEnd, AnAgentKilledMidJobIsRestartedAndReconciles) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 8);
  // One job outlives the agent's absence; the other ends while the agent is away.
  const auto longer = c.submit({{"budget", "/lab/a"},
                                {"gpus_per_node", 4},
                                {"min_runtime", 60},
                                {"command", c.marked("l", "sleep 3; exit 0")}});
  const auto shorter = c.submit({{"budget", "/lab/a"},
                                 {"gpus_per_node", 4},
                                 {"min_runtime", 60},
                                 {"command", c.marked("s", "sleep 0.5; exit 4")}});
  ASSERT_TRUE(c.wait_state(longer, "running")) << c.history(longer);
  ASSERT_TRUE(c.wait_state(shorter, "running")) << c.history(shorter);
  c.kill_agent("n1");
  std::this_thread::sleep_for(1000ms);  // within the lease: the jobs keep running
  c.start_agent("n1", 8);
  ASSERT_TRUE(c.wait_state(shorter, "failed")) << c.history(shorter);
  EXPECT_EQ(c.job(shorter)["exit_code"], 4);
  ASSERT_TRUE(c.wait_state(longer, "succeeded")) << c.history(longer);
  EXPECT_EQ(c.job(longer)["runs"], 1);
  EXPECT_EQ(lines_of(c.out("l.log")).size(), 1u) << "started once";
  EXPECT_EQ(lines_of(c.out("s.log")).size(), 1u) << "started once";
}

TEST(EndToEnd, AServerKilledAndRestartedRunsNothingTwice) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 8);
  c.start_agent("n2", 8);
  std::vector<std::uint64_t> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(c.submit({{"budget", "/lab/a"},
                            {"gpus_per_node", 8},
                            {"min_runtime", 60},
                            {"command", c.marked("j" + std::to_string(i), "sleep 2; exit 0")}}));
  }
  ASSERT_TRUE(eventually([&] {
    int running = 0;
    for (auto id : ids) running += c.state(id) == "running";
    return running == 2;
  }));
  c.kill_server(SIGKILL);
  std::this_thread::sleep_for(700ms);
  c.start_server();
  for (auto id : ids) ASSERT_TRUE(c.wait_state(id, "succeeded", 40000ms)) << c.history(id);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(lines_of(c.out("j" + std::to_string(i) + ".log")).size(), 1u)
        << "job " << ids[i] << " started more than once:\n"
        << c.history(ids[i]);
    EXPECT_EQ(c.job(ids[i])["runs"], 1);
  }
}

TEST(EndToEnd, APartitionedAgentGivesItsJobUpBeforeTheServerMovesIt) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  Proxy proxy(std::stoi(c.url().substr(c.url().rfind(':') + 1)));
  c.start_agent("n1", 8, {"--server", "http://127.0.0.1:" + std::to_string(proxy.port())});
  const auto j = c.submit(
      {{"budget", "/lab/a"},
       {"gpus_per_node", 8},
       {"min_runtime", 60},
       {"resumable", true},
       {"command", c.marked("p", "trap 'echo \"end $ALLOT_RUN $(date +%s.%N)\" >> " +
                                     c.out("p.log") + "; exit 0' TERM; sleep 600 & wait")}});
  ASSERT_TRUE(c.wait_state(j, "running")) << c.history(j);
  c.start_agent("n2", 8);
  proxy.cut();  // n1 can no longer reach the server; n1 and its job stay alive
  ASSERT_TRUE(eventually([&] { return c.job(j).value("runs", 0) == 2; }, 30000ms)) << c.history(j);
  ASSERT_TRUE(c.wait_state(j, "running")) << c.history(j);
  EXPECT_EQ(c.job(j)["placement"][0]["node"], "n2");
  EXPECT_EQ(c.get("/api/v1/nodes/n1").body.value("health", ""), "down");
  // The first run ended (on its lease) before the second began. (A shell may run its TERM trap
  // twice: the agent signals the process and its group.)
  auto marks = lines_of(c.out("p.log"));
  marks.erase(std::unique(marks.begin(), marks.end(),
                          [](const std::string& x, const std::string& y) {
                            return x.rfind("end 1 ", 0) == 0 && y.rfind("end 1 ", 0) == 0;
                          }),
              marks.end());
  ASSERT_GE(marks.size(), 3u) << slurp(c.out("p.log"));
  EXPECT_EQ(marks[0].rfind("start 1 ", 0), 0u) << marks[0];
  EXPECT_EQ(marks[1].rfind("end 1 ", 0), 0u) << marks[1];
  EXPECT_EQ(marks[2].rfind("start 2 ", 0), 0u) << marks[2];
  EXPECT_LT(start_time(marks[1]), start_time(marks[2]));
  // The partition heals: n1 comes back healthy and runs nothing.
  proxy.restore();
  ASSERT_TRUE(eventually([&] {
    return c.get("/api/v1/nodes/n1").body.value("health", "") == "healthy";
  })) << c.get("/api/v1/nodes/n1").raw;
  EXPECT_EQ(c.state(j), "running");
  EXPECT_EQ(c.job(j)["runs"], 2);
}

TEST(EndToEnd, AGangJobRunsOnEveryNodeWithItsRankAndRendezvous) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 8);
  c.start_agent("n2", 8);
  const auto g = c.submit(
      {{"budget", "/lab/a"},
       {"nodes", 2},
       {"gpus_per_node", 8},
       {"min_runtime", 60},
       {"command", c.marked("g",
                            "echo \"$ALLOT_NODE $ALLOT_NUM_NODES $ALLOT_NODES $MASTER_ADDR "
                            "$MASTER_PORT $WORLD_SIZE\" > " +
                                c.out("g.") + "$ALLOT_NODE_RANK; exit 0")}});
  ASSERT_TRUE(c.wait_state(g, "succeeded")) << c.history(g);
  auto j = c.job(g);
  std::vector<std::string> ranks;  // nodes in rank order: the order of the placement
  for (const auto& slot : j["placement"]) {
    const std::string n = slot["node"];
    if (std::find(ranks.begin(), ranks.end(), n) == ranks.end()) ranks.push_back(n);
  }
  ASSERT_EQ(ranks.size(), 2u);
  const std::string port = std::to_string(20000 + g % 10000);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(slurp(c.out("g." + std::to_string(r))),
              ranks[r] + " 2 " + ranks[0] + "," + ranks[1] + " " + ranks[0] + " " + port + " 16\n");
  }

  // A gang fails as soon as one rank fails; the other rank's process is stopped.
  const auto f = c.submit(
      {{"budget", "/lab/a"},
       {"nodes", 2},
       {"gpus_per_node", 8},
       {"min_runtime", 60},
       {"command",
        c.marked("f", "if [ \"$ALLOT_NODE_RANK\" = 1 ]; then sleep 0.3; exit 5; fi; sleep 600")}});
  ASSERT_TRUE(c.wait_state(f, "failed")) << c.history(f);
  EXPECT_EQ(c.job(f)["exit_code"], 5);
  const auto pids = lines_of(c.out("f.pid"));
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_TRUE(eventually([&] {
    for (const auto& p : pids) {
      if (::kill(std::stoi(p), 0) == 0) return false;
    }
    return true;
  })) << "a rank of the failed gang is still running";
}

// A server may give a lease shorter than the agent's --heartbeat-ms (here 2 s against 5 s).
// While its watch is held and nothing else happens, heartbeats alone keep the lease: the agent
// sends at least three per lease, so a quiet job outlives many leases.
TEST(EndToEnd, AQuietJobOutlivesLeasesShorterThanTheHeartbeatPeriod) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 8);
  const auto q = c.submit({{"budget", "/lab/a"},
                           {"gpus_per_node", 8},
                           {"min_runtime", 60},
                           {"command", c.marked("q", "sleep 6; exit 0")}});
  ASSERT_TRUE(c.wait_state(q, "succeeded", 30000ms)) << c.history(q);
  EXPECT_EQ(c.job(q)["runs"], 1);
  EXPECT_EQ(slurp(c.agent_log("n1")).find("no contact with the server"), std::string::npos)
      << slurp(c.agent_log("n1"));
}

// The server dies while a gang runs on two nodes. Restarted, it no longer knows which nodes
// started their part; each agent says so again, and the gang ends as it would have: once per
// rank, one run.
TEST(EndToEnd, AServerRestartedUnderARunningGangLearnsItsNodesStartedAndRunsNothingTwice) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 8);
  c.start_agent("n2", 8);
  const auto g = c.submit({{"budget", "/lab/a"},
                           {"nodes", 2},
                           {"gpus_per_node", 8},
                           {"min_runtime", 60},
                           {"command", c.marked("rg", "echo $ALLOT_NODE >> " + c.out("rg.") +
                                                          "$ALLOT_NODE_RANK; sleep 4; exit 0")}});
  ASSERT_TRUE(eventually([&] {
    return std::filesystem::exists(c.out("rg.0")) && std::filesystem::exists(c.out("rg.1"));
  })) << c.history(g);
  ASSERT_TRUE(eventually([&] { return c.state(g) == "running"; })) << c.history(g);
  c.kill_server(SIGKILL);
  std::this_thread::sleep_for(700ms);
  c.start_server();
  ASSERT_TRUE(c.wait_state(g, "succeeded", 40000ms)) << c.history(g);
  EXPECT_EQ(c.job(g)["runs"], 1);
  for (const char* rank : {"rg.0", "rg.1"}) {
    EXPECT_EQ(lines_of(c.out(rank)).size(), 1u) << rank << " ran more than once";
  }
  // (Each node tells the restarted server that its part started: by saying so again when its
  // assignment says "starting", or, when its first "started" report was in flight as the server
  // died, by sending that report again. Which one depends on timing; a node that told it neither
  // way would have reported its part lost and the gang would have run twice, as checked above.)
}

TEST(EndToEnd, TelemetryReachesTheServerPerJob) {
  TestCluster c(kFastServer);
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 2, {"--telemetry-ms", "1000"});
  for (int g = 0; g < 2; ++g) {
    std::ofstream(c.control_dir("n1") + "/gpu" + std::to_string(g) + ".util_pct") << "7\n";
    std::ofstream(c.control_dir("n1") + "/gpu" + std::to_string(g) + ".mem_used_mib") << "5000\n";
  }
  const auto j = c.submit({{"budget", "/lab/a"},
                           {"gpus_per_node", 2},
                           {"min_runtime", 60},
                           {"command", c.marked("t", "sleep 600")}});
  ASSERT_TRUE(c.wait_state(j, "running")) << c.history(j);
  json t;
  ASSERT_TRUE(eventually([&] {
    t = c.get("/api/v1/jobs/" + std::to_string(j) + "/telemetry").body;
    if (!t.is_object() || !t["current"].is_object()) return false;
    t = t["current"];
    return t.value("samples", 0) >= 2;
  })) << t.dump();
  EXPECT_NEAR(t.value("gpu_util_mean", -1.0), 7.0, 0.5) << t.dump();
  EXPECT_EQ(t.value("mem_used_peak_mib", 0), 10000) << t.dump();
  auto n = c.get("/api/v1/nodes/n1").body;
  EXPECT_FALSE(n.value("telemetry", json()).is_null()) << n.dump();
}

}  // namespace
}  // namespace allot::e2e
