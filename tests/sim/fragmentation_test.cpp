// The fragmentation experiment (src/sim/fragmentation_experiment.h) and its openb readers.
#include <gtest/gtest.h>

#include "sim/fragmentation_experiment.h"
#include "sim/openb_resources.h"

namespace allot::sim {
namespace {

TEST(OpenbResources, ReadsRequestsAndNodesAndSkipsBadRecords) {
  const std::string pods =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time\n"
      "p0,8000,30517,0,0,,BE,Running,1\n"
      "p1,3152,1024,1,810,,LS,Running,2\n"
      "p2,12000,2048,8,1000,V100M16|V100M32,LS,Running,3\n"
      "p3,1000,10,2,500,,LS,Running,4\n"  // a fraction of two GPUs
      "p4,1000,10,1,0,,LS,Running,5\n"    // a GPU pod asking for nothing
      "p5,-1,10,1,100,,LS,Running,6\n"    // negative CPU
      "p6,1000,10,1,100,,LS\n";           // too few fields
  Diagnostics diag;
  auto r = parse_openb_requests(pods, "pods.csv", diag);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r.value().size(), 3u);
  EXPECT_EQ(r.value()[0].gpus, 0);
  EXPECT_EQ(r.value()[0].cpu_milli, 8000);
  EXPECT_EQ(r.value()[1].milli, 810);
  EXPECT_EQ(r.value()[1].memory_mib, 1024);
  EXPECT_EQ(r.value()[2].gpus, 8);
  EXPECT_EQ(r.value()[2].models, (std::vector<std::string>{"V100M16", "V100M32"}));
  ASSERT_EQ(diag.skipped().size(), 4u);
  EXPECT_EQ(diag.skipped()[0].message(),
            "pods.csv:5: gpu_milli: a fraction of a GPU is only for num_gpu 1");
  EXPECT_EQ(diag.skipped()[2].field, "cpu_milli");

  const std::string nodes =
      "sn,cpu_milli,memory_mib,gpu,model\n"
      "n0,64000,262144,2,P100\n"
      "n1,64000,262144,0,\n"  // no GPUs: ignored
      "n2,96000,393216,8,G2\n"
      "n3,96000,393216,65,G2\n";
  Diagnostics nd;
  auto n = parse_openb_node_resources(nodes, "nodes.csv", nd);
  ASSERT_TRUE(n.ok()) << n.error().message();
  ASSERT_EQ(n.value().size(), 2u);
  EXPECT_EQ(n.value()[1].gpu_free, std::vector<core::Milli>(8, 1000));
  EXPECT_EQ(n.value()[1].cpu_free, 96000);
  EXPECT_EQ(nd.ignored(), 1u);
  ASSERT_EQ(nd.skipped().size(), 1u);
  EXPECT_EQ(nd.skipped()[0].field, "gpu");
  EXPECT_FALSE(parse_openb_node_resources("sn,gpu,model\n", "x.csv", nd).ok());  // no cpu_milli
}

// A small cluster and a pod mix shaped like the openb trace's: many whole GPUs, shares of 0.81,
// 0.47, 0.32, 0.65 and 0.23 GPU, a few 8-GPU pods and CPU-only pods.
FragExperimentSpec small_openb_like() {
  FragExperimentSpec s;
  for (int i = 0; i < 24; ++i) {
    const bool g2 = i < 16;
    s.nodes.push_back(core::FragNode{std::string(g2 ? "G2" : "T4"),
                                     std::vector<core::Milli>(g2 ? 8 : 2, core::kWholeGpu),
                                     g2 ? 96000 : 104000, 393216});
  }
  auto add = [&](int count, int gpus, core::Milli milli, std::int64_t cpu) {
    core::FragRequest r;
    r.gpus = gpus;
    r.milli = milli;
    r.cpu_milli = cpu;
    r.memory_mib = 16384;
    for (int k = 0; k < count; ++k) s.pods.push_back(r);
  };
  add(37, 1, 1000, 11300);
  add(17, 1, 810, 3152);
  add(12, 1, 470, 11908);
  add(5, 1, 320, 4000);
  add(5, 1, 650, 11908);
  add(3, 1, 230, 4000);
  add(1, 8, 1000, 32000);
  add(13, 0, 0, 12500);
  s.placements = {"fgd", "best-fit", "first-fit", "worst-fit"};
  s.seeds = {1, 2, 3, 4, 5};
  s.arrive_until = 1.1;
  return s;
}

TEST(FragmentationExperiment, CurvesNeverAllocateMoreThanArrivedAndOnlyFall) {
  const FragExperimentSpec spec = small_openb_like();
  auto r = run_fragmentation_experiment(spec);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r.value().capacity, (16 * 8 + 8 * 2) * 1000);
  EXPECT_EQ(r.value().runs.size(), 20u);
  for (const FragRun& run : r.value().runs) {
    ASSERT_FALSE(run.curve.empty());
    EXPECT_GE(run.curve.back().arrived, 1.1);
    double last = 1;
    for (const FragPoint& p : run.curve) {
      EXPECT_GE(p.unallocated + 1e-12, 1 - p.arrived);  // never more allocated than arrived
      EXPECT_LE(p.unallocated, last + 1e-12);           // pods never leave
      last = p.unallocated;
    }
    EXPECT_GT(run.failed_pods, 0u) << run.placement;  // 110% arrived cannot all fit
  }
  const std::string csv = fragmentation_csv(r.value());
  EXPECT_EQ(csv.rfind("placement,seed,arrived_pct,unallocated_pct\nfgd,1,1,", 0), 0u);
  EXPECT_NE(fragmentation_table(r.value()).find("fgd leaves"), std::string::npos);
}

// The openb trace's requests (a seeded sample of 800 pods) on every 20th node of its cluster (61
// nodes, 314 GPUs): at 100% arrived, for each of five seeds, the gradient rule leaves less GPU
// capacity unallocated than best fit. (The full trace and cluster: docs/simulator.md.)
TEST(FragmentationExperiment, GradientRuleLeavesLessUnallocatedThanBestFit) {
  Diagnostics diag;
  auto pods = load_openb_requests(ALLOT_TEST_DATA_DIR "/openb_pods_sample_800.csv", diag);
  auto nodes = load_openb_node_resources(ALLOT_TEST_DATA_DIR "/openb_nodes_every20.csv", diag);
  ASSERT_TRUE(pods.ok() && nodes.ok());
  ASSERT_EQ(pods.value().size(), 800u);
  ASSERT_EQ(nodes.value().size(), 61u);
  FragExperimentSpec spec;
  spec.pods = pods.value();
  spec.nodes = nodes.value();
  spec.placements = {"fgd", "best-fit"};
  spec.seeds = {1, 2, 3, 4, 5};
  spec.arrive_until = 1.0;
  auto r = run_fragmentation_experiment(spec);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r.value().capacity, 314 * 1000);
  for (std::size_t k = 0; k < spec.seeds.size(); ++k) {
    const FragRun& fgd = r.value().runs[k];
    const FragRun& best = r.value().runs[spec.seeds.size() + k];
    ASSERT_EQ(fgd.placement, "fgd");
    ASSERT_EQ(best.placement, "best-fit");
    EXPECT_LT(unallocated_at(fgd, 1.0), unallocated_at(best, 1.0)) << "seed " << fgd.seed;
  }
}

TEST(FragmentationExperiment, RejectsAnUnknownPlacement) {
  FragExperimentSpec spec = small_openb_like();
  spec.placements = {"fgd", "random"};
  auto r = run_fragmentation_experiment(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "placements");
}

}  // namespace
}  // namespace allot::sim
