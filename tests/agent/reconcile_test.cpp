// Reconciliation rules (src/agent/reconcile.h): the server's assignments are the truth.
#include "agent/reconcile.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

namespace allot::agent {
namespace {

Assignment assigned(core::JobId job, int run, const std::string& state) {
  Assignment a;
  a.key = {job, run};
  a.state = state;
  a.gpus = {0};
  a.command = {"true"};
  return a;
}

TEST(Reconcile, StartsWhatIsPlacedAndNotHere) {
  Assignments s;
  s.run = {assigned(1, 1, "starting")};
  auto act = reconcile(s, {}, {});
  ASSERT_EQ(act.launch.size(), 1u);
  EXPECT_EQ(act.launch[0]->key, (RunKey{1, 1}));
  EXPECT_TRUE(act.kill.empty());
  EXPECT_TRUE(act.lost.empty());
}

TEST(Reconcile, RunningHereIsLeftAlone) {
  Assignments s;
  s.run = {assigned(1, 1, "running")};
  auto act = reconcile(s, {{{1, 1}, RunPhase::Running, false, {}, 1000}}, {});
  EXPECT_TRUE(act.launch.empty());
  EXPECT_TRUE(act.kill.empty());
  EXPECT_TRUE(act.lost.empty());
  EXPECT_TRUE(act.stop.empty());
}

TEST(Reconcile, RunningThereButNotHereIsLost) {
  Assignments s;
  s.run = {assigned(1, 1, "running")};
  auto act = reconcile(s, {}, {});
  EXPECT_TRUE(act.launch.empty());
  ASSERT_EQ(act.lost.size(), 1u);
  EXPECT_EQ(act.lost[0], (RunKey{1, 1}));
}

TEST(Reconcile, NotAssignedAnyMoreIsKilled) {
  Assignments s;  // the server lists nothing
  auto act = reconcile(
      s,
      {{{7, 2}, RunPhase::Running, false, {}, 1000}, {{8, 1}, RunPhase::Exited, false, {}, 1000}},
      {});
  ASSERT_EQ(act.kill.size(), 1u);
  EXPECT_EQ(act.kill[0], (RunKey{7, 2}));  // an exited run needs no kill
}

TEST(Reconcile, AnOldRunOfAJobIsKilledWhileTheNewOneStarts) {
  Assignments s;
  s.run = {assigned(7, 3, "starting")};
  auto act = reconcile(s, {{{7, 2}, RunPhase::Running, false, {}, 1000}}, {});
  ASSERT_EQ(act.kill.size(), 1u);
  EXPECT_EQ(act.kill[0], (RunKey{7, 2}));
  ASSERT_EQ(act.launch.size(), 1u);
  EXPECT_EQ(act.launch[0]->key, (RunKey{7, 3}));
}

TEST(Reconcile, ALaunchWaitsWhileAnotherRunStillHoldsItsGpus) {
  Assignments s;
  s.run = {assigned(9, 1, "starting")};  // on GPU 0
  s.run[0].gpus = {0, 1};
  // Job 4 is being stopped on GPU 1 (preempted), job 5 on GPU 3 is unrelated.
  s.stop = {{{4, 1}, 10}};
  std::vector<LocalRun> local = {{{4, 1}, RunPhase::Stopping, true, {1}, 1000},
                                 {{5, 1}, RunPhase::Running, false, {3}, 1000}};
  s.run.push_back(assigned(5, 1, "running"));
  s.run.back().gpus = {3};
  auto act = reconcile(s, local, {});
  EXPECT_TRUE(act.launch.empty());
  ASSERT_EQ(act.waiting.size(), 1u);
  EXPECT_EQ(act.waiting[0]->key, (RunKey{9, 1}));
  // A run the server forgot (its restart lost the stop) is killed, and the launch still waits.
  s.stop.clear();
  local[0].stop_requested = false;
  local[0].phase = RunPhase::Running;
  act = reconcile(s, local, {});
  ASSERT_EQ(act.kill.size(), 1u);
  EXPECT_EQ(act.kill[0], (RunKey{4, 1}));
  EXPECT_EQ(act.waiting.size(), 1u);
  // Once it has exited, the launch goes ahead.
  local[0].phase = RunPhase::Exited;
  act = reconcile(s, local, {});
  EXPECT_TRUE(act.waiting.empty());
  ASSERT_EQ(act.launch.size(), 1u);
}

TEST(Reconcile, FractionsShareAGpuButNotWithAWholeGpuRun) {
  Assignments s;
  s.run = {assigned(9, 1, "starting")};
  s.run[0].gpu_milli = 500;
  std::vector<LocalRun> local = {{{4, 1}, RunPhase::Running, false, {0}, 250}};
  s.run.push_back(assigned(4, 1, "running"));
  auto act = reconcile(s, local, {});
  EXPECT_EQ(act.launch.size(), 1u);
  local[0].gpu_milli = 1000;
  act = reconcile(s, local, {});
  EXPECT_TRUE(act.launch.empty());
  EXPECT_EQ(act.waiting.size(), 1u);
}

TEST(Reconcile, StopOrdersStopOnce) {
  Assignments s;
  s.stop = {{{3, 1}, 10}};
  auto act = reconcile(s, {{{3, 1}, RunPhase::Running, false, {}, 1000}}, {});
  ASSERT_EQ(act.stop.size(), 1u);
  EXPECT_EQ(act.stop[0].grace_seconds, 10);
  EXPECT_TRUE(act.kill.empty());
  act = reconcile(s, {{{3, 1}, RunPhase::Stopping, true, {}, 1000}}, {});
  EXPECT_TRUE(act.stop.empty());
  EXPECT_TRUE(act.kill.empty());
}

TEST(Reconcile, AStopForARunNotHereIsReportedLost) {
  Assignments s;
  s.stop = {{{3, 1}, 10}};
  auto act = reconcile(s, {}, {});
  ASSERT_EQ(act.lost.size(), 1u);
  act = reconcile(s, {}, {{3, 1}});
  EXPECT_TRUE(act.lost.empty());
}

TEST(Reconcile, ARunReportedDoneIsNeverStartedAgainByAStaleSnapshot) {
  Assignments s;
  s.run = {assigned(5, 1, "starting"), assigned(6, 1, "running")};
  auto act = reconcile(s, {}, {{5, 1}, {6, 1}});
  EXPECT_TRUE(act.launch.empty());
  EXPECT_TRUE(act.lost.empty());
}

// Property: over random states, a run is never both launched and present, never launched when
// done, never launched onto a GPU a live run holds, every live local run is either wanted or
// killed, and nothing is killed that is wanted.
TEST(Reconcile, RandomStatesKeepTheRules) {
  std::mt19937 rng(7);
  for (int scenario = 0; scenario < 5000; ++scenario) {
    Assignments s;
    std::vector<LocalRun> local;
    std::set<RunKey> done;
    std::set<RunKey> used;
    auto key = [&] {
      return RunKey{static_cast<core::JobId>(1 + rng() % 6), static_cast<int>(1 + rng() % 3)};
    };
    for (int i = 0, n = static_cast<int>(rng() % 5); i < n; ++i) {
      auto k = key();
      if (!used.insert(k).second) continue;
      s.run.push_back(assigned(k.job, k.run, rng() % 2 ? "starting" : "running"));
      s.run.back().gpus = {static_cast<int>(rng() % 4)};
      s.run.back().gpu_milli = rng() % 3 == 0 ? 500 : 1000;
    }
    for (int i = 0, n = static_cast<int>(rng() % 3); i < n; ++i) {
      auto k = key();
      if (!used.insert(k).second) continue;
      s.stop.push_back({k, 5});
    }
    std::set<RunKey> here;
    for (int i = 0, n = static_cast<int>(rng() % 5); i < n; ++i) {
      auto k = key();
      if (!here.insert(k).second) continue;
      local.push_back({k,
                       static_cast<RunPhase>(rng() % 3),
                       rng() % 2 == 0,
                       {static_cast<int>(rng() % 4)},
                       rng() % 3 == 0 ? 500 : 1000});
    }
    for (int i = 0, n = static_cast<int>(rng() % 3); i < n; ++i) {
      auto k = key();
      if (!here.count(k)) done.insert(k);
    }
    auto act = reconcile(s, local, done);
    std::set<RunKey> wanted;
    for (const auto& a : s.run) wanted.insert(a.key);
    for (const auto& st : s.stop) wanted.insert(st.key);
    for (const auto* a : act.launch) {
      EXPECT_FALSE(here.count(a->key));
      EXPECT_FALSE(done.count(a->key));
      EXPECT_EQ(a->state, "starting");
      // Never onto a GPU that a live run holds, unless both take a fraction of it.
      for (const auto& r : local) {
        if (r.phase == RunPhase::Exited || (r.gpu_milli < 1000 && a->gpu_milli < 1000)) continue;
        EXPECT_NE(r.gpus[0], a->gpus[0]);
      }
    }
    for (const auto* a : act.waiting) {  // held back, not dropped: it would launch otherwise
      EXPECT_FALSE(here.count(a->key));
      EXPECT_FALSE(done.count(a->key));
      EXPECT_EQ(a->state, "starting");
    }
    for (const auto& k : act.kill) {
      EXPECT_TRUE(here.count(k));
      EXPECT_FALSE(wanted.count(k));
    }
    for (const auto& r : local) {
      if (r.phase == RunPhase::Exited) continue;
      const bool killed = std::find(act.kill.begin(), act.kill.end(), r.key) != act.kill.end();
      EXPECT_NE(killed, wanted.count(r.key) > 0);
    }
    for (const auto& k : act.lost) {
      EXPECT_FALSE(here.count(k));
      EXPECT_FALSE(done.count(k));
    }
  }
}

TEST(Assignments, ParsesTheContractExample) {
  auto body = nlohmann::json::parse(R"({"node": "n01", "lease_seconds": 30, "server_time": 17,
 "run": [{"job": 12, "run": 1, "state": "starting", "gpus": [0, 1], "gpu_milli": 1000,
          "command": ["python", "train.py"], "env": {"SEED": "1"}, "workdir": "/home/ann/exp",
          "memory_mib": 65536, "cpus": 16, "container": "", "owner": "ann",
          "budget": "/lab/nlp/olmo", "name": "train", "kind": "batch", "resumable": true,
          "grace_seconds": 30, "rank": 0, "nodes": ["n01", "n02"], "rendezvous": "10.0.0.1:29512"}],
 "stop": [{"job": 9, "run": 2, "grace_seconds": 30},
          {"job": 10, "run": 1, "grace_seconds": 30, "notice_seconds": 270}]})");
  auto a = parse_assignments(body);
  ASSERT_TRUE(a.ok()) << a.error().message();
  ASSERT_EQ(a.value().run.size(), 1u);
  const auto& r = a.value().run[0];
  EXPECT_EQ(r.key, (RunKey{12, 1}));
  EXPECT_EQ(r.gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.env.at("SEED"), "1");
  EXPECT_EQ(r.memory_mib, 65536);
  EXPECT_DOUBLE_EQ(r.cpus, 16);
  EXPECT_TRUE(r.resumable);
  EXPECT_EQ(r.nodes.size(), 2u);
  ASSERT_EQ(a.value().stop.size(), 2u);
  EXPECT_EQ(a.value().stop[0].key, (RunKey{9, 2}));
  EXPECT_EQ(a.value().stop[0].notice_seconds, 0);
  EXPECT_EQ(a.value().stop[1].notice_seconds, 270) << "an interactive job's stop: warned first";
  EXPECT_EQ(a.value().lease_seconds, 30);
}

TEST(Assignments, AReplicasReadinessCheckAndWhatTheServerKnowsOfIt) {
  auto parse = [](const char* check, const char* ready) {
    auto body = nlohmann::json::parse(
        std::string(R"({"run": [{"job": 1, "run": 1, "state": "running", "gpus": [0],
                             "command": ["serve"], "ready_check": )") +
        check + R"(, "ready": )" + ready + "}]}");
    return parse_assignments(body);
  };
  auto a = parse(R"({"command": ["test", "-e", "/srv/up"], "interval_seconds": 2,
                     "timeout_seconds": 4})",
                 "false");
  ASSERT_TRUE(a.ok()) << a.error().message();
  const auto& r = a.value().run[0];
  ASSERT_TRUE(r.ready_check);
  EXPECT_EQ(r.ready_check->command, (std::vector<std::string>{"test", "-e", "/srv/up"}));
  EXPECT_EQ(r.ready_check->interval_seconds, 2);
  EXPECT_EQ(r.ready_check->timeout_seconds, 4);
  EXPECT_EQ(r.ready, std::optional<bool>(false));
  a = parse(R"({"path": "/health", "port": 8000})", "null");
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a.value().run[0].ready_check->path, "/health");
  EXPECT_EQ(a.value().run[0].ready_check->port, 8000);
  EXPECT_EQ(a.value().run[0].ready_check->timeout_seconds, 5);
  EXPECT_FALSE(a.value().run[0].ready);
  // A run without one has none.
  auto plain = parse_assignments(nlohmann::json::parse(
      R"({"run": [{"job": 1, "run": 1, "state": "running", "gpus": [0], "command": ["x"]}]})"));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain.value().run[0].ready_check);
  auto field = [&](const char* check, const char* ready = "null") {
    auto x = parse(check, ready);
    return x.ok() ? std::string("ok") : x.error().field;
  };
  EXPECT_EQ(field(R"({})"), "run.ready_check");
  EXPECT_EQ(field(R"({"command": ["x"], "path": "/h", "port": 1})"), "run.ready_check");
  EXPECT_EQ(field(R"({"path": "/h"})"), "run.ready_check.path");
  EXPECT_EQ(field(R"({"path": "h", "port": 80})"), "run.ready_check.path");
  EXPECT_EQ(field(R"({"path": "/h", "port": 70000})"), "run.ready_check.port");
  EXPECT_EQ(field(R"({"command": ["x"], "timeout_seconds": 0})"),
            "run.ready_check.timeout_seconds");
  EXPECT_EQ(field(R"("test -e x")"), "run.ready_check");
  EXPECT_EQ(field(R"({"command": ["x"]})", R"("yes")"), "run.ready");
}

