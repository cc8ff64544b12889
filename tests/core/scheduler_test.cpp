// Fair-share order, the allocated/unallocated contract, class changes, explanations, determinism.
#include <gtest/gtest.h>

#include "world.h"

namespace allot::core {
namespace {

using testing::World;

// Milli-GPU-seconds that make a budget with `fraction` of `gpus` GPUs use `x` of its allocation.
Milli rate_for(double x, double fraction, int gpus) {
  return static_cast<Milli>(x * fraction * gpus * kWholeGpu);
}

TEST(FairShare, UnderServedBudgetGoesFirst) {
  World w;
  w.add_nodes(1);
  const BudgetId a = w.budget("/a"), b = w.budget("/b");
  // /a used 60% of its allocation over the last week, /b nothing.
  w.now = 7 * kDay;
  w.s.advance(w.now);
  w.s.record_usage(0, a, 0, 7 * kDay, rate_for(0.6, 0.5, 8));
  const JobId ja = w.submit(a, 8);
  w.now += 10;
  const JobId jb = w.submit(b, 8);
  auto r = w.run();
  EXPECT_TRUE(World::started(r, jb));
  EXPECT_FALSE(World::started(r, ja));
  // The window is whole buckets: at 7 days the first hour has already left it.
  EXPECT_NEAR(w.s.standing(0, a), 0.6 * 167 / 168, 1e-9);
}

TEST(FairShare, OneCycleSplitsAnEmptyClusterByShare) {
  World w;
  w.add_nodes(2);
  const BudgetId a = w.budget("/a", 1), b = w.budget("/b", 3);
  for (int i = 0; i < 16; ++i) w.submit(a, 1);
  for (int i = 0; i < 16; ++i) w.submit(b, 1);
  auto r = w.run();
  int for_a = 0, for_b = 0;
  for (const auto& d : r.starts) (w.s.job(d.job)->spec.budget == a ? for_a : for_b)++;
  // Standings move as contracts are committed: b (3x the share) gets 3x the GPUs.
  EXPECT_EQ(for_a, 4);
  EXPECT_EQ(for_b, 12);
}

TEST(FairShare, TreeLevelsAreComparedBeforeLeaves) {
  World w;
  w.add_nodes(1, 1);
  const BudgetId x1 = w.budget("/x/one"), x2 = w.budget("/x/two"), y = w.budget("/y");
  w.now = 7 * kDay;
  w.s.advance(w.now);
  // /x/one used a lot, so /x as a whole stands worse than /y even though /x/two used nothing.
  w.s.record_usage(0, x1, 0, 7 * kDay, rate_for(0.9, 0.25, 1));
  const JobId j2 = w.submit(x2, 1);
  const JobId jy = w.submit(y, 1);
  auto r = w.run();
  EXPECT_TRUE(World::started(r, jy));
  ASSERT_NE(World::why(r, j2), nullptr);
  EXPECT_EQ(World::why(r, j2)->rank, 1u);
}

TEST(FairShare, PriorityOrdersOnlyWithinABudget) {
  World w;
  w.add_nodes(1, 1);
  const BudgetId a = w.budget("/a"), b = w.budget("/b");
  w.now = 7 * kDay;
  w.s.advance(w.now);
  w.s.record_usage(0, a, 0, 7 * kDay, rate_for(0.5, 0.5, 1));
  JobSpec normal = w.job(a, 1);
  const JobId a_normal = w.submit(normal);
  JobSpec urgent = w.job(a, 1);
  urgent.priority = Priority::Urgent;
  urgent.submit_time = w.now + 5;
  const JobId a_urgent = w.submit(urgent);
  const JobId b_low = [&] {
    JobSpec j = w.job(b, 1);
    j.priority = Priority::Low;
    return w.submit(j);
  }();
  auto r = w.run();
  EXPECT_EQ(World::start_order(r), std::vector<JobId>{b_low}) << "urgent does not jump budgets";
  EXPECT_EQ(World::why(r, a_urgent)->rank, 1u);
  EXPECT_EQ(World::why(r, a_normal)->rank, 2u);
  EXPECT_EQ(World::why(r, a_normal)->ahead_in_budget, 1u);
}

TEST(FairShare, DebugJobsGoFirst) {
  World w;
  w.add_nodes(1, 1);
  const BudgetId a = w.budget("/a"), b = w.budget("/b");
  w.now = 7 * kDay;
  w.s.advance(w.now);
  w.s.record_usage(0, a, 0, 7 * kDay, rate_for(0.5, 0.5, 1));
  const JobId batch = w.submit(b, 1);
  JobSpec dbg = w.job(a, 1, 10 * kMinute);
  dbg.kind = JobKind::Debug;
  const JobId debug = w.submit(dbg);
  auto r = w.run();
  EXPECT_TRUE(World::started(r, debug));
  EXPECT_TRUE(w.pending(batch));
}

TEST(FairShare, FifoAndPriorityOrdersIgnoreBudgets) {
  PolicyConfig fifo;
  fifo.order = QueueOrder::Fifo;
  World w(fifo);
  w.add_nodes(1, 1);
  const BudgetId a = w.budget("/a"), b = w.budget("/b");
  w.now = 7 * kDay;
  w.s.advance(w.now);
  w.s.record_usage(0, a, 0, 7 * kDay, rate_for(0.9, 0.5, 1));
  const JobId first = w.submit(a, 1);
  w.now += 1;
  w.submit(b, 1);
  EXPECT_EQ(World::start_order(w.run()), std::vector<JobId>{first});

  PolicyConfig prio;
  prio.order = QueueOrder::Priority;
  World v(prio);
  v.add_nodes(1, 1);
  const BudgetId c = v.budget("/c");
  v.submit(c, 1);
  JobSpec high = v.job(c, 1);
  high.priority = Priority::High;
  high.submit_time = 5;
  const JobId h = v.submit(high);
  EXPECT_EQ(World::start_order(v.run()), std::vector<JobId>{h});
}

TEST(Contract, FundedJobsRunAllocatedAndAreCharged) {
  World w;
  w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  const JobId funded = w.submit(a, 2, kHour);
  const JobId free_job = w.submit(a, 2, 0);
  auto r = w.run();
  ASSERT_EQ(r.starts.size(), 2u);
  EXPECT_TRUE(w.allocated(funded));
  EXPECT_EQ(w.s.job(funded)->run.protected_until, kHour);
  EXPECT_FALSE(w.allocated(free_job)) << "minimum runtime 0 is unallocated by definition";
  w.s.advance(kHour);
  EXPECT_EQ(w.s.usage(0, a), 2 * kWholeGpu * kHour) << "only allocated time is charged";
  EXPECT_EQ(w.s.usage(0, w.s.budgets().root()), 2 * kWholeGpu * kHour);
}

TEST(Contract, BudgetThatCannotAffordTheContractRunsUnallocated) {
  World w;
  w.add_nodes(1);
  const BudgetId a = w.budget("/a"), b = w.budget("/b");
  w.now = 7 * kDay;
  w.s.advance(w.now);
  // /a has 2 GPU-hours left of its week: enough for 1 GPU x 1 h, not for 4 GPUs x 1 h.
  const double alloc = w.s.allocation(0, a);
  w.s.record_usage(0, a, w.now - kHour, w.now,
                   static_cast<Milli>((alloc - 2.0 * kWholeGpu * kHour) / kHour));
  const JobId small = w.submit(a, 1, kHour);
  const JobId big = w.submit(a, 4, kHour);
  w.run();
  EXPECT_TRUE(w.allocated(small));
  EXPECT_TRUE(w.running(big));
  EXPECT_FALSE(w.allocated(big));
  (void)b;
}

TEST(Contract, AllocatedJobIsDemotedAfterItsContractWhenItsBudgetIsOver) {
  World w;
  w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  w.budget("/b");
  const JobId j = w.submit(a, 8, 2 * kHour);
  w.run();
  ASSERT_TRUE(w.allocated(j));
  // Someone else's charges push /a over its allocation (e.g. a ledger replay).
  w.s.advance(kHour);
  w.s.record_usage(0, a, 0, kHour, static_cast<Milli>(w.s.allocation(0, a) / kHour));
  auto r = w.run_at(kHour);
  EXPECT_TRUE(r.class_changes.empty()) << "never inside the minimum runtime";
  EXPECT_TRUE(w.allocated(j));
  r = w.run_at(2 * kHour);
  ASSERT_EQ(r.class_changes.size(), 1u);
  EXPECT_FALSE(r.class_changes[0].allocated);
  EXPECT_EQ(r.class_changes[0].limiting_budget, a);
  EXPECT_FALSE(w.allocated(j));
  const auto used = w.s.usage(0, a);
  w.s.advance(3 * kHour);
  EXPECT_EQ(w.s.usage(0, a), used) << "unallocated time is not charged";
}

// keep_non_resumable_allocated (off by default; docs/design/0014): a non-resumable run stays
// allocated, and charged, when its budget goes over; a resumable one is demoted as before.
TEST(Contract, KeptNonResumableRunsAreNotDemoted) {
  PolicyConfig config;
  config.keep_non_resumable_allocated = true;
  World w(config);
  w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  w.budget("/b");
  JobSpec kept = w.job(a, 2, 2 * kHour);
  kept.resumable = false;
  JobSpec demoted = w.job(a, 2, 2 * kHour);
  demoted.resumable = true;
  const JobId k = w.submit(kept);
  const JobId d = w.submit(demoted);
  w.run();
  ASSERT_TRUE(w.allocated(k) && w.allocated(d));
  w.s.advance(kHour);
  w.s.record_usage(0, a, 0, kHour, static_cast<Milli>(w.s.allocation(0, a) / kHour));
  auto r = w.run_at(2 * kHour);
  ASSERT_EQ(r.class_changes.size(), 1u);
  EXPECT_EQ(r.class_changes[0].job, d);
  EXPECT_TRUE(w.allocated(k));
  EXPECT_FALSE(w.allocated(d));
  const auto used = w.s.usage(0, a);
  w.s.advance(3 * kHour);
  EXPECT_GT(w.s.usage(0, a), used) << "a kept run is still charged";
}

// renew_contract (a service's protected replica, docs/policy.md §6 "Renewal"): when its contract
// ends it starts again while the budget can afford it; once the budget is over, it is demoted
// like any allocated job.
TEST(Contract, ARenewableContractIsRenewedWhileItsBudgetCanAffordIt) {
  World w;
  w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  w.budget("/b");
  JobSpec replica = w.job(a, 2, 2 * kHour);
  replica.renew_contract = true;
  const JobId r = w.submit(replica);
  const JobId plain = w.submit(a, 2, 2 * kHour);
  w.run();
  ASSERT_TRUE(w.allocated(r) && w.allocated(plain));
  EXPECT_EQ(w.s.job(r)->run.protected_until, 2 * kHour);
  auto c = w.run_at(2 * kHour);
  ASSERT_EQ(c.class_changes.size(), 1u) << "the plain job's contract just ends";
  EXPECT_EQ(c.class_changes[0].job, r);
  EXPECT_TRUE(c.class_changes[0].renewed);
  EXPECT_TRUE(c.class_changes[0].allocated);
  EXPECT_EQ(c.class_changes[0].protected_until, 4 * kHour);
  EXPECT_EQ(w.s.job(r)->run.protected_until, 4 * kHour);
  EXPECT_EQ(w.s.job(plain)->run.protected_until, 2 * kHour);
  // Its budget goes over: the contract is not renewed, and both are demoted at its end.
  w.s.advance(3 * kHour);
  w.s.record_usage(0, a, 2 * kHour, 3 * kHour, static_cast<Milli>(w.s.allocation(0, a) / kHour));
  c = w.run_at(4 * kHour);
  ASSERT_EQ(c.class_changes.size(), 2u);
  for (const auto& change : c.class_changes) {
    EXPECT_FALSE(change.allocated);
    EXPECT_FALSE(change.renewed);
  }
  EXPECT_FALSE(w.allocated(r));
}

TEST(Contract, UnallocatedJobIsPromotedWhenItsBudgetIsFundedAgain) {
  PolicyConfig config;
  config.lookback = 4 * kHour;
  World w(config);
  w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  w.budget("/b");
  w.now = 4 * kHour;
  w.s.advance(w.now);
  w.s.record_usage(0, a, kHour, 2 * kHour, static_cast<Milli>(w.s.allocation(0, a) / kHour));
  const JobId j = w.submit(a, 1, kHour);
  w.run();
  ASSERT_TRUE(w.running(j));
  EXPECT_FALSE(w.allocated(j));
  // The heavy hour [1h, 2h) leaves the 4-hour window at 5h.
  auto r = w.run_at(5 * kHour);
  ASSERT_EQ(r.class_changes.size(), 1u);
  EXPECT_TRUE(r.class_changes[0].allocated);
  EXPECT_EQ(w.s.job(j)->run.protected_until, 6 * kHour) << "protected from promotion on";
}

// burst_limit: a budget funds allocated work up to burst_limit x its fraction of the cluster at a
// time, even when its lookback allocation could pay for much more; the rest runs unallocated.
TEST(BurstLimit, CapsTheAllocatedGpusABudgetHoldsAtOnce) {
  for (const double limit : {0.0, 1.1}) {
    PolicyConfig config;
    config.burst_limit = limit;
    World w(config);
    w.add_nodes(2);  // 16 GPUs; /a and /b have half each: a cap of 1.1 x 8 = 8.8 GPUs
    const BudgetId a = w.budget("/a");
    w.budget("/b");
    const JobId first = w.submit(a, 4, kHour);
    const JobId second = w.submit(a, 4, kHour);  // 8 GPUs held: within 8.8
    const JobId third = w.submit(a, 4, kHour);   // 12 GPUs: over the cap
    w.run();
    EXPECT_TRUE(w.allocated(first));
    EXPECT_TRUE(w.allocated(second));
    ASSERT_TRUE(w.running(third)) << "beyond the cap work still runs, unallocated";
    EXPECT_EQ(w.allocated(third), limit == 0) << "limit " << limit;
  }
}

TEST(BurstLimit, ABudgetHoldingNothingMayFundOneJobLargerThanItsCap) {
  World w;  // burst_limit 1.1 by default
  w.add_nodes(2);
  const BudgetId a = w.budget("/a");
  w.budget("/b");
  JobSpec gang = w.job(a, 8, kHour);
  gang.shape.nodes = 2;  // 16 GPUs > 8.8: a large job is never starved by its own budget's cap
  const JobId big = w.submit(gang);
  w.run();
  EXPECT_TRUE(w.allocated(big));
  w.now += kMinute;
  const JobId next = w.submit(a, 1, kHour);
  ASSERT_TRUE(w.s.job_finished(big, w.now).ok());
  JobSpec more = w.job(a, 8, kHour);
  more.shape.nodes = 2;
  const JobId over = w.submit(more);
  auto r = w.run();
  EXPECT_TRUE(w.allocated(next));
  ASSERT_TRUE(w.pending(over));
  ASSERT_NE(World::why(r, over), nullptr);
  EXPECT_FALSE(World::why(r, over)->funded) << "1 GPU held + 16 > 8.8: not funded, no preemption";
  EXPECT_TRUE(World::why(r, over)->at_burst_limit);
  EXPECT_NE(w.s.describe(*World::why(r, over)).find("/a would exceed its burst limit (110%"),
            std::string::npos)
      << w.s.describe(*World::why(r, over));
}

// burst_exempt_max_size (0 by default; docs/design/0014): the exception funds a job of at most
// that many times the budget's share.
TEST(BurstLimit, TheExceptionsSizeBoundLeavesALargerJobUnfunded) {
  for (const double bound : {1.5, 2.0}) {
    PolicyConfig config;
    config.burst_exempt_max_size = bound;
    World w(config);
    w.add_nodes(2);  // 16 GPUs; /a's share is 8
    const BudgetId a = w.budget("/a");
    w.budget("/b");
    JobSpec gang = w.job(a, 8, kHour);
    gang.shape.nodes = 2;  // 16 GPUs: 2 x its share
    const JobId big = w.submit(gang);
    w.run();
    ASSERT_TRUE(w.running(big)) << "it runs either way: unallocated when not funded";
    EXPECT_EQ(w.allocated(big), bound >= 2.0) << "bound " << bound;
  }
}

// inference_share (docs/policy.md §15): allocated inference work holds at most that share of the
// cluster; beyond it a replica runs unallocated, and training takes its GPUs back.
TEST(InferenceShare, ReplicasBeyondTheTiersShareRunUnallocatedAndTrainingTakesThem) {
  PolicyConfig config;
  config.inference_share = 0.5;  // 4 of 8 GPUs
  World w(config);
  w.add_nodes(1);
  const BudgetId serve = w.budget("/serve", 3);  // 6 GPUs: its own burst limit is not what binds
  const BudgetId train = w.budget("/train", 1);
  auto replica = [&](int gpus) {
    JobSpec j = w.job(serve, gpus, kHour);
    j.kind = JobKind::Inference;
    return w.submit(j);
  };
  const JobId first = replica(2);
  const JobId second = replica(2);
  const JobId third = replica(2);
  auto r = w.run();
  EXPECT_TRUE(w.allocated(first));
  EXPECT_TRUE(w.allocated(second));
  ASSERT_TRUE(w.running(third));
  EXPECT_FALSE(w.allocated(third)) << "the tier holds its 4 GPUs already";
  const StartDecision* d = nullptr;
  for (const auto& s : r.starts) {
    if (s.job == third) d = &s;
  }
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->limiting_budget, w.s.budgets().root());
  // Training takes the unallocated replica's GPUs, never the protected ones'.
  w.now += kMinute;
  const JobId big = w.submit(train, 4, kHour);
  w.run();
  EXPECT_TRUE(w.allocated(big));
  EXPECT_TRUE(w.running(first) && w.running(second));
  EXPECT_FALSE(w.running(third));
}

// A batch job of the serving budget is not bounded by the tier's share.
TEST(InferenceShare, OnlyInferenceJobsAreBounded) {
  PolicyConfig config;
  config.inference_share = 0.25;
  World w(config);
  w.add_nodes(1);
  const BudgetId serve = w.budget("/serve");
  w.budget("/train");
  JobSpec replica = w.job(serve, 2, kHour);
  replica.kind = JobKind::Inference;
  const JobId r = w.submit(replica);
  const JobId batch = w.submit(serve, 2, kHour);
  w.run();
  EXPECT_TRUE(w.allocated(r));
  EXPECT_TRUE(w.allocated(batch));
}

TEST(BurstLimit, PromotionRespectsTheCap) {
  PolicyConfig config;
  config.lookback = 4 * kHour;
  World w(config);
  w.add_nodes(2);
  const BudgetId a = w.budget("/a");
  w.budget("/b");
  w.now = 4 * kHour;
  w.s.advance(w.now);
  // /a is over its window until the heavy hour [1h, 2h) leaves it at 5h.
  w.s.record_usage(0, a, kHour, 2 * kHour, static_cast<Milli>(w.s.allocation(0, a) / kHour));
  const JobId j1 = w.submit(a, 4, kHour);
  const JobId j2 = w.submit(a, 4, kHour);
  const JobId j3 = w.submit(a, 4, kHour);
  w.run();
  ASSERT_TRUE(w.running(j1) && w.running(j2) && w.running(j3));
  auto r = w.run_at(5 * kHour);
  EXPECT_EQ(r.class_changes.size(), 2u) << "8 of 12 GPUs promoted: the third would hold 12 > 8.8";
  EXPECT_TRUE(w.allocated(j1));
  EXPECT_TRUE(w.allocated(j2));
  EXPECT_FALSE(w.allocated(j3));
}

TEST(Placement, RespectsModelAndClusterConstraintsAndExplainsImpossibleRequests) {
  World w;
  const ClusterId other = w.s.add_cluster("other");
  w.add_nodes(1, 8, "H100");
  w.add_nodes(1, 8, "B200", "", other);
  const BudgetId a = w.budget("/a");
  JobSpec want_b200 = w.job(a, 2);
  want_b200.models = {w.model("B200")};
  const JobId j1 = w.submit(want_b200);
  JobSpec want_other = w.job(a, 1);
  want_other.clusters = {other};
  const JobId j2 = w.submit(want_other);
  JobSpec too_big = w.job(a, 16);
  const JobId j3 = w.submit(too_big);
  auto r = w.run();
  ASSERT_TRUE(w.running(j1));
  EXPECT_EQ(w.s.job(j1)->run.cluster, other);
  EXPECT_EQ(w.s.job(j2)->run.cluster, other);
  ASSERT_NE(World::why(r, j3), nullptr);
  EXPECT_EQ(World::why(r, j3)->code, WaitCode::NoMatchingNodes);
  EXPECT_NE(w.s.describe(*World::why(r, j3)).find("change the request"), std::string::npos);
}

TEST(Explanation, SaysWhatAPersonNeedsToKnow) {
  PolicyConfig config;
  config.burst_limit = 0;  // the head is funded: /ai may hold all 8 GPUs allocated
  World w(config);
  w.add_nodes(1);
  const BudgetId a = w.budget("/ai/olmo");
  w.budget("/other");
  w.submit(a, 8, 2 * kHour);
  w.run();
  const JobId second = w.submit(a, 8);
  const JobId third = w.submit(a, 8);
  auto r = w.run_at(60);
  const Explanation* e = World::why(r, third);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->ahead_in_budget, 1u);
  const std::string text = w.s.describe(*e);
  EXPECT_NE(text.find("/ai/olmo"), std::string::npos) << text;
  EXPECT_NE(text.find("1 job of /ai/olmo ahead"), std::string::npos) << text;
  const Explanation* head = World::why(r, second);
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->code, WaitCode::HoldsReservation);
  EXPECT_EQ(head->expected_start, 2 * kHour) << "when the running job's contract ends";
  EXPECT_NE(w.s.describe(*head).find("earliest expected start in 1h59m"), std::string::npos)
      << w.s.describe(*head);
}

