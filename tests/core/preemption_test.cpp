// Preemption: who may take GPUs from whom, which victims, and that it never loops.
#include <gtest/gtest.h>

#include <map>

#include "world.h"

namespace allot::core {
namespace {

using testing::World;

// Puts `budget` at `x` of its allocation by replaying a week of usage ending now.
void use(World& w, BudgetId budget, double x) {
  w.s.advance(w.now);
  const double alloc = w.s.allocation(0, budget);
  w.s.record_usage(0, budget, w.now - kDay, w.now, static_cast<Milli>(x * alloc / kDay));
}

struct Preemption : ::testing::Test {
  World w;
  BudgetId a = 0, b = 0;
  void SetUp() override {
    w.add_nodes(1);
    a = w.budget("/a");
    b = w.budget("/b");
    w.now = 7 * kDay;
    w.s.advance(w.now);
  }
};

TEST_F(Preemption, FundedRequestTakesGpusFromUnallocatedWork) {
  JobSpec free_job = w.job(b, 8, 0);
  free_job.resumable = true;
  const JobId victim = w.submit(free_job);
  w.run();
  ASSERT_TRUE(w.running(victim));
  w.now += 60;
  const JobId requester = w.submit(a, 8, kHour);
  auto r = w.run();
  ASSERT_TRUE(World::started(r, requester));
  EXPECT_TRUE(w.allocated(requester));
  const StopDecision* stop = World::stopped(r, victim);
  ASSERT_NE(stop, nullptr);
  EXPECT_EQ(stop->reason, StopReason::Preempted);
  EXPECT_EQ(stop->for_job, requester);
  EXPECT_EQ(stop->victim.cls, VictimClass::Unallocated);
  EXPECT_TRUE(stop->requeue);
  EXPECT_EQ(r.starts[0].victims, std::vector<JobId>{victim});
  EXPECT_EQ(r.starts[0].mode, StartMode::Preempting);
  EXPECT_NE(w.s.describe(*stop).find("ran unallocated"), std::string::npos);
  w.carry_out(r);
  EXPECT_TRUE(w.pending(victim)) << "resumable work goes back to the queue";
}

TEST_F(Preemption, UnfundedRequestPreemptsNothing) {
  const JobId victim = w.submit(b, 8, 0);
  w.run();
  use(w, a, 1.5);
  const JobId requester = w.submit(a, 8, kHour);
  auto r = w.run();
  EXPECT_TRUE(r.stops.empty());
  EXPECT_TRUE(w.running(victim));
  EXPECT_TRUE(w.pending(requester));
}

TEST_F(Preemption, NeverInsideTheMinimumRuntime) {
  JobSpec checkpointing = w.job(b, 8, 4 * kHour);
  checkpointing.resumable = true;  // so that it risks only its last 30 minutes of work
  const JobId protected_job = w.submit(checkpointing);
  w.run();
  use(w, b, 0.8);  // within its allocation (so never demoted), but far worse off than a
  const JobId requester = w.submit(a, 8, kHour);
  for (Time t = w.now; t < 7 * kDay + 4 * kHour; t += 10 * kMinute) {
    auto r = w.run_at(t);
    EXPECT_TRUE(r.stops.empty()) << "at " << t;
  }
  auto r = w.run_at(7 * kDay + 4 * kHour);
  const StopDecision* stop = World::stopped(r, protected_job);
  ASSERT_NE(stop, nullptr) << "past its contract, and b stands worse than a by the margin";
  EXPECT_EQ(stop->victim.cls, VictimClass::OverAllocation);
  EXPECT_EQ(stop->victim.victim_branch, b);
  EXPECT_EQ(stop->victim.requester_branch, a);
  EXPECT_TRUE(World::started(r, requester));
  EXPECT_NE(w.s.describe(*stop).find("past its minimum runtime"), std::string::npos);
}

TEST_F(Preemption, TheContractCountsFromTheConfirmedStart) {
  JobSpec checkpointing = w.job(b, 8, 4 * kHour);
  checkpointing.resumable = true;
  const JobId slow_start = w.submit(checkpointing);
  w.run();
  ASSERT_TRUE(w.running(slow_start));
  // Its processes start 20 minutes after the placement (say, a container pull).
  const Time started = w.now + 20 * kMinute;
  ASSERT_TRUE(w.s.job_running(slow_start, started).ok());
  EXPECT_EQ(w.s.job(slow_start)->run.protected_until, started + 4 * kHour);
  use(w, b, 0.8);
  const JobId requester = w.submit(a, 8, kHour);
  // Four hours after the placement it is still inside its contract.
  for (Time t = started; t < started + 4 * kHour; t += 10 * kMinute) {
    EXPECT_TRUE(w.run_at(t).stops.empty()) << "at " << t;
  }
  auto r = w.run_at(started + 4 * kHour);
  ASSERT_NE(World::stopped(r, slow_start), nullptr) << "past its contract";
  EXPECT_TRUE(World::started(r, requester));
  // Only a running job has processes to confirm; an unallocated one has no contract to move.
  EXPECT_FALSE(w.s.job_running(requester + 100, w.now).ok());
  const JobId free_job = w.submit(w.job(b, 8, 0));
  ASSERT_FALSE(w.s.job_running(free_job, w.now).ok()) << "still pending";
}

TEST_F(Preemption, AShortRequestDoesNotThrowAwayHoursOfAllocatedWork) {
  const JobId long_run = w.submit(b, 8, kHour);  // not resumable
  w.run();
  use(w, b, 0.8);
  w.now += 4 * kHour;                                 // 32 GPU-hours would be lost
  const JobId short_request = w.submit(a, 8, kHour);  // guarantees 8 GPU-hours
  auto r = w.run();
  EXPECT_TRUE(r.stops.empty());
  EXPECT_TRUE(w.running(long_run));
  EXPECT_TRUE(w.pending(short_request));
  // A request whose contract is worth the loss may take the GPUs.
  ASSERT_TRUE(w.s.job_finished(short_request, w.now).ok());
  const JobId long_request = w.submit(a, 8, 4 * kHour);
  r = w.run();
  EXPECT_TRUE(World::started(r, long_request));
  EXPECT_NE(World::stopped(r, long_run), nullptr);
}

TEST_F(Preemption, AllocatedVictimNeedsToStandWorseByTheMargin) {
  use(w, b, 0.5);
  const JobId running = w.submit(b, 8, kHour);
  w.run();
  use(w, a, 0.45);  // a is better off than b, but by less than the 10% margin
  w.now += 2 * kHour;
  const JobId requester = w.submit(a, 8, kHour);
  auto r = w.run();
  EXPECT_TRUE(r.stops.empty());
  EXPECT_TRUE(w.running(running));
  EXPECT_TRUE(w.pending(requester));
}

TEST_F(Preemption, SameBudgetNeverPreemptsItselfWhateverThePriority) {
  const JobId running = w.submit(a, 8, kHour);
  w.run();
  w.now += 2 * kHour;
  JobSpec urgent = w.job(a, 8, kHour);
  urgent.priority = Priority::Urgent;
  w.submit(urgent);
  auto r = w.run();
  EXPECT_TRUE(r.stops.empty());
  EXPECT_TRUE(w.running(running));
}

TEST(PreemptionChoice, UnallocatedFirstThenFewestGpuHoursLost) {
  World w;
  w.add_nodes(2);
  const BudgetId a = w.budget("/a"), b = w.budget("/b");
  // Node 0: an old allocated job past its contract (b over allocation) with 4 GPUs, and a
  // young unallocated one with 4. Node 1: two unallocated jobs of 4 GPUs, one old, one young.
  const JobId old_alloc = w.submit(b, 4, kHour);
  const JobId young_free0 = [&] {
    w.run();
    w.now = 3 * kHour;
    return w.submit(b, 4, 0);
  }();
  const JobId old_free1 = w.submit(b, 4, 0);
  w.run();
  w.now = 5 * kHour;
  const JobId young_free1 = w.submit(b, 4, 0);
  w.run();
  ASSERT_TRUE(w.running(old_alloc) && w.running(young_free0) && w.running(old_free1) &&
              w.running(young_free1));
  ASSERT_EQ(w.s.job(old_alloc)->run.placement[0].node, w.s.job(young_free0)->run.placement[0].node);
  use(w, b, 1.5);
  w.now += 60;
  const JobId requester = w.submit(a, 8, kHour);
  auto r = w.run();
  ASSERT_TRUE(World::started(r, requester));
  // Freeing node 1 costs only unallocated work; node 0 would cost an allocated job.
  std::vector<JobId> victims = r.starts[0].victims;
  EXPECT_EQ(victims, (std::vector<JobId>{old_free1, young_free1}));

  // A 4-GPU request takes the cheapest single victim: the youngest unallocated job.
  World v;
  v.add_nodes(1);
  const BudgetId x = v.budget("/x"), y = v.budget("/y");
  const JobId old_job = v.submit(y, 4, 0);
  v.run();
  v.now = kHour;
  const JobId young_job = v.submit(y, 4, 0);
  v.run();
  v.now = 2 * kHour;
  v.submit(x, 4, kHour);
  auto q = v.run();
  ASSERT_EQ(q.stops.size(), 1u);
  EXPECT_EQ(q.stops[0].job, young_job);
  EXPECT_TRUE(v.running(old_job));
}

TEST(PreemptionChoice, AGangVictimIsTakenWhole) {
  World w;
  w.add_nodes(2);
  const BudgetId a = w.budget("/a"), b = w.budget("/b");
  JobSpec gang = w.job(b, 8, 0);
  gang.shape = Shape{2, 8, kWholeGpu};
  const JobId g = w.submit(gang);
  w.run();
  ASSERT_TRUE(w.running(g));
  w.now = kHour;
  const JobId requester = w.submit(a, 8, kHour);
  auto r = w.run();
  ASSERT_TRUE(World::started(r, requester));
  ASSERT_NE(World::stopped(r, g), nullptr);
  EXPECT_EQ(w.s.pool().whole_free(0) + w.s.pool().whole_free(1), 8)
      << "the whole gang's 16 GPUs were released; 8 went to the requester";
}

// Two teams with equal shares each want the whole cluster for long stretches: the pattern that
// made Kueue workloads evict each other in a loop (kubernetes-sigs/kueue#3779). With allot's rules
// a job that wins GPUs is protected for its minimum runtime, and the loser can only win them back
// once its branch stands better by the margin, so evictions are bounded by time / minimum runtime.
TEST(NoPreemptionLoop, TwoTeamsWantingEverythingEvictEachOtherAtMostOncePerContract) {
  PolicyConfig config;
  config.lookback = kDay;
  World w(config);
  w.add_nodes(2);
  const BudgetId a = w.budget("/a"), b = w.budget("/b");
  auto resumable = [&](BudgetId budget) {
    JobSpec j = w.job(budget, 8, kHour);
    j.shape = Shape{2, 8, kWholeGpu};
    j.resumable = true;
    return w.submit(j);
  };
  const JobId ja = resumable(a);
  const JobId jb = resumable(b);
  int preemptions = 0;
  std::map<JobId, Time> last_won;  // when each job last took GPUs by preemption
  const Time end = 3 * kDay;
  for (; w.now <= end; w.now += 5 * kMinute) {
    auto r = w.s.cycle(w.now);
    for (const StopDecision& d : r.stops) {
      ASSERT_EQ(d.reason, StopReason::Preempted);
      ++preemptions;
      // The victim never is the job that just evicted it, inside that job's contract.
      auto it = last_won.find(d.job);
      if (it != last_won.end()) {
        EXPECT_GE(w.now - it->second, kHour);
      }
      last_won[d.for_job] = w.now;
    }
    w.carry_out(r);
  }
  EXPECT_GT(preemptions, 0) << "fair share must still rotate the cluster between the teams";
  EXPECT_LE(preemptions, static_cast<int>(end / kHour));
  (void)ja;
  (void)jb;
}

}  // namespace
}  // namespace allot::core