TEST(Assignments, RefusesWhatItCannotTrust) {
  auto bad = [](const char* text) {
    auto a = parse_assignments(nlohmann::json::parse(text));
    return a.ok() ? std::string("ok") : a.error().field;
  };
  EXPECT_EQ(
      bad(R"({"run": [{"job": 1, "run": 1, "state": "starting", "gpus": [], "command": ["x"]}]})"),
      "run.gpus");
  EXPECT_EQ(
      bad(R"({"run": [{"job": 1, "run": 1, "state": "starting", "gpus": [99], "command": ["x"]}]})"),
      "run.gpus");
  EXPECT_EQ(bad(R"({"run": [{"job": 1, "state": "starting", "gpus": [0], "command": ["x"]}]})"),
            "run");
  EXPECT_EQ(
      bad(R"({"run": [{"job": 1, "run": 1, "state": "weird", "gpus": [0], "command": ["x"]}]})"),
      "run.state");
  // A job without a command is not malformed: the agent fails it with the reason.
  EXPECT_EQ(bad(R"({"run": [{"job": 1, "run": 1, "state": "starting", "gpus": [0]}]})"), "ok");
  EXPECT_EQ(bad(R"({"lease_seconds": "long"})"), "assignments.lease_seconds");
  EXPECT_EQ(bad(R"({"stop": [{"job": 1, "run": 0}]})"), "stop.run");
  EXPECT_EQ(bad(R"({"stop": [{"job": 1, "run": 1, "notice_seconds": -5}]})"),
            "stop.notice_seconds");
  EXPECT_EQ(bad(R"([])"), "body");
  // Found by fuzz_agent_assignments: 2^32 narrowed to int read as GPU 0.
  EXPECT_EQ(bad(R"({"run": [{"job": 1, "run": 1, "state": "starting", "gpus": [4294967296]}]})"),
            "run.gpus");
  EXPECT_EQ(bad(R"({"run": [{"job": 1, "run": 1, "state": "starting", "gpus": [-4294967295]}]})"),
            "run.gpus");
}

