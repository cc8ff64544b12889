// Health: unhealthy nodes get no work and drain as their jobs reach minimum runtime.
#include <gtest/gtest.h>

#include "world.h"

namespace allot::core {
namespace {

using testing::World;

TEST(Drain, UnhealthyNodeGetsNoNewWork) {
  World w;
  const auto nodes = w.add_nodes(2);
  const BudgetId a = w.budget("/a");
  ASSERT_TRUE(w.s.set_node_health(nodes[0], NodeHealth::Unhealthy, "ECC errors", 0).ok());
  const JobId j1 = w.submit(a, 8), j2 = w.submit(a, 8);
  auto r = w.run();
  ASSERT_TRUE(w.running(j1));
  EXPECT_EQ(w.s.job(j1)->run.placement[0].node, nodes[1]);
  const Explanation* e = World::why(r, j2);
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->code, WaitCode::NoMatchingNodes);
  ASSERT_TRUE(w.s.set_node_health(nodes[1], NodeHealth::Down, "gone", 0).ok());
  r = w.run();
  const Explanation* e2 = World::why(r, j2);
  ASSERT_NE(e2, nullptr);
  EXPECT_EQ(e2->code, WaitCode::NoHealthyNodes);
}

TEST(Drain, JobsStopAsTheyReachTheirMinimumRuntimeAndResumableOnesRequeue) {
  World w;
  const auto nodes = w.add_nodes(2);
  const BudgetId a = w.budget("/a");
  JobSpec long_one = w.job(a, 8, 2 * kHour);
  long_one.resumable = true;
  const JobId resumable = w.submit(long_one);
  const JobId plain = w.submit(a, 8, kHour);
  w.run();
  const NodeId sick = w.s.job(resumable)->run.placement[0].node;
  const NodeId other = sick == nodes[0] ? nodes[1] : nodes[0];
  ASSERT_TRUE(w.s.set_node_health(sick, NodeHealth::Unhealthy, "XID 79", 10 * kMinute).ok());
  ASSERT_TRUE(w.s.set_node_health(other, NodeHealth::Draining, "maintenance", 10 * kMinute).ok());
  auto r = w.run_at(30 * kMinute);
  EXPECT_TRUE(r.stops.empty());
  r = w.run_at(kHour);
  ASSERT_EQ(r.stops.size(), 1u);
  EXPECT_EQ(r.stops[0].job, plain);
  EXPECT_EQ(r.stops[0].reason, StopReason::Drain);
  EXPECT_FALSE(r.stops[0].requeue);
  w.carry_out(r);
  EXPECT_EQ(w.s.job(plain), nullptr) << "a job that cannot resume ends";
  r = w.run_at(2 * kHour);
  ASSERT_EQ(r.stops.size(), 1u);
  EXPECT_EQ(r.stops[0].job, resumable);
  EXPECT_TRUE(r.stops[0].requeue);
  EXPECT_NE(w.s.describe(r.stops[0]).find("XID 79"), std::string::npos);
  w.carry_out(r);
  EXPECT_TRUE(w.pending(resumable));
  // Repaired: it runs again.
  ASSERT_TRUE(w.s.set_node_health(sick, NodeHealth::Healthy, "", 3 * kHour).ok());
  r = w.run_at(3 * kHour);
  EXPECT_TRUE(World::started(r, resumable));
}

TEST(Drain, NodeDownStopsItsJobsAtOnceEvenInsideTheContract) {
  World w;
  const auto nodes = w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  JobSpec gang = w.job(a, 8, 8 * kHour);
  const JobId j = w.submit(gang);
  w.run();
  ASSERT_TRUE(w.s.set_node_health(nodes[0], NodeHealth::Down, "power", 60).ok());
  auto r = w.run_at(60);
  ASSERT_EQ(r.stops.size(), 1u);
  EXPECT_EQ(r.stops[0].job, j);
  EXPECT_EQ(r.stops[0].reason, StopReason::NodeDown);
  EXPECT_EQ(w.s.pool().whole_free(nodes[0]), 8);
}

TEST(Drain, CordonedNodeKeepsItsJobsButTakesNoNewOnes) {
  World w;
  const auto nodes = w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  const JobId j = w.submit(a, 4, 0);
  w.run();
  ASSERT_TRUE(w.s.set_cordoned(nodes[0], true).ok());
  const JobId k = w.submit(a, 4);
  auto r = w.run_at(kDay);
  EXPECT_TRUE(r.stops.empty());
  EXPECT_TRUE(w.running(j));
  EXPECT_TRUE(w.pending(k));
}

TEST(Drain, NextWakeupNamesTheDrainDeadline) {
  World w;
  const auto nodes = w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  w.submit(a, 8, 90 * kMinute);
  w.run();
  ASSERT_TRUE(w.s.set_node_health(nodes[0], NodeHealth::Unhealthy, "hot", 60).ok());
  EXPECT_EQ(w.s.next_wakeup(), std::min<Time>(90 * kMinute, kHour));
}

}  // namespace
}  // namespace allot::core