TEST(Determinism, ThePureFormDecidesExactlyWhatTheCycleDoes) {
  World w;
  w.add_nodes(4, 8, "H100", "rack1");
  w.add_nodes(4, 8, "H100", "rack2");
  const BudgetId a = w.budget("/a/x"), b = w.budget("/a/y"), c = w.budget("/c");
  for (int i = 0; i < 60; ++i) {
    JobSpec j = w.job(i % 3 == 0 ? a : i % 3 == 1 ? b : c, 1 + (i * 7) % 8, (i % 4) * kHour);
    if (i % 10 == 0) j.shape = Shape{2, 8, kWholeGpu};
    w.submit(j);
  }
  const CycleResult planned = plan_cycle(w.s, 0);
  const CycleResult done = w.run();
  ASSERT_EQ(planned.starts.size(), done.starts.size());
  for (std::size_t i = 0; i < done.starts.size(); ++i) {
    EXPECT_EQ(planned.starts[i].job, done.starts[i].job);
    EXPECT_EQ(planned.starts[i].placement, done.starts[i].placement);
    EXPECT_EQ(planned.starts[i].allocated, done.starts[i].allocated);
  }
  ASSERT_EQ(planned.waiting.size(), done.waiting.size());
  for (std::size_t i = 0; i < done.waiting.size(); ++i) {
    EXPECT_EQ(planned.waiting[i].job, done.waiting[i].job);
    EXPECT_EQ(planned.waiting[i].code, done.waiting[i].code);
  }
}