TEST(Assignments, MigLayoutsToApply) {
  auto a = parse_assignments(nlohmann::json::parse(R"({"run": [], "stop": [],
      "mig_layouts": [{"gpu": 3, "profiles": ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]},
                      {"gpu": 5, "profiles": []}]})"));
  ASSERT_TRUE(a.ok()) << a.error().message();
  ASSERT_EQ(a.value().mig_layouts.size(), 2u);
  EXPECT_EQ(a.value().mig_layouts[0].gpu, 3);
  EXPECT_EQ(a.value().mig_layouts[0].profiles,
            (std::vector<std::string>{"3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"}));
  EXPECT_EQ(a.value().mig_layouts[1].gpu, 5);
  EXPECT_TRUE(a.value().mig_layouts[1].profiles.empty()) << "the GPU whole, MIG mode off";
  // A server older than dynamic MIG sends none.
  auto old = parse_assignments(nlohmann::json::parse(R"({"run": [], "stop": []})"));
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old.value().mig_layouts.empty());
  auto null = parse_assignments(nlohmann::json::parse(R"({"mig_layouts": null})"));
  ASSERT_TRUE(null.ok());
  EXPECT_TRUE(null.value().mig_layouts.empty());
}

TEST(Assignments, RefusesMigLayoutsItCannotTrust) {
  auto bad = [](const std::string& layouts) {
    auto a = parse_assignments(nlohmann::json::parse(R"({"mig_layouts": )" + layouts + "}"));
    return a.ok() ? std::string("ok") : a.error().message();
  };
  EXPECT_EQ(bad(R"([{"gpu": 0, "profiles": ["7g.80gb"]}])"), "ok");
  EXPECT_EQ(bad(R"({"gpu": 0})"), "mig_layouts: must be a list of at most 64 layouts");
  std::string many = "[";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + R"({"gpu": 0, "profiles": []})";
  EXPECT_EQ(bad(many + "]"), "mig_layouts: must be a list of at most 64 layouts");
  EXPECT_EQ(bad(R"([3])"), "mig_layouts: entries must be objects");
  EXPECT_EQ(bad(R"([{"profiles": []}])"), "mig_layouts.gpu: must be a GPU index between 0 and 63");
  EXPECT_EQ(bad(R"([{"gpu": 64, "profiles": []}])"),
            "mig_layouts.gpu: must be a GPU index between 0 and 63");
  EXPECT_EQ(bad(R"([{"gpu": 4294967296, "profiles": []}])"),
            "mig_layouts.gpu: must be a GPU index between 0 and 63")
      << "not GPU 0 once narrowed";
  EXPECT_EQ(bad(R"([{"gpu": "1", "profiles": []}])"),
            "mig_layouts.gpu: must be a GPU index between 0 and 63");
  EXPECT_EQ(bad(R"([{"gpu": 1}])"),
            "mig_layouts.profiles: must be a list of MIG profiles (empty: the GPU whole, MIG mode "
            "off)")
      << "an absent list is not an order to make the GPU whole";
  EXPECT_EQ(bad(R"([{"gpu": 1, "profiles": "1g.10gb"}])"),
            "mig_layouts.profiles: must be a list of MIG profiles (empty: the GPU whole, MIG mode "
            "off)");
  EXPECT_EQ(bad(R"([{"gpu": 1, "profiles": ["1g.10gb","1g.10gb","1g.10gb","1g.10gb",
                                            "1g.10gb","1g.10gb","1g.10gb","1g.10gb"]}])"),
            "mig_layouts.profiles: must be a list of at most 7 strings");
  EXPECT_EQ(bad(R"([{"gpu": 1, "profiles": [7]}])"),
            "mig_layouts.profiles: entries must be strings of at most 32 characters");
  EXPECT_EQ(bad(R"([{"gpu": 1, "profiles": [")" + std::string(33, 'g') + R"("]}])"),
            "mig_layouts.profiles: entries must be strings of at most 32 characters");
  EXPECT_EQ(bad(R"([{"gpu": 1, "profiles": []}, {"gpu": 1, "profiles": ["7g.80gb"]}])"),
            "mig_layouts.gpu: GPU 1 given twice");
}

}  // namespace
}  // namespace allot::agent
