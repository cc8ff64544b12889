// The strict baselines (fifo-strict, sjf-strict) against hand-computed start times
// (tests/data/helios_fifo_sample.csv), and the uneven shape rule they use.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "sim/csv_line.h"
#include "sim/experiment.h"
#include "sim/policies.h"
#include "sim/simulation.h"

namespace allot::sim {
namespace {

struct Expected {
  SimJob job;
  core::Time fifo_strict = 0, sjf_strict = 0;
};

// The sample's jobs and expected starts; fails the test (not skips) when the file is missing,
// as it is part of the repository.
std::vector<Expected> read_sample() {
  const std::string path = std::string(ALLOT_TEST_DATA_DIR) + "/helios_fifo_sample.csv";
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  std::vector<Expected> out;
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (header) {
      header = false;
      continue;
    }
    const auto f = split_csv(line);
    EXPECT_EQ(f.size(), 6u) << line;
    if (f.size() != 6) continue;
    Expected e;
    e.job.id = static_cast<std::uint64_t>(*parse_int(f[0]));
    e.job.line = e.job.id;
    e.job.submit = *parse_int(f[1]);
    e.job.duration = *parse_int(f[2]);
    e.job.gpus = static_cast<int>(*parse_int(f[3]));
    e.job.budget = "/a";
    e.job.kind = core::JobKind::Batch;
    e.job.min_runtime = 0;
    e.job.resumable = false;
    e.job.priority = core::Priority::Normal;
    e.fifo_strict = *parse_int(f[4]);
    e.sjf_strict = *parse_int(f[5]);
    out.push_back(e);
  }
  return out;
}

Scenario scenario_of(const std::vector<Expected>& sample, int nodes) {
  ClusterConfig c;
  c.name = "sample";
  c.pools.push_back({"n", nodes, "V100", 8, 0, 0, {}});
  BudgetConfig b;
  b.budgets = {{"/a", 1}};
  Workload w;
  w.source = "sample";
  for (const Expected& e : sample) w.jobs.push_back(e.job);
  sort_jobs(w, false);
  Diagnostics d;
  Scenario sc = make_scenario(c, b, w, d);
  EXPECT_TRUE(d.empty());
  return sc;
}

RunResult run(const Scenario& sc, const char* policy) {
  const auto p = find_policy(policy);
  EXPECT_TRUE(p.has_value()) << policy;
  SimOptions o;
  o.policy_name = p->name;
  o.policy = p->config;
  o.gang_shape = p->gang_shape;
  o.oracle_durations = p->oracle_durations;
  o.record_events = true;
  return simulate(sc, o);
}

std::map<std::uint64_t, core::Time> starts(const RunResult& r) {
  std::map<std::uint64_t, core::Time> out;
  for (const EventRecord& e : r.events) {
    if (e.event == "start") {
      EXPECT_FALSE(out.count(e.job)) << "job " << e.job << " started twice";
      out[e.job] = e.time;
    }
  }
  return out;
}

TEST(StrictBaselines, FifoStrictMatchesTheHandComputedStarts) {
  const auto sample = read_sample();
  ASSERT_EQ(sample.size(), 6u);
  const RunResult r = run(scenario_of(sample, 3), "fifo-strict");
  for (const Check& c : r.checks) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
  const auto got = starts(r);
  for (const Expected& e : sample) {
    ASSERT_TRUE(got.count(e.job.id)) << "job " << e.job.id << " never started";
    EXPECT_EQ(got.at(e.job.id), e.fifo_strict) << "job " << e.job.id;
  }
}

TEST(StrictBaselines, SjfStrictMatchesTheHandComputedStarts) {
  const auto sample = read_sample();
  ASSERT_EQ(sample.size(), 6u);
  const RunResult r = run(scenario_of(sample, 3), "sjf-strict");
  for (const Check& c : r.checks) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
  const auto got = starts(r);
  for (const Expected& e : sample) {
    ASSERT_TRUE(got.count(e.job.id)) << "job " << e.job.id << " never started";
    EXPECT_EQ(got.at(e.job.id), e.sjf_strict) << "job " << e.job.id;
  }
}

TEST(StrictBaselines, AllotsFifoBackfillsWhereTheStrictOneBlocks) {
  // The same sample under fifo: the 1-GPU job behind the blocked 16-GPU head starts on arrival.
  const auto sample = read_sample();
  const auto got = starts(run(scenario_of(sample, 3), "fifo"));
  ASSERT_TRUE(got.count(4));
  EXPECT_EQ(got.at(4), 2);
}

TEST(StrictBaselines, PresetsSayWhatTheyReproduce) {
  for (const char* name : {"fifo-strict", "sjf-strict"}) {
    const auto p = find_policy(name);
    ASSERT_TRUE(p.has_value()) << name;
    EXPECT_TRUE(p->config.head_of_line_blocking);
    EXPECT_FALSE(p->config.backfill);
    EXPECT_FALSE(p->config.reserve_for_blocked);
    EXPECT_FALSE(p->config.preemption);
    EXPECT_FALSE(p->config.debug_jobs_first);
    EXPECT_EQ(p->config.funding, core::Funding::Always);
    EXPECT_EQ(p->config.placement, core::PlacementRule::Consolidate);
    EXPECT_EQ(p->gang_shape, GangShape::Uneven);
    EXPECT_NE(p->reproduces.find("Helios"), std::string::npos);
  }
  EXPECT_NE(policy_names().find("fifo-strict"), std::string::npos);
}

// Replays `workload` on `cluster` under `policy` and checks every job's start against
// `expected_csv` ("job,start_s", seconds from the first submission); returns how many waited.
int expect_starts(const std::string& workload, const std::string& cluster,
                  const std::string& policy, const std::string& expected_csv, std::size_t jobs) {
  const std::string dir = ALLOT_TEST_DATA_DIR;
  std::map<std::uint64_t, core::Time> expected;
  {
    std::ifstream in(dir + "/" + expected_csv);
    EXPECT_TRUE(in) << "cannot open the expected starts in " << dir;
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      const auto f = split_csv(line);
      EXPECT_EQ(f.size(), 2u) << line;
      if (f.size() != 2) return -1;
      expected[static_cast<std::uint64_t>(*parse_int(f[0]))] = *parse_int(f[1]);
    }
  }
  EXPECT_EQ(expected.size(), jobs);
  ExperimentSpec spec;
  spec.workload_path = dir + "/" + workload;
  spec.workload_format = "philly";
  spec.cluster_path = dir + "/" + cluster;
  spec.policies = {policy};
  spec.sim.record_events = true;
  auto in = prepare_inputs(spec);
  EXPECT_TRUE(in.ok()) << in.error().message();
  auto runs = policy_runs(spec);
  EXPECT_TRUE(runs.ok());
  if (!in.ok() || !runs.ok()) return -1;
  const auto results = run_all(in.value().scenario, runs.value(), 1);
  EXPECT_EQ(results.size(), 1u);
  if (results.size() != 1) return -1;
  for (const Check& c : results[0].checks) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
  const auto got = starts(results[0]);
  int waited = 0, mismatched = 0;
  for (const auto& [job, at] : expected) {
    EXPECT_TRUE(got.count(job)) << "job " << job << " never started";
    if (!got.count(job)) return -1;
    mismatched += got.at(job) != at;
    EXPECT_EQ(got.at(job), at) << policy << ": job " << job;
    const auto& sim_job = in.value().scenario.jobs.at(job - 1).job;
    EXPECT_EQ(sim_job.id, job);
    waited += at > sim_job.submit;
  }
  EXPECT_EQ(mismatched, 0) << policy;
  return waited;
}

