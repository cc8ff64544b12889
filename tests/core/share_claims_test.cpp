// Share claims (docs/policy.md section 8): unfunded work of a leaf within its share of the cluster
// takes unallocated work of leaves above theirs, and nothing else.
#include <gtest/gtest.h>

#include <algorithm>

#include "world.h"

namespace allot::core {
namespace {

using testing::World;

// Two nodes of 8 GPUs; /a, /b and /c have a third of the cluster each (5.33 GPUs).
struct ShareClaims : ::testing::Test {
  World w;
  BudgetId a = 0, b = 0, c = 0;
  explicit ShareClaims(PolicyConfig config = {}) : w(config) {}
  void SetUp() override {
    w.add_nodes(2);
    a = w.budget("/a");
    b = w.budget("/b");
    c = w.budget("/c");
    w.now = 7 * kDay;
    w.s.advance(w.now);
  }
  // Free work (minimum runtime 0, resumable) of `budget`, started now.
  JobId free_work(BudgetId budget, int gpus) {
    JobSpec j = w.job(budget, gpus, 0);
    j.resumable = true;
    const JobId id = w.submit(j);
    w.carry_out(w.run());
    EXPECT_TRUE(w.running(id));
    return id;
  }
};

TEST_F(ShareClaims, FreeWorkWithinItsShareTakesFreeWorkAboveShare) {
  const JobId big = free_work(a, 8);
  const JobId other = free_work(a, 8);  // /a runs 16 GPUs, three times its share
  w.now += 60;
  const JobId claim = w.submit(w.job(b, 4, 0));  // free work too: never funded
  auto r = w.run();
  ASSERT_TRUE(World::started(r, claim));
  EXPECT_FALSE(w.allocated(claim)) << "a claim starts unallocated: it is not charged";
  ASSERT_EQ(r.starts.size(), 1u);
  EXPECT_EQ(r.starts[0].mode, StartMode::Preempting);
  ASSERT_EQ(r.starts[0].victims.size(), 1u);
  const JobId victim = r.starts[0].victims[0];
  EXPECT_TRUE(victim == big || victim == other);
  const StopDecision* stop = World::stopped(r, victim);
  ASSERT_NE(stop, nullptr);
  EXPECT_EQ(stop->victim.cls, VictimClass::AboveShare);
  EXPECT_EQ(stop->victim.victim_branch, a);
  EXPECT_EQ(stop->victim.requester_branch, b);
  EXPECT_NE(w.s.describe(*stop).find("/a ran above its share"), std::string::npos)
      << w.s.describe(*stop);
}

TEST_F(ShareClaims, NotBeyondTheClaimantsOwnShare) {
  free_work(a, 8);
  free_work(a, 8);
  w.now += 60;
  const JobId too_big = w.submit(w.job(b, 8, 0));  // 8 GPUs > /b's 5.33
  auto r = w.run();
  EXPECT_TRUE(r.stops.empty());
  EXPECT_TRUE(w.pending(too_big));
}

TEST_F(ShareClaims, NeverFromALeafWithinItsShare) {
  free_work(a, 4);                  // within /a's share
  free_work(c, 4);                  // within /c's share
  JobSpec pinned = w.job(c, 8, 0);  // fills the rest: /c now runs 12, above its share
  pinned.resumable = true;
  const JobId above = w.submit(pinned);
  w.carry_out(w.run());
  ASSERT_TRUE(w.running(above));
  w.now += 60;
  const JobId claim = w.submit(w.job(b, 4, 0));
  auto r = w.run();
  ASSERT_TRUE(World::started(r, claim));
  for (const StopDecision& s : r.stops) {
    EXPECT_EQ(w.s.job(s.job)->spec.budget, c) << "only /c runs above its share";
  }
}

struct ShareClaimsNoBurstLimit : ShareClaims {
  static PolicyConfig no_cap() {
    PolicyConfig config;
    config.burst_limit = 0;  // so that /a funds both of its jobs
    return config;
  }
  ShareClaimsNoBurstLimit() : ShareClaims(no_cap()) {}
};

TEST_F(ShareClaimsNoBurstLimit, NeverTakesAllocatedWork) {
  // /a holds the cluster with allocated, resumable work past its contract; /b is within its share
  // and stands no worse than /a (neither has used anything), so no tier of section 8 applies.
  for (int i = 0; i < 2; ++i) {
    JobSpec j = w.job(a, 8, kHour);
    j.resumable = true;
    w.submit(j);
  }
  w.carry_out(w.run());
  for (const auto& [id, entry] : w.s.jobs()) ASSERT_TRUE(w.allocated(id));
  w.now += 2 * kHour;
  const JobId claim = w.submit(w.job(b, 4, 0));
  auto r = w.run();
  EXPECT_TRUE(r.stops.empty()) << "a claim takes only unallocated work";
  EXPECT_TRUE(w.pending(claim));
}

TEST_F(ShareClaims, AFundedRequestStillPreemptsAsBefore) {
  free_work(a, 8);
  free_work(a, 8);
  w.now += 60;
  const JobId funded = w.submit(w.job(b, 4, kHour));
  auto r = w.run();
  ASSERT_TRUE(World::started(r, funded));
  EXPECT_TRUE(w.allocated(funded));
  ASSERT_FALSE(r.stops.empty());
  EXPECT_EQ(r.stops[0].victim.cls, VictimClass::Unallocated);
}

struct ShareClaimsOff : ShareClaims {
  static PolicyConfig off() {
    PolicyConfig config;
    config.share_claims = false;
    return config;
  }
  ShareClaimsOff() : ShareClaims(off()) {}
};

TEST_F(ShareClaimsOff, FreeWorkWaitsForIdleGpus) {
  free_work(a, 8);
  free_work(a, 8);
  w.now += 60;
  const JobId waiting = w.submit(w.job(b, 4, 0));
  auto r = w.run();
  EXPECT_TRUE(r.stops.empty());
  EXPECT_TRUE(w.pending(waiting));
}

// A claim and a reservation in the same cycle: three nodes; /c runs allocated work protected for
// 2 h on one, /a free work on the others (one ends in 1 h, one in 3 h). /b's free 2 x 8 request
// can neither preempt (it is not funded) nor claim (16 GPUs exceed /b's share of 8), so, first
// blocked, it reserves the two nodes that free first; /b's claim, ranked after it, may take only
// /a's work on the third.
struct ShareClaimsBesideAReservation : ::testing::Test {
  World w;
  BudgetId a = 0, b = 0, c = 0;
  JobId protected_work = 0, ends_soon = 0, ends_late = 0;
  void SetUp() override {
    w.add_nodes(3);
    a = w.budget("/a");
    b = w.budget("/b");
    c = w.budget("/c");
    w.now = 7 * kDay;
    w.s.advance(w.now);
    JobSpec held = w.job(c, 8, 2 * kHour);
    held.expected_duration = 2 * kHour;
    protected_work = w.submit(held);
    w.carry_out(w.run());
    for (Duration d : {kHour, 3 * kHour}) {
      JobSpec free = w.job(a, 8, 0);
      free.resumable = true;
      free.expected_duration = d;
      (d == kHour ? ends_soon : ends_late) = w.submit(free);
      w.carry_out(w.run());
    }
    ASSERT_TRUE(w.allocated(protected_work));
    ASSERT_TRUE(w.running(ends_soon) && w.running(ends_late));
    w.now += 60;
  }
  NodeId node_of(JobId id) const { return w.s.job(id)->run.placement.front().node; }
};

TEST_F(ShareClaimsBesideAReservation, TheClaimTakesOnlyWorkOffTheReservedNodes) {
  JobSpec two_nodes = w.job(b, 8, 0);  // 2 x 8, free work
  two_nodes.shape.nodes = 2;
  const JobId gang = w.submit(two_nodes);
  const JobId claim = w.submit(w.job(b, 4, 0));
  const NodeId late_node = node_of(ends_late);
  auto r = w.run();
  ASSERT_EQ(r.reservations.size(), 1u);
  EXPECT_EQ(r.reservations[0].job, gang);
  const auto& reserved = r.reservations[0].nodes;
  ASSERT_EQ(reserved.size(), 2u);
  EXPECT_EQ(std::count(reserved.begin(), reserved.end(), late_node), 0)
      << "the node that frees last is not reserved";
  ASSERT_TRUE(World::started(r, claim));
  EXPECT_FALSE(w.allocated(claim));
  ASSERT_EQ(r.stops.size(), 1u);
  EXPECT_EQ(r.stops[0].job, ends_late) << "only work off the reserved nodes is claimed";
  EXPECT_EQ(r.stops[0].victim.cls, VictimClass::AboveShare);
  EXPECT_EQ(node_of(claim), late_node);
  EXPECT_TRUE(w.running(ends_soon)) << "work on a reserved node is left to end as declared";
}

}  // namespace
}  // namespace allot::core