TEST(Lifecycle, SubmitRejectsDuplicatesAndUnknownReferences) {
  World w;
  w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  JobSpec j = w.job(a, 1);
  ASSERT_TRUE(w.s.submit(j, 0).ok());
  EXPECT_EQ(w.s.submit(j, 0).error().field, "id");
  JobSpec k = w.job(a, 1);
  k.clusters = {7};
  EXPECT_EQ(w.s.submit(k, 0).error().field, "clusters");
  EXPECT_FALSE(w.s.job_stopped(j.id, 0).ok()) << "no stop was decided";
  EXPECT_TRUE(w.s.job_finished(j.id, 0).ok());
  EXPECT_EQ(w.s.pending_count(), 0u);
  EXPECT_FALSE(w.s.job_finished(j.id, 0).ok());
}

TEST(Lifecycle, FinishingReleasesGpusAndStopsCharging) {
  World w;
  w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  const JobId j = w.submit(a, 8);
  w.run();
  EXPECT_EQ(w.s.pool().whole_free(0), 0);
  ASSERT_TRUE(w.s.job_finished(j, 1800).ok());
  EXPECT_EQ(w.s.pool().whole_free(0), 8);
  w.s.advance(kHour);
  EXPECT_EQ(w.s.usage(0, a), 8 * kWholeGpu * 1800);
  EXPECT_EQ(w.s.allocated_rate(0, a), 0);
}

}  // namespace
}  // namespace allot::core

