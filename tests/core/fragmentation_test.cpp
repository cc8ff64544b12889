// The fragmentation measure and the fragmentation-aware placement (docs/policy.md section 14), on
// small nodes computed by hand.
#include "core/fragmentation.h"

#include <gtest/gtest.h>

#include "core/fragmentation_placement.h"
#include "world.h"

namespace allot::core {
namespace {

FragNode node(std::vector<Milli> free, std::int64_t cpu = 10000, std::int64_t mem = 1000,
              std::string model = "T4") {
  return FragNode{std::move(model), std::move(free), cpu, mem};
}

FragRequest req(int gpus, Milli milli, std::int64_t cpu = 0, std::int64_t mem = 0) {
  FragRequest r;
  r.gpus = gpus;
  r.milli = milli;
  r.cpu_milli = cpu;
  r.memory_mib = mem;
  return r;
}

TEST(FragmentationMeasure, AFractionCannotUseTheGpusWithLessRoomThanItAsks) {
  const FragNode n = node({1000, 500, 200, 0});
  EXPECT_EQ(fragmentation(n, req(1, 300)), 200);   // only the 200 left on GPU 2
  EXPECT_EQ(fragmentation(n, req(1, 500)), 200);   // 500 is room enough for 500
  EXPECT_EQ(fragmentation(n, req(1, 600)), 700);   // GPUs 1 and 2
  EXPECT_EQ(fragmentation(n, req(1, 1000)), 700);  // a whole GPU: only GPU 0 is whole
}

TEST(FragmentationMeasure, ARequestThatDoesNotFitCannotUseAnyOfTheNode) {
  const FragNode n = node({1000, 500, 200, 0});
  EXPECT_EQ(fragmentation(n, req(2, 1000)), 1700);          // one whole GPU, two asked
  EXPECT_EQ(fragmentation(n, req(1, 300, 20000)), 1700);    // too little CPU
  EXPECT_EQ(fragmentation(n, req(1, 300, 0, 2000)), 1700);  // too little memory
  FragRequest v100 = req(1, 300);
  v100.models = {"V100M16", "V100M32"};
  EXPECT_EQ(fragmentation(n, v100), 1700);  // a model the node does not have
  v100.models.emplace_back("T4");
  EXPECT_EQ(fragmentation(n, v100), 200);
  EXPECT_EQ(fragmentation(n, req(0, 0, 1000)), 1700);  // CPU only: uses no GPU
}

TEST(FragmentationMeasure, OfAWorkloadIsTheExpectedValue) {
  const FragNode n = node({1000, 500, 200, 0});
  const std::vector<WorkloadShare> w = {
      {req(1, 300), 0.5}, {req(1, 1000), 0.25}, {req(2, 1000), 0.25}};
  // 0.5 x 200 + 0.25 x 700 + 0.25 x 1700
  EXPECT_DOUBLE_EQ(fragmentation(n, w), 700.0);
  EXPECT_DOUBLE_EQ(fragmentation(node({0, 0}), w), 0.0);  // nothing free, nothing fragmented
}

TEST(FragmentationAwarePlacement, PicksTheChoiceThatFragmentsLeastNotTheTightestGpu) {
  // Workload: every pod asks for half a GPU. Node 0 has 600 free on its GPU, node 1 a whole GPU.
  const std::vector<WorkloadShare> w = {{req(1, 500), 1.0}};
  const std::vector<FragNode> nodes = {node({600}), node({1000})};
  // 200 on node 0 leaves 400 (< 500: fragmentation 0 -> 400); on node 1 it leaves 800 (still 0).
  // Best fit would take node 0's fuller GPU; the gradient rule takes node 1.
  auto c = least_fragmenting(nodes, req(1, 200), w);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->node, 1u);
  EXPECT_EQ(c->gpus, std::vector<int>{0});
  EXPECT_DOUBLE_EQ(c->increase, 0.0);
  // 100 on node 0 leaves 500, usable by the workload: no rise there either, and node 0 is lower.
  c = least_fragmenting(nodes, req(1, 100), w);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->node, 0u);
}