// 607 Philly jobs (the first 600 of at most 32 GPUs by submit time, and the trace's seven 12-GPU
// jobs) on 6 nodes of 8 GPUs, with the start time of each as an independent restatement of the
// Helios FIFO + consolidate rules computes it (scripts/strict-fifo-reference; docs/simulator.md,
// "Baselines"). 587 of them wait, the longest about 93 days: the head blocks for real.
TEST(StrictBaselines, FifoStrictMatchesTheReferenceReplayOnAPhillySample) {
  EXPECT_GT(expect_starts("philly_sample_607.csv", "philly-6x8.yaml", "fifo-strict",
                          "philly_sample_607_fifo_strict_6x8.csv", 607),
            500)
      << "the sample should queue";
}

// 385 jobs of the prepared Philly trace (scripts/helios-compare prepare: strictly increasing
// submits, whole seconds): rows 50451-50850, the jobs of at most 6 h, five of them 12-GPU gangs.
// The expected starts are the Helios simulator's own output, not ours: HeliosArtifact commit
// bdaae10 (S-Lab-System-Group/HeliosArtifact), framework/QSSF Service, FirstInFirstOut and
// ShortestJobFirst with consolidate placement on one virtual cluster of 4 nodes of 8 GPUs, run by
//   pypy3 scripts/helios-compare run-helios "HeliosArtifact/framework/QSSF Service"
//       tests/data/helios_philly_sample_385.csv 4 fifo|sjf OUT.csv  (one line)
// Under FIFO 296 jobs wait (up to 14 h), under SJF 258.
TEST(StrictBaselines, FifoAndSjfStrictMatchTheHeliosSimulatorOnAPhillySample) {
  EXPECT_GT(expect_starts("helios_philly_sample_385.csv", "philly-4x8.yaml", "fifo-strict",
                          "helios_philly_sample_385_fifo_4x8.csv", 385),
            250);
  EXPECT_GT(expect_starts("helios_philly_sample_385.csv", "philly-4x8.yaml", "sjf-strict",
                          "helios_philly_sample_385_sjf_4x8.csv", 385),
            200);
}