namespace allot::core {
namespace {
TEST(Fragmentation, CountsFreeGpusTheLargestWaitingShapeCannotUse) {
  testing::World w;
  w.add_nodes(3);
  const BudgetId a = w.budget("/a");
  w.submit(a, 5);  // node 0: 3 free
  w.submit(a, 6);  // node 1: 2 free
  w.submit(a, 8);  // node 2: full
  w.run();
  w.submit(a, 4);
  auto r = w.run_at(60);
  ASSERT_EQ(r.clusters.size(), 1u);
  EXPECT_EQ(r.clusters[0].free_gpus, 5);
  EXPECT_EQ(r.clusters[0].largest_waiting_per_node, 4);
  EXPECT_EQ(r.clusters[0].fragmented_gpus, 5);
}
}  // namespace
}  // namespace allot::core

namespace allot::core {
namespace {
TEST(TreeChanges, SharesAndShapeOfTheTreeChangeWhileJobsWaitAndRun) {
  testing::World w;
  w.add_nodes(1, 1);
  const BudgetId a = w.budget("/a"), b = w.budget("/b");
  const JobId running = w.submit(a, 1, kHour);
  w.run();
  ASSERT_TRUE(w.allocated(running));
  // /a gets a sub-budget while one of its own jobs waits: the job is still considered.
  const JobId waiting = w.submit(a, 1, kHour);
  ASSERT_TRUE(w.s.budgets().add(a, "x", 1).ok());
  auto r = w.run_at(60);
  ASSERT_NE(testing::World::why(r, waiting), nullptr);
  // A new share moves allocations at once.
  const double before = w.s.allocation(0, a);
  ASSERT_TRUE(w.s.budgets().set_share(b, 3).ok());
  r = w.run_at(120);
  EXPECT_NEAR(w.s.allocation(0, a), before / 2, 1.0);
  // A removed budget's waiting job is never funded and says so; its running job is unaffected.
  const BudgetId gone = w.budget("/c");
  const JobId orphan = w.submit(gone, 1, kHour);
  ASSERT_TRUE(w.s.budgets().remove(gone).ok());
  ASSERT_TRUE(w.s.job_finished(running, 180).ok());
  r = w.run_at(180);
  EXPECT_TRUE(w.running(waiting));
  const Explanation* e = testing::World::why(r, orphan);
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(e->funded);
  EXPECT_NE(w.s.describe(*e).find("(removed budget)"), std::string::npos) << w.s.describe(*e);
}
}  // namespace
}  // namespace allot::core