TEST(FragmentationAwarePlacement, ChoosesAGpuWithinANodeAndCanLowerFragmentation) {
  const std::vector<WorkloadShare> w = {{req(1, 500), 1.0}};
  // Before: GPU 1's 400 is fragmentation (400). 300 on GPU 1 leaves 100 (-300); on GPU 0 it
  // leaves 700 and 400 (+0). A fragment that is filled counts as a fall.
  const std::vector<FragNode> nodes = {node({1000, 400})};
  auto c = least_fragmenting(nodes, req(1, 300), w);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->gpus, std::vector<int>{1});
  EXPECT_DOUBLE_EQ(c->increase, -300.0);
  // The same with the caller's record of the node's fragmentation.
  const std::vector<double> before = {fragmentation(nodes[0], w)};
  EXPECT_DOUBLE_EQ(before[0], 400.0);
  auto d = least_fragmenting(nodes, req(1, 300), w, before);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->gpus, c->gpus);
  EXPECT_DOUBLE_EQ(d->increase, c->increase);
}

TEST(FragmentationAwarePlacement, WholeGpusAndNowhereToGo) {
  const std::vector<WorkloadShare> w = {{req(1, 1000), 0.5}, {req(4, 1000), 0.5}};
  // Two whole GPUs on a 4-GPU empty node (before 0, after: 0.5 x 0 + 0.5 x 2000 = 1000) or on a
  // node with exactly two left (before 0.5 x 2000 = 1000, after 0): the second.
  const std::vector<FragNode> nodes = {node({1000, 1000, 1000, 1000}), node({0, 1000, 0, 1000})};
  auto c = least_fragmenting(nodes, req(2, 1000), w);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->node, 1u);
  EXPECT_EQ(c->gpus, (std::vector<int>{1, 3}));
  EXPECT_DOUBLE_EQ(c->increase, -1000.0);
  EXPECT_FALSE(least_fragmenting(nodes, req(8, 1000), w));
  EXPECT_FALSE(least_fragmenting(nodes, req(1, 100, 50000), w));  // no node has the CPU
  const FragNode taken = after(nodes[1], req(2, 1000, 300, 10), c->gpus);
  EXPECT_EQ(taken.gpu_free, (std::vector<Milli>{0, 0, 0, 0}));
  EXPECT_EQ(taken.cpu_free, 9700);
  EXPECT_EQ(taken.memory_free, 990);
}

TEST(RecentRequests, KeepsTheLastSingleNodeRequestsAsShares) {
  RecentRequests recent(4);
  recent.note(Shape{1, 1, 500});
  recent.note(Shape{2, 8, kWholeGpu});  // a gang: not a request one node can serve
  recent.note(Shape{1, 1, 500});
  recent.note(Shape{1, 2, kWholeGpu});
  recent.note(Shape{1, 1, 300});
  recent.note(Shape{1, 1, 300});  // the first 500 falls out of the window of 4
  EXPECT_EQ(recent.size(), 4u);
  const auto w = recent.workload();
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].request.milli, 500);
  EXPECT_DOUBLE_EQ(w[0].probability, 0.25);
  EXPECT_EQ(w[1].request.gpus, 2);
  EXPECT_DOUBLE_EQ(w[1].probability, 0.25);
  EXPECT_EQ(w[2].request.milli, 300);
  EXPECT_DOUBLE_EQ(w[2].probability, 0.5);
}