TEST(ShapeRule, UnevenGangsAreWholeNodesPlusTheRemainder) {
  SimJob j;
  auto shape = [&](int gpus, GangShape rule) {
    j.gpus = gpus;
    return shape_for(j, 8, rule);
  };
  const core::Shape twelve = shape(12, GangShape::Uneven);
  EXPECT_EQ(twelve.nodes, 2);
  EXPECT_EQ(twelve.gpus_per_node, 8);
  EXPECT_EQ(twelve.last_node_gpus, 4);
  EXPECT_EQ(twelve.total_gpus(), 12);
  EXPECT_EQ(shape(12, GangShape::Even), (core::Shape{2, 6, core::kWholeGpu, 0}));
  // 9 GPUs: 8 + 1 on two nodes, where the even rule needs three nodes of 3.
  EXPECT_EQ(shape(9, GangShape::Uneven).nodes, 2);
  EXPECT_EQ(shape(9, GangShape::Even).nodes, 3);
  // Multiples of a node and requests up to a node are the same under both rules.
  EXPECT_EQ(shape(24, GangShape::Uneven), shape(24, GangShape::Even));
  EXPECT_EQ(shape(5, GangShape::Uneven), shape(5, GangShape::Even));
  EXPECT_EQ(shape(24, GangShape::Uneven).last_node_gpus, 0);
}

TEST(ShapeRule, AnUnevenShapeTheNodesCannotTakeFallsBackToTheEvenOne) {
  // One node of 8 GPUs and three of 6. 12 GPUs: 8 + 4 needs one 8-GPU node: uneven. 18: 8 + 8 + 2
  // needs two, so it keeps the even 3 x 6.
  ClusterConfig c;
  c.name = "mixed";
  c.pools.push_back({"big", 1, "V100", 8, 0, 0, {}});
  c.pools.push_back({"small", 3, "V100", 6, 0, 0, {}});
  BudgetConfig b;
  b.budgets = {{"/a", 1}};
  Workload w;
  for (int gpus : {12, 18}) {
    SimJob j;
    j.id = w.jobs.size() + 1;
    j.gpus = gpus;
    j.budget = "/a";
    j.duration = 10;
    w.jobs.push_back(j);
  }
  Diagnostics d;
  const Scenario sc = make_scenario(c, b, w, d);
  ASSERT_EQ(sc.jobs.size(), 2u) << (d.empty() ? "" : d.skipped().front().message());
  EXPECT_EQ(sc.jobs[0].uneven_shape.last_node_gpus, 4);
  EXPECT_EQ(sc.jobs[0].uneven_shape.nodes, 2);
  EXPECT_EQ(sc.jobs[1].shape, (core::Shape{3, 6, core::kWholeGpu, 0}));
  EXPECT_EQ(sc.jobs[1].uneven_shape, sc.jobs[1].shape);
}

}  // namespace
}  // namespace allot::sim
