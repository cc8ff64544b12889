// The interactive allowance (docs/policy.md section 6, "Interactive allowance"): bounded per
// person and per budget, charged to the budget, never a victim nor demoted inside it; work beyond
// it is ordinary work.
#include <gtest/gtest.h>

#include "world.h"

namespace allot::core {
namespace {

using testing::World;

PolicyConfig allowance(int per_user, int per_budget = 32, double burst_limit = 1.1) {
  PolicyConfig c;
  c.burst_limit = burst_limit;
  c.interactive_gpus_per_user = per_user;
  c.interactive_gpus_per_budget = per_budget;
  c.interactive_protection = 4 * kHour;
  return c;
}

// Two nodes of 8 GPUs (or one); /a and /b share the cluster equally.
struct Allowance : ::testing::Test {
  World w;
  BudgetId a = 0, b = 0;
  int nodes = 2;
  explicit Allowance(PolicyConfig config = allowance(4), int node_count = 2)
      : w(config), nodes(node_count) {}
  void SetUp() override {
    w.add_nodes(nodes);
    a = w.budget("/a");
    b = w.budget("/b");
    w.now = 7 * kDay;
    w.s.advance(w.now);
  }
  JobSpec session(BudgetId budget, int gpus, const std::string& owner = "alice") {
    JobSpec j = w.job(budget, gpus, kHour);
    j.kind = JobKind::Interactive;
    j.owner = owner;
    return j;
  }
  Time allowance_until(JobId id) const { return w.s.job(id)->run.allowance_until; }
};

TEST_F(Allowance, BoundedPerPerson) {
  const JobId first = w.submit(session(a, 4));
  const JobId second = w.submit(session(a, 2));
  const JobId other = w.submit(session(a, 2, "bob"));
  auto r = w.run();
  ASSERT_TRUE(w.allocated(first) && w.allocated(second) && w.allocated(other));
  EXPECT_EQ(allowance_until(first), w.now + 4 * kHour);
  EXPECT_EQ(allowance_until(second), 0) << "alice's 4 GPUs of allowance are spent";
  EXPECT_EQ(allowance_until(other), w.now + 4 * kHour) << "bob has an allowance of his own";
  for (const StartDecision& d : r.starts) {
    EXPECT_EQ(d.allowance_until, allowance_until(d.job));
  }
}

struct AllowancePerBudget : Allowance {
  AllowancePerBudget() : Allowance(allowance(8, 6)) {}
};

TEST_F(AllowancePerBudget, BoundedPerBudget) {
  const JobId alice = w.submit(session(a, 4));
  const JobId bob = w.submit(session(a, 4, "bob"));
  const JobId carol = w.submit(session(b, 4, "carol"));
  w.run();
  EXPECT_GT(allowance_until(alice), 0);
  EXPECT_EQ(allowance_until(bob), 0) << "/a's 6 GPUs of allowance hold only one of the two";
  EXPECT_GT(allowance_until(carol), 0);
}

TEST_F(Allowance, ChargedToTheBudget) {
  const JobId s = w.submit(session(a, 4));
  w.run();
  ASSERT_GT(allowance_until(s), 0);
  w.now += kHour;
  w.s.advance(w.now);
  EXPECT_EQ(w.s.usage(w.cluster, a), 4 * kWholeGpu * kHour) << "charged like allocated work";
}

TEST_F(Allowance, NotForABudgetThatCannotAffordTheContract) {
  // /a used twice its window (8 GPUs x 7 days) already.
  w.s.record_usage(w.cluster, a, 0, 7 * kDay, 16 * kWholeGpu);
  const JobId s = w.submit(session(a, 2));
  w.run();
  ASSERT_TRUE(w.running(s));
  EXPECT_FALSE(w.allocated(s));
  EXPECT_EQ(allowance_until(s), 0) << "the allowance is funded from the budget, never beside it";
}

TEST_F(Allowance, TheBurstLimitDoesNotApply) {
  const JobId batch = w.submit(w.job(a, 8));  // /a's cap: 1.1 x 8 GPUs
  w.run();
  ASSERT_TRUE(w.allocated(batch));
  w.now += 60;
  const JobId more = w.submit(w.job(a, 2));
  const JobId s = w.submit(session(a, 2));
  w.run();
  EXPECT_FALSE(w.allocated(more)) << "ordinary work beyond the burst limit runs unallocated";
  EXPECT_TRUE(w.allocated(s));
  EXPECT_GT(allowance_until(s), 0);
}

// One node; no burst limit, so that work beyond the allowance runs allocated too.
struct AllowanceOneNode : Allowance {
  AllowanceOneNode() : Allowance(allowance(4, 32, 0.0), 1) {}
};

TEST_F(AllowanceOneNode, NeverAVictimInsideItAnOrdinaryOneBeyondIt) {
  // /a has used 6 of its 28 GPU-days: its standing is well above /b's.
  w.s.record_usage(w.cluster, a, kDay, 7 * kDay, 1 * kWholeGpu);
  const JobId inside = w.submit(session(a, 4));
  const JobId beyond = w.submit(session(a, 4));
  w.run();
  ASSERT_GT(allowance_until(inside), 0);
  ASSERT_TRUE(w.allocated(beyond));
  ASSERT_EQ(allowance_until(beyond), 0);

  w.now += 2 * kHour;  // both contracts (1 h) are over
  const JobId first = w.submit(w.job(b, 4, 6 * kHour));
  auto r = w.run();
  ASSERT_TRUE(World::started(r, first));
  EXPECT_NE(World::stopped(r, beyond), nullptr) << "beyond the allowance: an ordinary victim";
  EXPECT_EQ(World::stopped(r, inside), nullptr);
  w.carry_out(r);

  w.now += 60;
  const JobId second = w.submit(w.job(b, 4, 6 * kHour));
  r = w.run();
  EXPECT_FALSE(World::started(r, second)) << "inside the allowance: never a victim";
  EXPECT_TRUE(w.running(inside));

  w.now = w.s.job(inside)->run.allowance_until;  // its protection is over
  r = w.run();
  EXPECT_TRUE(World::started(r, second));
  EXPECT_NE(World::stopped(r, inside), nullptr);
}

TEST_F(Allowance, NeverDemotedInsideIt) {
  const JobId inside = w.submit(session(a, 4));
  const JobId batch = w.submit(w.job(a, 4));
  w.run();
  ASSERT_GT(allowance_until(inside), 0);
  ASSERT_TRUE(w.allocated(batch));
  w.now += 2 * kHour;
  // /a is now over its allocation.
  w.s.record_usage(w.cluster, a, 0, 7 * kDay, 16 * kWholeGpu);
  w.run();
  EXPECT_FALSE(w.allocated(batch)) << "past its contract and over: demoted";
  EXPECT_TRUE(w.allocated(inside)) << "inside the allowance: still allocated, still charged";
  w.now = allowance_until(inside);
  w.run();
  EXPECT_FALSE(w.allocated(inside));
}

TEST_F(Allowance, ADrainStillStopsItAtItsContract) {
  const JobId inside = w.submit(session(a, 4));
  w.run();
  ASSERT_GT(allowance_until(inside), 0);
  ASSERT_TRUE(w.s.set_node_health(0, NodeHealth::Draining, "maintenance", w.now).ok());
  w.now += kHour;
  auto r = w.run();
  ASSERT_NE(World::stopped(r, inside), nullptr);
  EXPECT_EQ(World::stopped(r, inside)->reason, StopReason::Drain);
}

TEST_F(Allowance, ProtectionCountsFromTheConfirmedStart) {
  const JobId inside = w.submit(session(a, 4));
  w.run();
  w.now += 120;
  ASSERT_TRUE(w.s.job_running(inside, w.now).ok());
  EXPECT_EQ(allowance_until(inside), w.now + 4 * kHour);
}

TEST_F(Allowance, RestoredInsideItWhileItHolds) {
  Placement p;
  for (std::uint16_t g = 0; g < 4; ++g) p.push_back(GpuSlot{0, g, kWholeGpu});
  JobSpec s = session(a, 4);
  ASSERT_TRUE(w.s.restore_running(s, w.cluster, p, w.now - 60, true, w.now - 60, w.now).ok());
  EXPECT_EQ(allowance_until(s.id), w.now - 60 + 4 * kHour);
  Placement q;
  for (std::uint16_t g = 4; g < 6; ++g) q.push_back(GpuSlot{0, g, kWholeGpu});
  JobSpec more = session(a, 2);
  ASSERT_TRUE(w.s.restore_running(more, w.cluster, q, w.now, true, w.now, w.now).ok());
  EXPECT_EQ(allowance_until(more.id), 0) << "alice's allowance is spent";
}

struct NoAllowance : Allowance {
  NoAllowance() : Allowance(allowance(0)) {}
};

TEST_F(NoAllowance, InteractiveWorkIsOrdinaryWork) {
  const JobId s = w.submit(session(a, 4));
  w.run();
  EXPECT_TRUE(w.allocated(s));
  EXPECT_EQ(allowance_until(s), 0);
}

}  // namespace
}  // namespace allot::core
