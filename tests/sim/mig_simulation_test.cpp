// The simulator with MIG (docs/policy.md sections 7.3 and 7.5): jobs that name a profile, static
// layouts from the cluster file, and dynamic re-partitioning with its reconfiguration time.
#include <gtest/gtest.h>

#include <map>

#include "sim/cluster_config.h"
#include "sim/policies.h"
#include "sim/simulation.h"
#include "sim/trace_loaders.h"
#include "sim_test_helpers.h"

namespace allot::sim {
namespace {

Scenario scenario(std::vector<SimJob> jobs, int mig_gpus = 0,
                  std::vector<std::string> profiles = {}) {
  ClusterConfig c;
  c.name = "mig";
  c.pools.push_back({"n", 1, "H100", 8, 0, mig_gpus, std::move(profiles)});
  return scenario_of(c, {{"/a", 1}, {"/b", 1}}, std::move(jobs));
}

SimOptions options(bool dynamic) {
  SimOptions o = policy_options("fairshare");
  o.policy.mig_dynamic = dynamic;
  o.policy.mig_hold = 10 * core::kMinute;
  o.mig_reconfigure = 30;
  return o;
}

std::map<std::uint64_t, core::Time> starts(const RunResult& r) {
  std::map<std::uint64_t, core::Time> out;
  for (const EventRecord& e : r.events) {
    if (e.event == "start" && !out.count(e.job)) out[e.job] = e.time;
  }
  return out;
}

const Summary* waits_of(const RunResult& r, const std::string& kind) {
  for (const auto& [k, s] : r.waits) {
    if (k == kind) return &s;
  }
  return nullptr;
}

// Seven GPUs busy with training; four jobs name profiles; an 8-GPU job comes an hour later.
std::vector<SimJob> workload() {
  return {job(1, 0, "/a", 7, 3600),
          job(2, 0, "/b", 1, 1800, "1g.10gb"),
          job(3, 0, "/b", 1, 1800, "1g.10gb"),
          job(4, 0, "/b", 1, 1800, "1g.10gb"),
          job(5, 0, "/b", 1, 1800, "3g.40gb"),
          job(6, 3600, "/a", 8, 3600)};
}

TEST(MigSimulation, TheIdleGpuIsSplitForProfilesAndTakenBackForTraining) {
  const Scenario sc = scenario(workload());
  const RunResult r = simulate(sc, options(true));
  expect_checks_pass(r);
  EXPECT_EQ(r.mig_splits, 1u);
  EXPECT_EQ(r.mig_merges, 1u);
  EXPECT_NEAR(r.mig_reconfigure_gpu_hours, 2 * 30 / 3600.0, 1e-9);
  const auto s = starts(r);
  // The split is decided at 0 and ready 30 s later: every MIG job starts then, on one GPU.
  for (std::uint64_t j : {2, 3, 4, 5}) EXPECT_EQ(s.at(j), 30) << "job " << j;
  // At 1 h the GPU is idle again and past its hold: made whole, the 8-GPU job starts 30 s later.
  EXPECT_EQ(s.at(6), 3600 + 30);
  EXPECT_EQ(r.completed, 6u);
  const Summary* mig = waits_of(r, "mig");
  ASSERT_NE(mig, nullptr);
  EXPECT_EQ(mig->count, 4u);
  EXPECT_EQ(mig->max, 30);
  std::size_t mig_events = 0;
  for (const EventRecord& e : r.events) mig_events += e.event == "mig";
  EXPECT_EQ(mig_events, 2u);
}

// §7.5 "Split over unallocated work" in the simulator: eight 1-GPU training jobs, unallocated by
// choice, fill the node for two hours; a job naming a profile with a contract comes at 10 min.
// With the switch one training job is preempted (it is resumable: requeued) and its GPU split;
// without, the job waits for a GPU to free.
TEST(MigSimulation, UnallocatedTrainingYieldsAGpuToAProfileWithAContractWhenAsked) {
  for (const bool on : {false, true}) {
    SCOPED_TRACE(on ? "on" : "off");
    std::vector<SimJob> jobs;
    for (std::uint64_t k = 1; k <= 8; ++k) jobs.push_back(job(k, 0, "/a", 1, 7200));
    SimJob inference = job(9, 600, "/b", 1, 1800, "1g.10gb");
    inference.min_runtime = 600;
    jobs.push_back(inference);
    SimOptions o = options(true);
    o.policy.mig_split_unallocated = on;
    const RunResult r = simulate(scenario(std::move(jobs)), o);
    expect_checks_pass(r);
    const auto s = starts(r);
    if (on) {
      EXPECT_LT(s.at(9), 600 + 120);
      EXPECT_EQ(r.mig_splits, 1u);
      EXPECT_EQ(r.preemptions, 1u);
    } else {
      EXPECT_GE(s.at(9), 7200);
      EXPECT_EQ(r.preemptions, 0u);
    }
    EXPECT_EQ(r.completed, 9u);
  }
}

TEST(MigSimulation, WithoutMigNodesOrDynamicMigProfileJobsNeverStart) {
  const RunResult r = simulate(scenario(workload()), options(false));
  EXPECT_EQ(r.mig_splits, 0u);
  EXPECT_EQ(r.completed, 2u);
  EXPECT_EQ(r.pending_at_end, 4u);
}

TEST(MigSimulation, AStaticLayoutServesTheProfilesItHoldsAndNeverChanges) {
  // GPU 0 split for good: the 1g jobs run there at once; the 3g never finds an instance, and the
  // 8-GPU job never finds 8 whole GPUs.
  const Scenario sc =
      scenario(workload(), 1, {"2g.20gb", "2g.20gb", "1g.10gb", "1g.10gb", "1g.10gb"});
  const RunResult r = simulate(sc, options(false));
  const auto s = starts(r);
  for (std::uint64_t j : {1, 2, 3, 4}) EXPECT_EQ(s.at(j), 0) << "job " << j;
  EXPECT_FALSE(s.count(5));
  EXPECT_FALSE(s.count(6));
  EXPECT_EQ(r.mig_splits + r.mig_merges, 0u);
}

TEST(MigSimulation, ClusterFilesAndWorkloadsStateMigAndBadOnesAreRefused) {
  auto c = parse_cluster_config(
      "pools:\n  - {name: n, nodes: 2, gpu_model: H100, mig_gpus_per_node: 2,\n"
      "     mig_profiles: [3g.40gb, 3g.40gb]}\n",
      "c.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c.value().pools[0].mig_gpus, 2);
  core::Scheduler sched;
  ASSERT_TRUE(build_cluster(c.value(), sched).ok());
  EXPECT_TRUE(sched.pool().in_mig_mode(0, 1));
  EXPECT_FALSE(sched.pool().in_mig_mode(0, 2));

  EXPECT_FALSE(parse_cluster_config(
                   "pools:\n  - {nodes: 1, gpu_model: H100, mig_gpus_per_node: 1}\n", "c.yaml")
                   .ok());
  auto impossible = parse_cluster_config(
      "pools:\n  - {name: n, nodes: 1, gpu_model: H100, mig_gpus_per_node: 1,\n"
      "     mig_profiles: [4g.40gb, 4g.40gb]}\n",
      "c.yaml");
  ASSERT_TRUE(impossible.ok());
  core::Scheduler other;
  auto built = build_cluster(impossible.value(), other);
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.error().message().find("mig_profiles"), std::string::npos);

  Diagnostics d;
  auto w = parse_native_workload(
      "{\"submit\": 0, \"budget\": \"/b\", \"gpus\": 1, \"duration\": 60, \"mig\": \"1g.10gb\"}\n"
      "{\"submit\": 0, \"budget\": \"/b\", \"gpus\": 2, \"duration\": 60, \"mig\": \"1g.10gb\"}\n",
      "w.jsonl", d);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w.value().jobs.size(), 1u);
  EXPECT_EQ(w.value().jobs[0].mig, "1g.10gb");
  EXPECT_FALSE(d.empty());  // the 2-GPU one, named by its field
}

}  // namespace
}  // namespace allot::sim
