// What a job sees: its devices and environment (src/agent/job_env.h).
#include "agent/job_env.h"

#include <gtest/gtest.h>

namespace allot::agent {
namespace {

std::vector<GpuDevice> node(int n, bool mig_on_last = false) {
  std::vector<GpuDevice> out;
  for (int i = 0; i < n; ++i) {
    GpuDevice d;
    d.index = i;
    d.uuid = "GPU-" + std::to_string(i);
    d.model = "H100";
    if (mig_on_last && i == n - 1) {
      d.mig_enabled = true;
      d.mig = {{"MIG-a", "3g.40gb", 428, 40000},
               {"MIG-b", "1g.10gb", 142, 10000},
               {"MIG-c", "1g.10gb", 142, 10000},
               {"MIG-d", "2g.20gb", 285, 20000}};
    }
    out.push_back(d);
  }
  return out;
}

Assignment job(std::vector<int> gpus, int milli = 1000) {
  Assignment a;
  a.key = {42, 2};
  a.state = "starting";
  a.gpus = std::move(gpus);
  a.gpu_milli = milli;
  a.command = {"true"};
  a.owner = "ann";
  a.budget = "/lab/a";
  a.name = "train";
  a.env = {{"SEED", "1"}};
  return a;
}

TEST(Devices, WholeGpusGetTheirUuids) {
  auto d = choose_devices(job({1, 3}), node(4), {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().uuids, (std::vector<std::string>{"GPU-1", "GPU-3"}));
  EXPECT_FALSE(d.value().shared);
}

TEST(Devices, AGpuNotOnTheNodeIsRefused) {
  auto d = choose_devices(job({5}), node(4), {});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().field, "gpus");
}

TEST(Devices, AFractionTakesTheSmallestFreeMigInstanceThatFits) {
  auto d = choose_devices(job({3}, 142), node(4, true), {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().uuids, (std::vector<std::string>{"MIG-b"}));
  d = choose_devices(job({3}, 142), node(4, true), {"MIG-b"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().uuids, (std::vector<std::string>{"MIG-c"}));
  d = choose_devices(job({3}, 200), node(4, true), {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().uuids, (std::vector<std::string>{"MIG-d"}));
  d = choose_devices(job({3}, 500), node(4, true), {});
  EXPECT_FALSE(d.ok());
  EXPECT_EQ(d.error().field, "gpu_milli");
}

TEST(Devices, TheProfileTheSchedulerCountedIsTheInstanceGiven) {
  auto a = job({3}, 142);
  a.mig_profile = "2g.20gb";  // the scheduler counted the 2g (a 1g was taken when it placed)
  a.gpu_milli = 285;
  auto d = choose_devices(a, node(4, true), {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().uuids, (std::vector<std::string>{"MIG-d"}));
  // Of two of that profile, the first free by UUID.
  a.mig_profile = "1g.10gb";
  a.gpu_milli = 142;
  d = choose_devices(a, node(4, true), {"MIG-b"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().uuids, (std::vector<std::string>{"MIG-c"}));
  // None of it free (the GPU was split again): the smallest that holds the fraction.
  d = choose_devices(a, node(4, true), {"MIG-b", "MIG-c"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().uuids, (std::vector<std::string>{"MIG-d"}));
}

TEST(Devices, AFractionWithoutMigSharesTheGpu) {
  auto d = choose_devices(job({0}, 250), node(4, true), {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().uuids, (std::vector<std::string>{"GPU-0"}));
  EXPECT_TRUE(d.value().shared);
}

TEST(Environment, SaysWhatTheJobHoldsAndWhereItsPeersAre) {
  auto a = job({1, 3});
  a.nodes = {"n01", "n02"};
  a.rank = 1;
  a.rendezvous = "10.0.0.1:29512";
  a.resumable = true;
  auto d = choose_devices(a, node(4), {}).value();
  auto env = job_environment(a, d, "n02");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "GPU-1,GPU-3");
  EXPECT_EQ(env["NVIDIA_VISIBLE_DEVICES"], "GPU-1,GPU-3");
  EXPECT_EQ(env["ALLOT_JOB_ID"], "42");
  EXPECT_EQ(env["ALLOT_RUN"], "2");
  EXPECT_EQ(env["ALLOT_BUDGET"], "/lab/a");
  EXPECT_EQ(env["ALLOT_OWNER"], "ann");
  EXPECT_EQ(env["ALLOT_NODE"], "n02");
  EXPECT_EQ(env["ALLOT_NODE_RANK"], "1");
  EXPECT_EQ(env["ALLOT_NUM_NODES"], "2");
  EXPECT_EQ(env["ALLOT_NODES"], "n01,n02");
  EXPECT_EQ(env["ALLOT_GPUS_PER_NODE"], "2");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["MASTER_ADDR"], "10.0.0.1");
  EXPECT_EQ(env["MASTER_PORT"], "29512");
  EXPECT_EQ(env["ALLOT_RESUMABLE"], "1");
  EXPECT_EQ(env["SEED"], "1");
}

TEST(Environment, ASingleNodeJobIsItsOwnGang) {
  auto a = job({0});
  auto env = job_environment(a, choose_devices(a, node(1), {}).value(), "solo");
  EXPECT_EQ(env["ALLOT_NODES"], "solo");
  EXPECT_EQ(env["ALLOT_NUM_NODES"], "1");
  EXPECT_EQ(env["WORLD_SIZE"], "1");
  EXPECT_EQ(env.count("MASTER_ADDR"), 0u);
}

}  // namespace
}  // namespace allot::agent