namespace allot::core {
namespace {
// max_unallocated_loss_ratio: demotion past the contract must not strip a long non-resumable run
// of the protection max_allocated_loss_ratio gives it while allocated.
TEST(UnallocatedLossLimit, ADemotedLongRunIsNotThrownAwayForAShortRequest) {
  for (const double limit : {0.0, 1.0}) {
    PolicyConfig config;
    config.max_unallocated_loss_ratio = limit;
    World w(config);
    w.add_nodes(1);
    const BudgetId a = w.budget("/a"), b = w.budget("/b");
    w.now = 7 * kDay;
    w.s.advance(w.now);
    const JobId long_run = w.submit(b, 8, kHour);  // not resumable
    w.run();
    ASSERT_TRUE(w.allocated(long_run));
    w.now += 4 * kHour;  // 32 GPU-hours at risk
    use(w, b, 1.5);      // /b is over: the run is demoted at the next cycle
    const JobId short_request = w.submit(a, 8, kHour);  // guarantees 8 GPU-hours
    auto r = w.run();
    ASSERT_EQ(r.class_changes.size(), 1u);
    EXPECT_FALSE(w.s.job(long_run)->run.allocated);
    if (limit == 0) {
      EXPECT_NE(World::stopped(r, long_run), nullptr) << "without the limit: 32 GPU-h thrown away";
      continue;
    }
    EXPECT_TRUE(r.stops.empty());
    EXPECT_TRUE(w.running(long_run));
    EXPECT_TRUE(w.pending(short_request));
    // A request whose contract is worth the loss (8 GPUs x 4 h) may take it.
    ASSERT_TRUE(w.s.job_finished(short_request, w.now).ok());
    const JobId long_request = w.submit(a, 8, 4 * kHour);
    r = w.run();
    EXPECT_TRUE(World::started(r, long_request));
    ASSERT_NE(World::stopped(r, long_run), nullptr);
    EXPECT_EQ(World::stopped(r, long_run)->victim.cls, VictimClass::Unallocated);
  }
}

TEST_F(Preemption, UnallocatedLossLimitARequestThatWaitedItsPatienceTakesTheRunAnyway) {
  // unallocated_loss_patience is 8 h by default
  use(w, b, 1.5);
  const JobId squatter = w.submit(b, 8, kHour);  // unallocated from the start, not resumable
  w.run();
  ASSERT_FALSE(w.allocated(squatter));
  w.now += 2 * kHour;
  const Time submitted = w.now;
  const JobId request = w.submit(a, 8, kHour);  // 8 GPU-hours against 16 and growing
  for (Time t = submitted; t < submitted + 8 * kHour; t += kHour) {
    EXPECT_TRUE(w.run_at(t).stops.empty()) << "at " << t - submitted << " s of waiting";
  }
  auto r = w.run_at(submitted + 8 * kHour);
  EXPECT_TRUE(World::started(r, request));
  EXPECT_NE(World::stopped(r, squatter), nullptr);
}

TEST_F(Preemption, UnallocatedLossLimitResumableWorkStaysTakeable) {
  use(w, b, 1.5);
  JobSpec spec = w.job(b, 8, kHour);
  spec.resumable = true;  // risks at most 30 min x 8 GPUs = 4 GPU-hours
  const JobId resumable = w.submit(spec);
  w.run();
  ASSERT_FALSE(w.allocated(resumable));
  w.now += 5 * kHour;
  const JobId request = w.submit(a, 8, 15 * kMinute);  // 2 GPU-hours
  auto r = w.run();
  EXPECT_TRUE(World::started(r, request));
  EXPECT_NE(World::stopped(r, resumable), nullptr);
}

TEST_F(Preemption, UnallocatedLossLimitCountsAllVictimsTogether) {
  use(w, b, 1.5);  // /b is over: its work starts unallocated, with its contract declared
  const JobId v1 = w.submit(b, 4, kHour);
  const JobId v2 = w.submit(b, 4, kHour);
  w.run();
  ASSERT_TRUE(w.running(v1) && w.running(v2));
  ASSERT_FALSE(w.allocated(v1) || w.allocated(v2));
  w.now += 3 * kHour;                                 // 12 GPU-hours at risk each, 24 in all
  const JobId two_hours = w.submit(a, 8, 2 * kHour);  // 16 GPU-hours: each fits, both do not
  auto r = w.run();
  EXPECT_TRUE(r.stops.empty());
  EXPECT_TRUE(w.pending(two_hours));
  ASSERT_TRUE(w.s.job_finished(two_hours, w.now).ok());
  const JobId three_hours = w.submit(a, 8, 3 * kHour);  // 24 GPU-hours: worth both
  r = w.run();
  EXPECT_TRUE(World::started(r, three_hours));
  EXPECT_EQ(r.stops.size(), 2u);
}

TEST_F(Preemption, UnallocatedLossLimitFreeWorkStaysTakeable) {
  const JobId free_run = w.submit(b, 8, 0);  // minimum runtime 0: free by choice, not resumable
  w.run();
  w.now += 10 * kHour;  // 80 GPU-hours at risk, but it asked for no contract
  const JobId request = w.submit(a, 8, kHour);
  auto r = w.run();
  EXPECT_TRUE(World::started(r, request));
  EXPECT_NE(World::stopped(r, free_run), nullptr);
}

TEST(PreemptionChoice, AResumableVictimRisksOnlyWorkSinceItsLastCheckpoint) {
  testing::World w;
  w.add_nodes(2);
  const BudgetId a = w.budget("/a"), b = w.budget("/b");
  JobSpec long_resumable = w.job(b, 8, 0);
  long_resumable.resumable = true;
  const JobId resumable = w.submit(long_resumable);
  w.run();
  w.now = 4 * kHour;
  const JobId plain = w.submit(b, 8, 0);  // runs 1 h when asked, but would lose all of it
  w.run();
  w.now = 5 * kHour;
  w.submit(a, 8, kHour);
  auto r = w.run();
  ASSERT_EQ(r.stops.size(), 1u);
  EXPECT_EQ(r.stops[0].job, resumable) << "5 h run, but only 30 min at risk; the other loses 1 h";
  EXPECT_TRUE(w.running(plain));
}
}  // namespace
}  // namespace allot::core

