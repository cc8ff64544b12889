// End to end: an inference service on a real server and agent (fake GPUs whose memory the test
// sets through the control directory). Created with the CLI, its one protected replica runs; as
// its GPUs' memory fills the autoscaler adds elastic replicas up to the maximum; a funded job of
// another budget then preempts an elastic replica but never the protected one; as the memory
// empties the service scales back in to its minimum. `allot serve show` explains each decision.
// A second test: a replica's readiness command, run by the agent, fails until a file appears;
// `allot serve show` and the API say not ready, then ready, and again after a server restart.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "cli_run.h"
#include "test_cluster.h"

namespace allot::e2e {
namespace {

CliRun cli(const Cluster& c, const std::string& args) {
  return run_allot(args, "ALLOT_ADDR=" + c.url() + " ALLOT_TOKEN=" + c.admin());
}

TEST(ServiceEndToEnd, ScalesOutAndInOnMemoryPressureAndTheMinimumIsNeverPreempted) {
  TestCluster c;
  c.start_server();
  c.budget("/lab/a", 1);
  c.budget("/lab/b", 1);
  c.start_agent("n1", 8, {"--telemetry-ms", "500"});
  auto memory = [&](long mib) {
    for (int g = 0; g < 8; ++g) {
      std::ofstream(c.control_dir("n1") + "/gpu" + std::to_string(g) + ".mem_used_mib")
          << mib << "\n";
    }
  };
  memory(20000);  // about 25% of 81559 MiB: between nothing and the low watermark
  auto r = cli(c,
               "serve create chat --budget /lab/a --gpus 2 --min 1 --max 3 --cooldown 1s "
               "--min-runtime 1h -- /bin/sh -c 'sleep 600'");
  ASSERT_EQ(r.code, 0) << r.out;
  json s;
  auto service = [&] {
    s = c.get("/api/v1/services/chat").body;
    return s;
  };
  auto tier_count = [&](const std::string& tier, const std::string& state) {
    int n = 0;
    for (const auto& x : s["replicas"]) n += x["tier"] == tier && x["state"] == state;
    return n;
  };
  ASSERT_TRUE(eventually([&] { return service()["running"] == 1; }, 20000ms)) << s.dump();
  const auto protected_job = s["replicas"][0]["job"].get<std::uint64_t>();
  EXPECT_EQ(s["replicas"][0]["tier"], "protected");
  EXPECT_TRUE(s["replicas"][0]["allocated"].get<bool>()) << s.dump();
  EXPECT_EQ(s["desired"], 1) << s.dump();  // 25% is no reason to scale either way

  // Memory fills: out to the maximum, one decision a cool-down apart.
  memory(73000);  // about 90%
  ASSERT_TRUE(eventually([&] { return service()["running"] == 3; }, 30000ms)) << s.dump();
  EXPECT_EQ(s["desired"], 3);
  EXPECT_EQ(tier_count("elastic", "running"), 2) << s.dump();
  for (const auto& x : s["replicas"]) {
    if (x["tier"] == "elastic") {
      EXPECT_FALSE(x["allocated"].get<bool>()) << s.dump();
    }
  }
  ASSERT_GE(s["decisions"].size(), 2u);
  EXPECT_NE(s["decisions"][0]["reason"].get<std::string>().find("out: GPU memory"),
            std::string::npos)
      << s.dump();
  auto show = cli(c, "serve show chat");
  EXPECT_EQ(show.code, 0) << show.out;
  EXPECT_NE(show.out.find("1 -> 2  out: GPU memory"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("2 -> 3  out: GPU memory"), std::string::npos) << show.out;
  // The replicas are jobs that name their service.
  auto one = cli(c, "show " + std::to_string(protected_job));
  EXPECT_NE(one.out.find("service    chat (protected replica"), std::string::npos) << one.out;

  // 6 of 8 GPUs held: a funded 4-GPU job of /lab/b takes an elastic replica's GPUs, never the
  // protected replica's.
  const auto train = c.submit({{"budget", "/lab/b"},
                               {"gpus", 4},
                               {"min_runtime", 3600},
                               {"name", "train"},
                               {"command", c.marked("train", "sleep 600")}});
  ASSERT_TRUE(c.wait_state(train, "running", 30000ms)) << c.history(train);
  service();
  EXPECT_EQ(tier_count("protected", "running"), 1) << s.dump();
  EXPECT_EQ(tier_count("elastic", "running"), 1) << s.dump();
  EXPECT_EQ(c.state(protected_job), "running") << c.history(protected_job);

  // Memory empties: in to the minimum.
  memory(4000);
  ASSERT_TRUE(
      eventually([&] { return service()["desired"] == 1 && s["replicas"].size() == 1; }, 30000ms))
      << s.dump();
  EXPECT_EQ(s["replicas"][0]["job"].get<std::uint64_t>(), protected_job) << s.dump();
  EXPECT_NE(s["decisions"].back()["reason"].get<std::string>().find("in: GPU memory"),
            std::string::npos)
      << s.dump();
  // The protected replica ran throughout: started once, never preempted.
  EXPECT_EQ(c.state(protected_job), "running");
  const auto h = c.history(protected_job);
  EXPECT_EQ(h.find("preempt"), std::string::npos) << h;
  EXPECT_EQ(c.state(train), "running");

  // Deleted: its replica is stopped.
  r = cli(c, "serve delete chat");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(c.wait_state(protected_job, "cancelled")) << c.history(protected_job);
  r = cli(c, "serve list");
  EXPECT_NE(r.out.find("no services"), std::string::npos) << r.out;
}

TEST(ServiceEndToEnd, AReplicaServesOnceItsReadyCommandSucceeds) {
  TestCluster c;
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 8);
  const std::string up = c.out("ready-up");
  // The check sees the replica's environment (ALLOT_SERVICE) and fails, saying why, until the
  // file exists.
  auto r = cli(c,
               "serve create chat --budget /lab/a --gpus 1 --min 1 --max 1 --min-runtime 1h "
               "--ready-command 'test \"$ALLOT_SERVICE\" = chat && test -e " +
                   up + " || { echo waiting for " + up +
                   " >&2; exit 1; }' -- /bin/sh -c 'sleep 600 # " + c.dir() + "'");
  ASSERT_EQ(r.code, 0) << r.out;
  json s;
  auto service = [&] {
    s = c.get("/api/v1/services/chat").body;
    return s;
  };
  ASSERT_TRUE(eventually(
      [&] {
        return service()["running"] == 1 && s["replicas"].size() == 1 &&
               s["replicas"][0].contains("ready_since");
      },
      20000ms))
      << s.dump();
  EXPECT_EQ(s["ready"], 0) << s.dump();
  EXPECT_FALSE(s["replicas"][0]["ready"].get<bool>()) << s.dump();
  EXPECT_NE(s["replicas"][0].value("ready_reason", "").find("exited with code 1: waiting for"),
            std::string::npos)
      << s.dump();
  auto show = cli(c, "serve show chat");
  EXPECT_EQ(show.code, 0) << show.out;
  EXPECT_NE(show.out.find("0 ready"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("no ("), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("readiness: command exits 0"), std::string::npos) << show.out;

  std::ofstream(up) << "1\n";
  ASSERT_TRUE(eventually([&] { return service()["ready"] == 1; }, 20000ms)) << s.dump();
  EXPECT_TRUE(s["replicas"][0]["ready"].get<bool>()) << s.dump();
  show = cli(c, "serve show chat");
  EXPECT_NE(show.out.find("1 ready"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("yes ("), std::string::npos) << show.out;
  auto list = cli(c, "serve list");
  EXPECT_NE(list.out.find("READY"), std::string::npos) << list.out;

  // A restarted server knows no replica's readiness: told so by the assignment, the agent says
  // it again.
  c.kill_server(SIGKILL);
  std::this_thread::sleep_for(300ms);
  c.start_server();
  ASSERT_TRUE(eventually([&] { return service()["ready"] == 1; }, 20000ms)) << s.dump();

  // Not ready again: said again, and the replica stops counting.
  std::filesystem::remove(up);
  ASSERT_TRUE(eventually([&] { return service()["ready"] == 0; }, 20000ms)) << s.dump();
  EXPECT_EQ(s["running"], 1);
  r = cli(c, "serve delete chat");
  EXPECT_EQ(r.code, 0) << r.out;
}

}  // namespace
}  // namespace allot::e2e