TEST(FragmentationAwarePlacement, OnTheSchedulersPoolItDiffersFromBestFit) {
  GpuPool pool;
  for (NodeId id = 0; id < 2; ++id) {
    Node n;
    n.id = id;
    n.spec.gpus = 1;
    pool.add_node(n);
  }
  pool.take({GpuSlot{0, 0, 400}});  // node 0: 600 free on its GPU; node 1: a whole GPU
  RecentRequests recent;
  for (int k = 0; k < 3; ++k) recent.note(Shape{1, 1, 500});
  const Shape share{1, 1, 200};
  // Best fit: the fullest partly used GPU (node 0), leaving 400 that no 500 request can use.
  auto best = pool.find(0, share, {}, nullptr, true);
  ASSERT_TRUE(best);
  EXPECT_EQ(best->front().node, 0u);
  // The gradient rule: node 1 (800 left, still usable), as the hand computation above says.
  const std::vector<NodeId> candidates = {0, 1};
  const auto w = recent.workload();
  auto frag = least_fragmenting_placement(pool, candidates, share, {}, w);
  ASSERT_TRUE(frag);
  ASSERT_EQ(frag->size(), 1u);
  EXPECT_EQ(frag->front(), (GpuSlot{1, 0, 200}));
  pool.set_schedulable(1, false);  // an unschedulable node is no candidate
  frag = least_fragmenting_placement(pool, candidates, share, {}, w);
  ASSERT_TRUE(frag);
  EXPECT_EQ(frag->front().node, 0u);
  EXPECT_FALSE(least_fragmenting_placement(pool, candidates, Shape{2, 1, kWholeGpu}, {}, w));
}

// The scheduler with PlacementRule::LeastFragmenting: where the request goes, for the mix of
// requests it saw; with BestFit, the same world places it on the fuller GPU.
std::vector<NodeId> nodes_of_share_after_recent_halves(PlacementRule rule) {
  PolicyConfig config;
  config.placement = rule;
  testing::World w(config);
  w.add_nodes(2, 1);
  const BudgetId b = w.budget("/lab");
  auto share = [&](Milli milli) {
    JobSpec j = w.job(b, 1, 0);
    j.shape.gpu_milli = milli;
    return w.submit(j);
  };
  const JobId a = share(400);
  const CycleResult first = w.run();
  EXPECT_TRUE(testing::World::started(first, a));
  // Three requests for half a GPU, cancelled before they ran: the recent mix is 400, 3 x 500 and
  // then 200, and the 200 arrives now.
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(w.s.job_finished(share(500), w.now).ok());
  const JobId c = share(200);
  w.now += kMinute;
  w.run();
  std::vector<NodeId> out;
  for (JobId id : {a, c}) out.push_back(w.s.job(id)->run.placement.at(0).node);
  return out;
}

TEST(FragmentationAwarePlacement, TheSchedulerPlacesByTheRecentMixWhenAsked) {
  // Both rules put the first share (400) on node 0. The 200 then goes, by best fit, to node 0's
  // partly used GPU, leaving 400 that no 500 can use (expected fragmentation 0.6 x 400 = 240); by
  // the gradient, to node 1, where the 800 left still serves every request of the mix (0).
  EXPECT_EQ(nodes_of_share_after_recent_halves(PlacementRule::BestFit),
            (std::vector<NodeId>{0, 0}));
  EXPECT_EQ(nodes_of_share_after_recent_halves(PlacementRule::LeastFragmenting),
            (std::vector<NodeId>{0, 1}));
}

TEST(FragmentationAwarePlacement, TheSchedulerKeepsMigGpusOutOfWholeRequests) {
  PolicyConfig config;
  config.placement = PlacementRule::LeastFragmenting;
  testing::World w(config);
  // GPU 0 split into one 7g instance (a whole GPU's share, never a whole GPU), GPU 1 whole.
  const MigProfileId seven = *w.s.catalog().find_mig_profile("7g.141gb");
  w.mig_node({{MigInstance{seven, kWholeGpu}}, {}});
  const JobId j = w.submit(w.budget("/lab"), 1, 0);
  w.run();
  ASSERT_TRUE(w.running(j));
  EXPECT_EQ(w.s.job(j)->run.placement, (Placement{GpuSlot{0, 1}}));
}

}  // namespace
}  // namespace allot::core