namespace allot::core {
namespace {
TEST(DebugJobs, AreFundedEvenFromABudgetOverItsAllocationUpToAPerBudgetCap) {
  testing::World w;
  w.add_nodes(1);
  const BudgetId a = w.budget("/a"), b = w.budget("/b");
  const JobId free_work = w.submit(b, 8, 0);
  w.run();
  w.now = 7 * kDay;
  w.s.advance(w.now);
  w.s.record_usage(0, a, w.now - kDay, w.now,
                   static_cast<Milli>(1.5 * w.s.allocation(0, a) / kDay));  // /a is over
  auto debug_job = [&](int gpus) {
    JobSpec j = w.job(a, gpus, 10 * kMinute);
    j.kind = JobKind::Debug;
    return w.submit(j);
  };
  const JobId d1 = debug_job(4);
  auto r = w.run();
  ASSERT_TRUE(World::started(r, d1)) << "a debug job must not wait behind its budget's standing";
  EXPECT_TRUE(w.allocated(d1));
  ASSERT_NE(World::stopped(r, free_work), nullptr);
  w.carry_out(r);
  const JobId d2 = debug_job(4);
  const JobId d3 = debug_job(4);  // beyond 8 debug GPUs running for /a: not funded
  r = w.run_at(w.now + 60);
  EXPECT_TRUE(w.allocated(d2));
  ASSERT_NE(World::why(r, d3), nullptr);
  EXPECT_FALSE(World::why(r, d3)->funded);
}
}  // namespace
}  // namespace allot::core