namespace allot::core {
namespace {
// The lazy walk (explain_all = false) passes over whole budgets whose jobs can neither start,
// reserve nor preempt, and jumps to last cycle's reservation holder among them: it must decide
// exactly what the full walk decides, while considering a handful of jobs instead of the queue.
// With `declared_ends`, the waiting jobs declare an expected duration (they could backfill before a
// reservation's start if GPUs were free on its nodes; none are).
void lazy_walk_passes_over_inert_budgets(bool declared_ends) {
  PolicyConfig config;
  config.share_claims = false;
  World w(config);
  w.add_nodes(4);  // 32 GPUs
  const BudgetId a = w.budget("/a"), b = w.budget("/b"), c = w.budget("/c");
  w.now = 7 * kDay;
  w.s.advance(w.now);
  // /b and /c used three times their allocation: none of their contracts is affordable.
  for (BudgetId x : {b, c}) {
    w.s.record_usage(0, x, w.now - kDay, w.now,
                     static_cast<Milli>(3.0 * w.s.allocation(0, x) / kDay));
  }
  std::vector<JobId> fillers;
  for (int i = 0; i < 4; ++i) fillers.push_back(w.submit(a, 8, 8 * kHour));
  ASSERT_EQ(w.run().starts.size(), 4u);
  // A gang of /b is blocked first and holds a reservation.
  JobSpec gang = w.job(b, 8);
  gang.shape.nodes = 2;
  const JobId holder = w.submit(gang);
  w.run_at(w.now + 60);
  ASSERT_EQ(w.s.reservations(0).size(), 1u);
  ASSERT_EQ(w.s.reservations(0).front().job, holder);
  // Then a hundred urgent jobs of /b rank ahead of it, and a hundred of /c wait too.
  for (int i = 0; i < 100; ++i) {
    JobSpec j = w.job(b, 1);
    j.priority = Priority::Urgent;
    JobSpec k = w.job(c, 1);
    if (declared_ends) j.expected_duration = k.expected_duration = kHour;
    w.submit(j);
    w.submit(k);
  }
  auto same = [](const CycleResult& x, const CycleResult& y) {
    if (x.starts.size() != y.starts.size() || x.stops.size() != y.stops.size() ||
        x.reservations.size() != y.reservations.size()) {
      return false;
    }
    for (std::size_t i = 0; i < x.starts.size(); ++i) {
      if (x.starts[i].job != y.starts[i].job || x.starts[i].placement != y.starts[i].placement ||
          x.starts[i].allocated != y.starts[i].allocated || x.starts[i].mode != y.starts[i].mode) {
        return false;
      }
    }
    for (std::size_t i = 0; i < x.reservations.size(); ++i) {
      if (x.reservations[i].job != y.reservations[i].job ||
          x.reservations[i].nodes != y.reservations[i].nodes ||
          x.reservations[i].expected_start != y.reservations[i].expected_start) {
        return false;
      }
    }
    return true;
  };
  for (int step = 0; step < 6; ++step) {
    w.now += 600;
    if (step == 3) {
      // Capacity comes back: small jobs start (unallocated) where they may.
      ASSERT_TRUE(w.s.job_finished(fillers[0], w.now).ok());
    }
    Scheduler lazy = w.s;
    const CycleResult l = lazy.cycle(w.now, CycleOptions{/*explain_all=*/false});
    const std::size_t pending = w.s.pending_count();
    const CycleResult f = w.run();
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_TRUE(same(l, f));
    EXPECT_TRUE(l.waiting.empty()) << "a lazy cycle explains nothing";
    EXPECT_EQ(f.stats.considered, pending);
    if (step < 3) {
      EXPECT_LE(l.stats.considered, 3u) << "of " << pending << " pending";
      EXPECT_TRUE(World::why(f, holder) != nullptr);
    }
  }
}

TEST(LazyCycle, PassesOverBudgetsThatCannotActAndDecidesTheSame) {
  lazy_walk_passes_over_inert_budgets(false);
}
TEST(LazyCycle, PassesOverThemWhenTheirJobsDeclaredTheirEndToo) {
  lazy_walk_passes_over_inert_budgets(true);
}

TEST(Restore, ARestartedServerPutsRunningJobsBackExactly) {
  testing::World w;
  w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  const JobId j = w.submit(a, 4, 2 * kHour);
  w.run();
  const JobEntry before = *w.s.job(j);

  testing::World again;
  again.add_nodes(1);
  again.budget("/a");
  ASSERT_TRUE(again.s
                  .restore_running(before.spec, 0, before.run.placement, before.run.started,
                                   before.run.allocated, before.run.allocated_since, kHour)
                  .ok());
  EXPECT_TRUE(again.allocated(j));
  EXPECT_EQ(again.s.job(j)->run.protected_until, 2 * kHour);
  EXPECT_EQ(again.s.pool().whole_free(0), 4);
  // The same GPUs cannot be given twice.
  JobSpec other = before.spec;
  other.id = 99;
  EXPECT_EQ(
      again.s.restore_running(other, 0, before.run.placement, 0, false, 0, kHour).error().field,
      "placement");
  again.s.advance(2 * kHour);
  EXPECT_EQ(again.s.usage(0, a), 4 * kWholeGpu * kHour) << "charged from the restore on";
}
}  // namespace
}  // namespace allot::core
