// docs/policy.md section 7.5, "MIG layouts": the geometry of MIG instances on one GPU, and the
// dynamic mode in which the scheduler splits idle GPUs for the profiles waiting jobs name and makes
// them whole again for whole-GPU work, with nothing placed on a GPU while it is re-partitioned.
#include <gtest/gtest.h>

#include "core/mig_geometry.h"
#include "world.h"

namespace allot::core {
namespace {

using testing::World;

using Names = std::vector<std::string>;

TEST(MigGeometry, ProfilesTakeTheMemorySlicesTheirNamesSay) {
  EXPECT_EQ(mig_geometry("1g.10gb", 80)->memory_slices, 1);
  EXPECT_EQ(mig_geometry("1g.20gb", 80)->memory_slices, 2);
  EXPECT_EQ(mig_geometry("3g.40gb", 80)->memory_slices, 4);
  EXPECT_EQ(mig_geometry("7g.80gb", 80)->memory_slices, 8);
  // NVIDIA's names round a slice's memory: H200, B200 and B300 slices are still eighths.
  EXPECT_EQ(mig_geometry("1g.18gb", 141)->memory_slices, 1);
  EXPECT_EQ(mig_geometry("3g.71gb", 141)->memory_slices, 4);
  EXPECT_EQ(mig_geometry("1g.45gb", 180)->memory_slices, 2);
  EXPECT_EQ(mig_geometry("1g.34gb", 288)->memory_slices, 1);
  // The A100 40 GB's 1g.10gb is two of its slices, the A100 80 GB's one.
  EXPECT_EQ(mig_geometry("1g.10gb", 40)->memory_slices, 2);
  EXPECT_TRUE(mig_geometry("1g.10gb+me", 80)->media);
  EXPECT_EQ(mig_geometry("3g.40gb", 80)->starts, (std::vector<int>{0, 4}));
  EXPECT_EQ(mig_geometry("2g.20gb", 80)->starts, (std::vector<int>{0, 2, 4}));
  // Not GPU-instance profiles of this GPU.
  EXPECT_FALSE(mig_geometry("1c.3g.40gb", 80));
  EXPECT_FALSE(mig_geometry("1g.30gb", 80));
  EXPECT_FALSE(mig_geometry("5g.50gb", 80));
  EXPECT_FALSE(mig_geometry("1g.10gb+gfx", 80));
  EXPECT_FALSE(mig_geometry("", 80));
  EXPECT_FALSE(mig_geometry("1g.10gb", 0));
}

TEST(MigGeometry, ALayoutFitsOnlyAsNvidiaPlacesInstances) {
  auto starts = [](Names p) { return mig_layout_starts(p, 80); };
  EXPECT_EQ(starts({}), std::vector<int>{});
  EXPECT_TRUE(starts(Names(7, "1g.10gb")));
  EXPECT_FALSE(starts(Names(8, "1g.10gb")));
  EXPECT_TRUE(starts(Names(4, "1g.20gb")));
  EXPECT_FALSE(starts(Names(5, "1g.20gb")));
  EXPECT_TRUE(starts({"3g.40gb", "3g.40gb"}));
  EXPECT_FALSE(starts({"3g.40gb", "3g.40gb", "1g.10gb"}));  // memory all taken
  EXPECT_EQ(starts({"1g.10gb", "2g.20gb", "4g.40gb"}), (std::vector<int>{6, 4, 0}));
  // Four 1-slice instances beside a 3g: the 3g must sit at slice 4, which the search finds.
  EXPECT_EQ(starts({"3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}),
            (std::vector<int>{4, 0, 1, 2, 3}));
  EXPECT_FALSE(starts({"4g.40gb", "3g.40gb"}));  // not a combination NVIDIA supports
  EXPECT_FALSE(starts({"1g.10gb+me", "1g.10gb+me"}));
  EXPECT_FALSE(starts({"7g.80gb", "1g.10gb"}));
  EXPECT_FALSE(starts({"1g.18gb"}));  // an H200 name on an 80 GB GPU
}

PolicyConfig dynamic() {
  PolicyConfig c;
  c.mig_dynamic = true;
  c.mig_hold = 10 * kMinute;
  return c;
}

JobSpec named(World& w, BudgetId b, const std::string& profile) {
  JobSpec j = w.job(b, 1);
  j.shape.mig = *w.s.catalog().find_mig_profile(profile);
  j.shape.gpu_milli = w.s.catalog().mig_profile(j.shape.mig).milli;
  return j;
}

std::vector<std::string> names(const Scheduler& s, const std::vector<MigInstance>& layout) {
  std::vector<std::string> out;
  for (const MigInstance& m : layout) out.push_back(s.catalog().mig_profile(m.profile).name);
  return out;
}

TEST(DynamicMig, AnIdleGpuIsSplitForTheProfileAWaitingJobNamesAndNothingRunsThereMeanwhile) {
  World w(dynamic());
  const NodeId n = w.add_nodes(1, 2, "H200").front();
  const BudgetId b = w.budget("/lab/a");
  const JobId busy = w.submit(b, 1);
  ASSERT_EQ(w.run().starts.size(), 1u);  // GPU 0 busy, GPU 1 idle
  const JobId inference = w.submit(named(w, b, "3g.71gb"));

  w.now = 10;
  CycleResult r = w.run();
  EXPECT_TRUE(r.starts.empty());
  ASSERT_EQ(r.repartitions.size(), 1u);
  const MigRepartition split = r.repartitions.front();
  EXPECT_EQ(split.node, n);
  EXPECT_EQ(split.gpu, 1);
  EXPECT_EQ(split.for_job, inference);
  // The profile asked for, then the space left as the largest profiles that still fit.
  EXPECT_EQ(names(w.s, split.instances), (Names{"3g.71gb", "3g.71gb"}));
  EXPECT_TRUE(w.s.mig_reconfiguring(n));
  auto why = [&](const CycleResult& cr) {
    for (const Explanation& e : cr.waiting) {
      if (e.job == inference) return w.s.describe(e);
    }
    return std::string("not waiting");
  };
  EXPECT_EQ(why(r),
            "needs a 3g.71gb MIG instance: a GPU of cluster test is being split into one "
            "for it (dynamic MIG)");

  // Until the node reports, the GPU takes no work: not even a whole-GPU job that fits it.
  const JobId whole = w.submit(b, 1);
  w.now = 20;
  r = w.run();
  EXPECT_TRUE(r.starts.empty());
  EXPECT_TRUE(r.repartitions.empty());  // decided once
  EXPECT_NE(why(r).find("is being split into one for it"), std::string::npos) << why(r);

  const Status set = w.s.set_gpu_mig(n, 1, split.instances);
  ASSERT_TRUE(set.ok()) << set.error().message();
  EXPECT_FALSE(w.s.mig_reconfiguring(n));
  EXPECT_TRUE(w.s.pool().in_mig_mode(n, 1));
  // (The whole-GPU job now holds a reservation of the node for when GPU 0 frees; it is withdrawn
  // so that the instance is free to all.)
  ASSERT_TRUE(w.s.job_finished(whole, 25).ok());
  w.now = 30;
  r = w.run();
  ASSERT_EQ(r.starts.size(), 1u);
  EXPECT_EQ(r.starts.front().job, inference);
  EXPECT_EQ(r.starts.front().placement.front().mig, *w.s.catalog().find_mig_profile("3g.71gb"));
  EXPECT_TRUE(w.running(busy));
}

TEST(DynamicMig, ANodeReservedForAJobNamingAProfileIsStillSplitForIt) {
  // GPU 1's two 3g.71gb instances are busy; a third job naming the profile waits and holds the
  // node's reservation. The reservation is no reason to keep GPU 0 whole: the split is for it.
  World w(dynamic());
  const NodeId n = w.add_nodes(1, 2, "H200").front();
  const BudgetId b = w.budget("/lab/a");
  const JobId first = w.submit(named(w, b, "3g.71gb"));
  CycleResult r = w.run();
  ASSERT_EQ(r.repartitions.size(), 1u);
  ASSERT_TRUE(
      w.s.set_gpu_mig(n, r.repartitions.front().gpu, r.repartitions.front().instances).ok());
  const JobId second = w.submit(named(w, b, "3g.71gb"));
  w.now = 10;
  r = w.run();
  ASSERT_EQ(r.starts.size(), 2u);
  EXPECT_TRUE(w.running(first) && w.running(second));
  const JobId third = w.submit(named(w, b, "3g.71gb"));
  w.now = 20;
  r = w.run();
  EXPECT_TRUE(r.starts.empty());
  ASSERT_EQ(r.repartitions.size(), 1u);
  EXPECT_EQ(r.repartitions.front().for_job, third);
  EXPECT_NE(r.repartitions.front().gpu, w.s.pool().in_mig_mode(n, 0) ? 0 : 1);
}

TEST(DynamicMig, StaticLayoutsAreNeverChanged) {
  World w;  // mig_dynamic off
  w.add_nodes(1, 1, "H200");
  const BudgetId b = w.budget("/lab/a");
  w.submit(named(w, b, "1g.18gb"));
  const CycleResult r = w.run();
  EXPECT_TRUE(r.repartitions.empty());
  EXPECT_TRUE(r.starts.empty());  // waits for an instance no node has
}

TEST(DynamicMig, GpusOfModelsWithoutMigOrOfReservedNodesAreNotSplit) {
  World w(dynamic());
  w.add_nodes(1, 1, "L40S");
  const BudgetId b = w.budget("/lab/a");
  const JobId j = w.submit(named(w, b, "1g.18gb"));
  const CycleResult r = w.run();
  EXPECT_TRUE(r.repartitions.empty());
  ASSERT_EQ(r.waiting.size(), 1u);
  EXPECT_EQ(r.waiting.front().job, j);
  EXPECT_NE(w.s.describe(r.waiting.front()).find("change the request"), std::string::npos)
      << w.s.describe(r.waiting.front());
}

TEST(DynamicMig, AJobWithNoIdleGpuToSplitIsToldItWillBeSplitOneWhenOneFrees) {
  World w(dynamic());
  w.add_nodes(1, 1, "H200");
  const BudgetId b = w.budget("/lab/a");
  w.submit(b, 1);
  ASSERT_EQ(w.run().starts.size(), 1u);
  const JobId j = w.submit(named(w, b, "1g.18gb"));
  const CycleResult r = w.run();
  EXPECT_TRUE(r.repartitions.empty());
  ASSERT_EQ(r.waiting.size(), 1u);
  EXPECT_EQ(r.waiting.front().job, j);
  EXPECT_NE(w.s.describe(r.waiting.front()).find("splits an idle GPU for it when one is free"),
            std::string::npos)
      << w.s.describe(r.waiting.front());
}

TEST(DynamicMig, WholeGpuWorkTakesIdleMigGpusBackAndTheHoldBoundsFlapping) {
  World w(dynamic());
  const NodeId n = w.add_nodes(1, 2, "H200").front();
  const BudgetId b = w.budget("/lab/a");
  const JobId small = w.submit(named(w, b, "1g.18gb"));
  CycleResult r = w.run();
  // Both GPUs are idle: the planner splits one (the higher index), which the job then uses.
  ASSERT_EQ(r.repartitions.size(), 1u);
  EXPECT_EQ(r.repartitions.front().gpu, 1);
  EXPECT_EQ(names(w.s, r.repartitions.front().instances), (Names{"1g.18gb", "4g.71gb", "2g.35gb"}));
  const std::vector<MigInstance> layout = r.repartitions.front().instances;
  // While GPU 1 is re-partitioned the job is served by it: GPU 0, idle too, is left whole.
  w.now = 5;
  EXPECT_TRUE(w.run().repartitions.empty());
  ASSERT_TRUE(w.s.set_gpu_mig(n, 1, layout).ok());
  w.now = 60;
  r = w.run();
  ASSERT_EQ(r.starts.size(), 1u);
  ASSERT_TRUE(w.s.job_finished(small, 120).ok());

  // A 2-GPU job waits: GPU 1 is idle in MIG mode but was split under the hold (10 min).
  const JobId training = w.submit(b, 2);
  w.now = 180;
  r = w.run();
  EXPECT_TRUE(r.starts.empty());
  EXPECT_TRUE(r.repartitions.empty());
  EXPECT_EQ(w.s.next_wakeup(), 10 * kMinute);

  w.now = 10 * kMinute;
  r = w.run();
  ASSERT_EQ(r.repartitions.size(), 1u);
  EXPECT_EQ(r.repartitions.front().gpu, 1);
  EXPECT_TRUE(r.repartitions.front().instances.empty());  // whole again
  ASSERT_TRUE(w.s.set_gpu_mig(n, 1, {}).ok());
  EXPECT_TRUE(w.s.nodes()[n].spec.mig.empty());
  w.now += 30;
  r = w.run();
  ASSERT_EQ(r.starts.size(), 1u);
  EXPECT_EQ(r.starts.front().job, training);
}

TEST(DynamicMig, AMergeThatWouldNotLetWholeWorkFitIsNotMade) {
  World w(dynamic());
  const MigProfileId p = *w.s.catalog().find_mig_profile("1g.18gb");
  w.mig_node({std::vector<MigInstance>(7, MigInstance{p, 142}), {}});
  const BudgetId b = w.budget("/lab/a");
  w.submit(b, 4);  // more than the node has, whatever is merged
  EXPECT_TRUE(w.run().repartitions.empty());
}

TEST(DynamicMig, ANodeThatAchievedNothingGetsItsGpuBack) {
  World w(dynamic());
  const NodeId n = w.add_nodes(1, 1, "H200").front();
  const BudgetId b = w.budget("/lab/a");
  w.submit(named(w, b, "2g.35gb"));
  ASSERT_EQ(w.run().repartitions.size(), 1u);
  // The report brings the layout as it was (the agent could not split it): the plan is dropped
  // and the GPU takes work again; the hold keeps the planner from asking again at once.
  w.s.cancel_mig_plans(n);
  EXPECT_FALSE(w.s.mig_reconfiguring(n));
  const JobId whole = w.submit(b, 1);
  w.now = 30;
  const CycleResult r = w.run();
  EXPECT_TRUE(r.repartitions.empty());
  ASSERT_EQ(r.starts.size(), 1u);
  EXPECT_EQ(r.starts.front().job, whole);
}

TEST(DynamicMig, ACopyOfTheSchedulerKeepsItsPlans) {
  World w(dynamic());
  const NodeId n = w.add_nodes(1, 1, "H200").front();
  const BudgetId b = w.budget("/lab/a");
  w.submit(named(w, b, "1g.18gb"));
  ASSERT_EQ(w.run().repartitions.size(), 1u);
  Scheduler copy = w.s;
  EXPECT_TRUE(copy.mig_reconfiguring(n));
  EXPECT_EQ(copy.pool().whole_free(n), 0);
}

// §7.5 "Yield": whole-GPU work with a contract its budget can afford takes a GPU in MIG mode back
// from unallocated work on its instances; allocated or shielded work is never taken.
TEST(DynamicMig, UnallocatedWorkOnInstancesYieldsToTrainingThatWaits) {
  PolicyConfig config = dynamic();
  config.mig_yield = true;
  World w(config);
  NodeSpec spec;
  spec.name = "mig";
  spec.model = w.model("H200");
  spec.gpus = 2;
  const MigProfileId p = *w.s.catalog().find_mig_profile("3g.71gb");
  spec.mig = {{MigInstance{p, 428}, MigInstance{p, 428}}, {}};
  const NodeId n = w.s.add_node(spec).value();
  const BudgetId serve = w.budget("/lab/serve");
  const BudgetId train = w.budget("/lab/train");
  // Two inference jobs on GPU 0's instances: one unallocated by choice, one with a contract.
  JobSpec free_job = named(w, serve, "3g.71gb");
  free_job.min_runtime = 0;
  const JobId unallocated = w.submit(free_job);
  JobSpec protected_job = named(w, serve, "3g.71gb");
  protected_job.min_runtime = kHour;
  const JobId allocated = w.submit(protected_job);
  ASSERT_EQ(w.run().starts.size(), 2u);
  // Training needs both GPUs: GPU 0 holds allocated work, so nothing yields.
  const JobId training = w.submit(train, 2);
  w.now = 60;
  CycleResult r = w.run();
  EXPECT_TRUE(r.stops.empty());
  EXPECT_TRUE(r.repartitions.empty());
  // The allocated job ends: only unallocated work is left on GPU 0, and it yields.
  ASSERT_TRUE(w.s.job_finished(allocated, 120).ok());
  w.now = 120;
  r = w.run();
  ASSERT_EQ(r.stops.size(), 1u);
  EXPECT_EQ(r.stops.front().job, unallocated);
  EXPECT_EQ(r.stops.front().for_job, training);
  ASSERT_EQ(r.repartitions.size(), 1u);
  EXPECT_EQ(r.repartitions.front().gpu, 0);
  EXPECT_TRUE(r.repartitions.front().instances.empty());
  w.carry_out(r);
  ASSERT_TRUE(w.s.set_gpu_mig(n, 0, {}).ok());
  w.now = 150;
  r = w.run();
  ASSERT_EQ(r.starts.size(), 1u);
  EXPECT_EQ(r.starts.front().job, training);
}

// The bound: GPUs in MIG mode yield only while more than the inference tier's share of the
// cluster's GPUs are in MIG mode, and never below it.
TEST(DynamicMig, InstancesYieldOnlyAboveTheInferenceTiersShare) {
  for (const double share : {0.0, 0.25, 0.5}) {
    PolicyConfig config = dynamic();
    config.mig_yield = true;
    config.inference_share = share;
    World w(config);
    const MigProfileId p = *w.s.catalog().find_mig_profile("3g.71gb");
    const std::vector<MigInstance> split = {MigInstance{p, 428}, MigInstance{p, 428}};
    // 4 GPUs: two in MIG mode, two whole.
    const NodeId n = w.mig_node({split, split, {}, {}});
    const BudgetId serve = w.budget("/lab/serve");
    const BudgetId train = w.budget("/lab/train");
    std::vector<JobId> instances;
    for (int k = 0; k < 4; ++k) {  // every instance busy with unallocated work
      JobSpec j = named(w, serve, "3g.71gb");
      j.min_runtime = 0;
      instances.push_back(w.submit(j));
    }
    const JobId busy = w.submit(train, 2);  // the whole GPUs
    ASSERT_EQ(w.run().starts.size(), 5u);
    const JobId training = w.submit(train, 1);
    w.now = 60;
    const CycleResult r = w.run();
    // Share 0: down to no GPU in MIG mode; 0.25 (1 GPU): one may go; 0.5 (2): none.
    const std::size_t yielded = share == 0.5 ? 0u : 1u;
    EXPECT_EQ(r.repartitions.size(), yielded) << share;
    EXPECT_EQ(r.stops.size(), 2 * yielded) << share;  // the two instances of one GPU
    for (const StopDecision& d : r.stops) EXPECT_EQ(d.for_job, training);
    EXPECT_TRUE(w.running(busy));
    if (yielded == 0) continue;
    // Once that GPU is whole again and the training runs on it, the next request finds the
    // tier at its share (0.25) and nothing more yields; at 0 the last MIG GPU may go too.
    w.carry_out(r);
    ASSERT_TRUE(w.s.set_gpu_mig(n, r.repartitions.front().gpu, {}).ok());
    w.now = 120;
    ASSERT_EQ(w.run().starts.size(), 1u);
    w.submit(train, 1);
    w.now = 180;
    const CycleResult again = w.run();
    EXPECT_EQ(again.repartitions.size(), share == 0 ? 1u : 0u) << share;
  }
}

TEST(DynamicMig, WithoutYieldInstancesAreNeverPreemptedForWholeGpus) {
  World w(dynamic());
  NodeSpec spec;
  spec.name = "mig";
  spec.model = w.model("H200");
  spec.gpus = 1;
  const MigProfileId p = *w.s.catalog().find_mig_profile("3g.71gb");
  spec.mig = {{MigInstance{p, 428}, MigInstance{p, 428}}};
  ASSERT_TRUE(w.s.add_node(spec).ok());
  const BudgetId serve = w.budget("/lab/serve");
  const BudgetId train = w.budget("/lab/train");
  JobSpec free_job = named(w, serve, "3g.71gb");
  free_job.min_runtime = 0;
  w.submit(free_job);
  ASSERT_EQ(w.run().starts.size(), 1u);
  w.submit(train, 1);
  w.now = 3600;
  const CycleResult r = w.run();
  EXPECT_TRUE(r.stops.empty());
  EXPECT_TRUE(r.repartitions.empty());
}

// §7.5 "Split over unallocated work": a job naming a profile, with a contract and its budget
// below its share, has the unallocated work on one whole GPU preempted and the GPU split for it;
// allocated work is never taken, nor anything without the switch or for a job without a contract.
TEST(DynamicMig, UnallocatedWholeGpuWorkIsPreemptedToSplitForAProfileWithAContract) {
  for (const bool on : {false, true}) {
    SCOPED_TRACE(on ? "on" : "off");
    PolicyConfig config = dynamic();
    config.mig_split_unallocated = on;
    World w(config);
    const NodeId n = w.add_nodes(1, 2, "H200").front();
    const BudgetId serve = w.budget("/lab/serve");
    const BudgetId train = w.budget("/lab/train");
    const JobId unallocated = w.submit(train, 1, 0);
    const JobId allocated = w.submit(train, 1, kHour);
    ASSERT_EQ(w.run().starts.size(), 2u);
    const int free_gpu = w.s.job(unallocated)->run.placement.front().gpu;
    // Unallocated by choice: waits for an idle GPU, takes none.
    JobSpec by_choice = named(w, serve, "3g.71gb");
    by_choice.min_runtime = 0;
    const JobId first = w.submit(by_choice);
    w.now = 60;
    CycleResult r = w.run();
    EXPECT_TRUE(r.stops.empty());
    EXPECT_TRUE(r.repartitions.empty());
    // With a contract: the unallocated training yields its GPU (switch on), split for both.
    const JobId contract = w.submit(named(w, serve, "3g.71gb"));
    w.now = 120;
    r = w.run();
    if (!on) {
      EXPECT_TRUE(r.stops.empty());
      EXPECT_TRUE(r.repartitions.empty());
      continue;
    }
    ASSERT_EQ(r.stops.size(), 1u);
    EXPECT_EQ(r.stops.front().job, unallocated);
    EXPECT_EQ(r.stops.front().for_job, contract);
    ASSERT_EQ(r.repartitions.size(), 1u);
    EXPECT_EQ(r.repartitions.front().gpu, free_gpu);
    EXPECT_EQ(r.repartitions.front().for_job, contract);
    EXPECT_EQ(names(w.s, r.repartitions.front().instances),
              (std::vector<std::string>{"3g.71gb", "3g.71gb"}));
    EXPECT_TRUE(w.running(allocated));
    w.carry_out(r);
    ASSERT_TRUE(w.s.set_gpu_mig(n, free_gpu, r.repartitions.front().instances).ok());
    w.now = 150;
    r = w.run();
    EXPECT_TRUE(w.running(first));
    EXPECT_TRUE(w.running(contract));
    EXPECT_FALSE(w.running(unallocated));
  }
}

// The bound: splits over unallocated work stop once the inference tier's share of the cluster's
// GPUs is in MIG mode.
TEST(DynamicMig, SplitsOverUnallocatedWorkStopAtTheInferenceTiersShare) {
  for (const double share : {0.25, 0.5}) {
    SCOPED_TRACE(share);
    PolicyConfig config = dynamic();
    config.mig_split_unallocated = true;
    config.inference_share = share;
    World w(config);
    const MigProfileId p = *w.s.catalog().find_mig_profile("3g.71gb");
    // 4 GPUs: GPU 0 in MIG mode, busy; GPUs 1-3 whole, each with unallocated training.
    w.mig_node({{MigInstance{p, 428}, MigInstance{p, 428}}, {}, {}, {}});
    const BudgetId serve = w.budget("/lab/serve");
    const BudgetId train = w.budget("/lab/train");
    for (int k = 0; k < 2; ++k) w.submit(named(w, serve, "3g.71gb"));
    for (int k = 0; k < 3; ++k) w.submit(train, 1, 0);
    ASSERT_EQ(w.run().starts.size(), 5u);
    w.submit(named(w, serve, "3g.71gb"));
    w.now = 60;
    const CycleResult r = w.run();
    // 0.25 of 4 GPUs is one, already in MIG mode; 0.5 is two: one more may be split.
    EXPECT_EQ(r.stops.size(), share < 0.5 ? 0u : 1u);
    EXPECT_EQ(r.repartitions.size(), share < 0.5 ? 0u : 1u);
  }
}

}  // namespace
}  // namespace allot::core