namespace allot::core {
namespace {

// docs/policy.md section 8, "Victims within their share": of two unallocated victims, the one whose
// budget holds no more than its share is taken last, even though it would lose less.
TEST(PreemptionChoice, WorkOfABudgetWithinItsShareIsTakenLast) {
  auto victim_for = [](bool spare) {
    PolicyConfig config;
    config.spare_work_within_share = spare;
    World w(config);
    w.add_nodes(1);
    // Fractions 1/4, 1/4, 1/2 of 8 GPUs: y's share is 2 GPUs, z's 4.
    const BudgetId x = w.budget("/x", 1), y = w.budget("/y", 1), z = w.budget("/z", 2);
    const JobId over_share = w.submit(y, 4, 0);  // y holds 4 > 2: above its share
    w.run();
    w.now = kHour;
    const JobId within = w.submit(z, 4, 0);  // z holds 4 <= 4, and would lose an hour less
    w.run();
    EXPECT_TRUE(w.running(over_share) && w.running(within));
    w.now = 2 * kHour;
    w.submit(x, 4, kHour);
    auto r = w.run();
    EXPECT_EQ(r.stops.size(), 1u);
    return r.stops.empty() ? kNoJob : r.stops[0].job;
  };
  EXPECT_EQ(victim_for(true), JobId{1}) << "the work above its budget's share goes first";
  EXPECT_EQ(victim_for(false), JobId{2}) << "without the rule, the cheapest loss goes first";
}

// docs/policy.md section 8, "Preempted enough": a job started more than max_preemptions_per_job
// times is no longer a victim, and a resubmission carries its earlier starts.
TEST(PreemptionChoice, AJobIsPreemptedAtMostMaxPreemptionsPerJobTimes) {
  PolicyConfig config;
  config.max_preemptions_per_job = 2;
  World w(config);
  w.add_nodes(1);
  const BudgetId a = w.budget("/a"), b = w.budget("/b");
  JobSpec free_job = w.job(b, 8, 0);
  free_job.resumable = true;
  const JobId victim = w.submit(free_job);
  int preempted = 0;
  for (int round = 0; round < 4; ++round) {
    w.run();
    ASSERT_TRUE(w.running(victim)) << "round " << round;
    w.now += kMinute;
    const JobId requester = w.submit(a, 8, kMinute);
    auto r = w.run();
    if (World::stopped(r, victim)) {
      ++preempted;
      w.carry_out(r);
    }
    // The requester ends (or, left waiting, is cancelled); the victim is the only work left.
    w.now += 2 * kMinute;
    ASSERT_TRUE(w.s.job_finished(requester, w.now).ok());
  }
  EXPECT_EQ(preempted, 2);

  // The same work resubmitted under a new id after two starts may be taken once more only.
  JobSpec again = w.job(b, 8, 0);
  again.earlier_starts = 2;
  World v(config);
  v.add_nodes(1);
  const BudgetId va = v.budget("/a"), vb = v.budget("/b");
  again.budget = vb;
  const JobId second = v.submit(again);
  v.run();
  ASSERT_TRUE(v.running(second));
  EXPECT_EQ(v.s.job(second)->runs, 3);
  v.now += kMinute;
  v.submit(va, 8, kMinute);
  EXPECT_EQ(World::stopped(v.run(), second), nullptr) << "started 3 times: taken no more";
}

}  // namespace
}  // namespace allot::core
