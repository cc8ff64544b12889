// The real traces in traces/ (skipped, saying so, when they are not there).
#include <gtest/gtest.h>

#include <filesystem>

#include "sim/experiment.h"
#include "sim/trace_loaders.h"

namespace allot::sim {
namespace {

std::string trace(const char* name) {
  const char* env = std::getenv("ALLOT_TRACES_DIR");
  const std::string dir = env ? env : ALLOT_TRACES_DIR;
  return dir + "/" + name;
}

#define REQUIRE_TRACE(path)                                                    \
  if (!std::filesystem::exists(path)) {                                        \
    GTEST_SKIP() << "trace " << path << " is not here (set ALLOT_TRACES_DIR)"; \
  }

TEST(SimTraces, PhillyLoadsEveryJob) {
  const std::string path = trace("philly.csv");
  REQUIRE_TRACE(path);
  Diagnostics d;
  auto w = load_philly_trace(path, d);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(w.value().jobs.size(), 82247u);
  EXPECT_TRUE(d.empty()) << d.skipped().front().message();
  EXPECT_NEAR(demand_gpu_seconds(w.value()) / 3600.0, 978078, 1);
}

TEST(SimTraces, PhillyFirstJobsRunWithFaultsAndPassTheChecks) {
  const std::string path = trace("philly.csv");
  REQUIRE_TRACE(path);
  ExperimentSpec spec;
  spec.workload_path = path;
  spec.cluster_path = std::string(ALLOT_EXAMPLES_DIR) + "/philly-2.5x.yaml";
  spec.limit = 1500;
  spec.load = 2.5;
  spec.sim.faults.enabled = true;
  auto in = prepare_inputs(spec);
  ASSERT_TRUE(in.ok()) << in.error().message();
  EXPECT_NEAR(in.value().load_after.ratio, 2.5, 1e-6);
  auto runs = policy_runs(spec);
  ASSERT_TRUE(runs.ok());
  for (const RunResult& r : run_all(in.value().scenario, runs.value(), 2)) {
    SCOPED_TRACE(r.policy);
    for (const Check& c : r.checks) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
    EXPECT_EQ(r.completed + r.pending_at_end + r.running_at_end, 1500u);
  }
}

TEST(SimTraces, OpenbPodsAndNodes) {
  const std::string pods = trace("openb_pod_list_gpushare40.csv");
  REQUIRE_TRACE(pods);
  Diagnostics d;
  auto w = load_openb_pods(pods, d);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(w.value().jobs.size(), 7064u);  // 8,152 pods less 1,088 without GPUs
  EXPECT_EQ(d.ignored(), 1088u);
  std::size_t fractional = 0;
  for (const SimJob& j : w.value().jobs) fractional += j.gpu_milli < 1000;
  EXPECT_GT(fractional, 2000u);
  auto c = load_openb_nodes(trace("openb_node_list_gpu_node.csv"), d);
  ASSERT_TRUE(c.ok()) << c.error().message();
  int nodes = 0;
  for (const NodePool& p : c.value().pools) nodes += p.nodes;
  EXPECT_EQ(nodes, 1213);
}

TEST(SimTraces, StrictModeFailsOnTheFirstBadRecord) {
  const std::string path = ::testing::TempDir() + "/bad_philly.csv";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66,1,66,a\n"
        "2017-10-09 07:01:56,66,x,66,a\n",
        f);
    std::fclose(f);
  }
  ExperimentSpec spec;
  spec.workload_path = path;
  spec.cluster_path = std::string(ALLOT_EXAMPLES_DIR) + "/h100-88.yaml";
  auto lenient = prepare_inputs(spec);
  ASSERT_TRUE(lenient.ok());
  EXPECT_EQ(lenient.value().diag.skipped().size(), 1u);
  EXPECT_EQ(lenient.value().scenario.jobs.size(), 1u);
  spec.strict = true;
  auto strict = prepare_inputs(spec);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.error().message().find("bad_philly.csv:3: num_gpus"), std::string::npos)
      << strict.error().message();
}

}  // namespace
}  // namespace allot::sim
