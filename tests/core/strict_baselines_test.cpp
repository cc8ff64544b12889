// The rules the strict baselines (fifo-strict, sjf-strict) need from the core: head-of-line
// blocking, the consolidate placement, uneven gang shapes and the shortest-first order.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "world.h"

namespace allot::core {
namespace {

using testing::World;

PolicyConfig strict_fifo() {
  PolicyConfig c;
  c.order = QueueOrder::Fifo;
  c.funding = Funding::Always;
  c.minimum_runtime_contract = false;
  c.preemption = false;
  c.backfill = false;
  c.reserve_for_blocked = false;
  c.debug_jobs_first = false;
  c.head_of_line_blocking = true;
  c.placement = PlacementRule::Consolidate;
  return c;
}

// GPUs of the job on each node.
std::map<NodeId, int> spread(const World& w, JobId id) {
  std::map<NodeId, int> out;
  for (const GpuSlot& g : w.s.job(id)->run.placement) ++out[g.node];
  return out;
}

Shape uneven(int nodes, int per_node, int last) {
  Shape s;
  s.nodes = nodes;
  s.gpus_per_node = per_node;
  s.last_node_gpus = last;
  return s;
}

TEST(HeadOfLine, ABlockedHeadStopsEverythingBehindIt) {
  for (const bool explain : {true, false}) {
    SCOPED_TRACE(explain);
    World w(strict_fifo());
    w.add_nodes(2);
    const BudgetId a = w.budget("/a");
    const JobId first = w.submit(a, 8);
    w.now = 1;
    JobSpec big = w.job(a, 8);
    big.shape.nodes = 2;
    const JobId head = w.submit(big);  // needs both nodes: blocked while `first` runs
    w.now = 2;
    const JobId small = w.submit(a, 1);  // fits the free node, but is behind the head
    JobSpec too_big = w.job(a, 8);
    too_big.shape.nodes = 3;  // more nodes than the cluster has: its owner must hear so
    const JobId impossible = w.submit(too_big);
    CycleOptions o;
    o.explain_all = explain;
    auto r = w.s.cycle(w.now, o);
    if (explain) {
      ASSERT_NE(World::why(r, impossible), nullptr);
      EXPECT_EQ(World::why(r, impossible)->code, WaitCode::NoMatchingNodes);
    }
    EXPECT_EQ(World::start_order(r), std::vector<JobId>{first});
    EXPECT_TRUE(w.pending(head));
    EXPECT_TRUE(w.pending(small));
    if (explain) {
      ASSERT_NE(World::why(r, small), nullptr);
      EXPECT_EQ(World::why(r, small)->code, WaitCode::WaitingForGpus);
      EXPECT_EQ(World::why(r, small)->largest_free, 8);
    }
    // Nothing changes while the head waits, however many cycles run.
    w.now = 3;
    EXPECT_TRUE(w.s.cycle(w.now, o).starts.empty());
    // The head's GPUs come free: it starts, and the small job behind it with it.
    w.now = 10;
    ASSERT_TRUE(w.s.job_finished(first, w.now).ok());
    r = w.s.cycle(w.now, o);
    EXPECT_EQ(World::start_order(r), (std::vector<JobId>{head}));
    EXPECT_TRUE(w.pending(small)) << "both nodes are the head's now";
  }
}

TEST(HeadOfLine, WithoutItTheWalkGoesOnPastABlockedJob) {
  PolicyConfig c = strict_fifo();
  c.head_of_line_blocking = false;
  World w(c);
  w.add_nodes(2);
  const BudgetId a = w.budget("/a");
  w.submit(a, 8);
  JobSpec big = w.job(a, 8);
  big.shape.nodes = 2;
  w.submit(big);
  const JobId small = w.submit(a, 1);
  EXPECT_TRUE(World::started(w.run(), small));
}

TEST(HeadOfLine, AppliesToTheFairShareWalkToo) {
  PolicyConfig c = strict_fifo();
  c.order = QueueOrder::FairShare;
  World w(c);
  w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  const JobId running = w.submit(a, 4);
  w.now = 1;
  const JobId head = w.submit(a, 8);
  w.now = 2;
  const JobId small = w.submit(a, 2);
  CycleOptions o;
  o.explain_all = false;
  EXPECT_EQ(World::start_order(w.s.cycle(w.now, o)), std::vector<JobId>{running});
  EXPECT_TRUE(w.pending(head));
  EXPECT_TRUE(w.pending(small));
}

TEST(HeadOfLine, DebugJobsWaitInLineWithoutTheirOwnPass) {
  World w(strict_fifo());
  w.add_nodes(1);
  const BudgetId a = w.budget("/a");
  w.submit(a, 6);
  w.now = 1;
  const JobId head = w.submit(a, 4);
  w.now = 2;
  JobSpec dbg = w.job(a, 1, 10 * kMinute);
  dbg.kind = JobKind::Debug;
  const JobId debug = w.submit(dbg);
  w.run();
  EXPECT_TRUE(w.pending(head));
  EXPECT_TRUE(w.pending(debug)) << "no debug-first pass: it waits behind the head";

  PolicyConfig first = strict_fifo();
  first.debug_jobs_first = true;
  World v(first);
  v.add_nodes(1);
  const BudgetId b = v.budget("/b");
  v.submit(b, 6);
  v.submit(b, 4);
  JobSpec d2 = v.job(b, 1, 10 * kMinute);
  d2.kind = JobKind::Debug;
  const JobId debug_first = v.submit(d2);
  EXPECT_TRUE(World::started(v.run(), debug_first)) << "its own pass comes first";
}

TEST(Consolidate, SmallRequestsGoToTheFullestNodeThatFitsTiesByIndex) {
  World w(strict_fifo());
  const auto n = w.add_nodes(4);
  const BudgetId a = w.budget("/a");
  // Free after these: n0 0, n1 3, n2 8, n3 8.
  JobSpec j1 = w.job(a, 5), j2 = w.job(a, 3), j3 = w.job(a, 5);
  const JobId x = w.submit(j1), y = w.submit(j2), z = w.submit(j3);
  w.run();
  // x: all free, lowest index: n0. y: fewest free that fits 3: n0 (3 left). z: n1.
  EXPECT_EQ(spread(w, x), (std::map<NodeId, int>{{n[0], 5}}));
  EXPECT_EQ(spread(w, y), (std::map<NodeId, int>{{n[0], 3}}));
  EXPECT_EQ(spread(w, z), (std::map<NodeId, int>{{n[1], 5}}));
  // 3 GPUs: n1 has 3 free, n2 and n3 8: the fullest that fits.
  w.now = 1;
  const JobId t = w.submit(a, 3);
  w.run();
  EXPECT_EQ(spread(w, t), (std::map<NodeId, int>{{n[1], 3}}));
  // 2 GPUs with n2 and n3 both at 8 free: the lower index.
  w.now = 2;
  const JobId u = w.submit(a, 2);
  w.run();
  EXPECT_EQ(spread(w, u), (std::map<NodeId, int>{{n[2], 2}}));
}

TEST(Consolidate, GangsTakeWholeNodesInIndexOrderIgnoringBlocks) {
  World w(strict_fifo());
  const auto big_block = w.add_nodes(3, 8, "H100", "b0");
  const auto small_block = w.add_nodes(2, 8, "H100", "b1");
  const BudgetId a = w.budget("/a");
  JobSpec g = w.job(a, 8);
  g.shape.nodes = 2;
  const JobId id = w.submit(g);
  w.run();
  // allot's best fit would take the tightest block that holds it (b1); consolidate takes n0, n1.
  EXPECT_EQ(spread(w, id), (std::map<NodeId, int>{{big_block[0], 8}, {big_block[1], 8}}));
  (void)small_block;
}

TEST(UnevenGang, TwelveGpusAreOneWholeNodeAndFourOnTheNextNodeWithTheMostFree) {
  World w(strict_fifo());
  const auto n = w.add_nodes(3);
  const BudgetId a = w.budget("/a");
  const JobId four = w.submit(a, 4);  // n0 keeps 4 free
  JobSpec g = w.job(a, 8);
  g.shape = uneven(2, 8, 4);
  const JobId gang = w.submit(g);
  w.run();
  EXPECT_EQ(spread(w, four), (std::map<NodeId, int>{{n[0], 4}}));
  // Whole node: the lowest-indexed with 8 free (n1); the remainder: the node with the most free
  // GPUs left (n2, 8 free), not the fullest that fits (n0), as Helios' consolidate placer does.
  EXPECT_EQ(spread(w, gang), (std::map<NodeId, int>{{n[1], 8}, {n[2], 4}}));
  EXPECT_EQ(w.s.job(gang)->spec.shape.total_gpus(), 12);
}

TEST(UnevenGang, TheRemainderTakesTheNodeWithTheMostFreeTiesByIndex) {
  World w(strict_fifo());
  const auto n = w.add_nodes(4);
  const BudgetId a = w.budget("/a");
  // Left free: n0 2, n1 3, n2 3, n3 8.
  const JobId six = w.submit(a, 6), five = w.submit(a, 5), five_more = w.submit(a, 5);
  JobSpec g = w.job(a, 8);
  g.shape = uneven(2, 8, 2);
  const JobId gang = w.submit(g);
  w.run();
  EXPECT_EQ(spread(w, six), (std::map<NodeId, int>{{n[0], 6}}));
  EXPECT_EQ(spread(w, five), (std::map<NodeId, int>{{n[1], 5}}));
  EXPECT_EQ(spread(w, five_more), (std::map<NodeId, int>{{n[2], 5}}));
  // n3 whole; the remainder of 2 on n1 (3 free, before n2 by index), not on n0 (2 free, the
  // fullest that fits). Helios' consolidate placer gives {3: 8}, {1: 2} from the same state.
  EXPECT_EQ(spread(w, gang), (std::map<NodeId, int>{{n[3], 8}, {n[1], 2}}));
}

TEST(UnevenGang, BestFitPlacementGivesTheRemainderToOneNodeToo) {
  World w;  // allot's own placement rule
  w.add_nodes(2);
  const BudgetId a = w.budget("/a");
  JobSpec g = w.job(a, 8);
  g.shape = uneven(2, 8, 3);
  const JobId gang = w.submit(g);
  w.run();
  ASSERT_TRUE(w.running(gang));
  int total = 0;
  std::multiset<int> per_node;
  for (const auto& [node, gpus] : spread(w, gang)) {
    total += gpus;
    per_node.insert(gpus);
  }
  EXPECT_EQ(total, 11);
  EXPECT_EQ(per_node, (std::multiset<int>{3, 8}));
}

TEST(UnevenGang, ShapesAreCheckedNamingTheField) {
  World w(strict_fifo());
  w.add_nodes(2);
  const BudgetId a = w.budget("/a");
  for (const Shape& bad : {uneven(2, 8, 8), uneven(2, 8, -1), uneven(1, 8, 4)}) {
    JobSpec j = w.job(a, 8);
    j.shape = bad;
    const Status st = w.s.submit(j, w.now);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.error().field, "last_node_gpus");
  }
}

TEST(UnevenGang, AFailedSearchForAnEvenGangIsNotReusedForAnUnevenOne) {
  PolicyConfig c = strict_fifo();
  // n0 keeps 4 free, n1 8. Two gangs in one cycle with the same nodes and GPUs per node: 16
  // cannot start, 12 can. Without head-of-line blocking both are tried.
  c.head_of_line_blocking = false;
  World v(c);
  v.add_nodes(2);
  const BudgetId b = v.budget("/b");
  v.submit(b, 4);
  JobSpec even = v.job(b, 8);
  even.shape.nodes = 2;
  v.submit(even);
  JobSpec odd = v.job(b, 8);
  odd.shape = uneven(2, 8, 4);
  const JobId twelve = v.submit(odd);
  CycleOptions o;
  o.explain_all = false;
  EXPECT_TRUE(World::started(v.s.cycle(v.now, o), twelve));
}

TEST(ShortestFirst, OrdersByDeclaredDurationThenSubmitTime) {
  PolicyConfig c = strict_fifo();
  c.order = QueueOrder::ShortestFirst;
  World w(c);
  w.add_nodes(1, 1);
  const BudgetId a = w.budget("/a");
  auto with = [&](std::optional<Duration> d) {
    JobSpec j = w.job(a, 1);
    j.expected_duration = d;
    ++w.now;
    j.submit_time = w.now;
    return w.submit(j);
  };
  const JobId none = with(std::nullopt), long_one = with(300);
  const JobId short_earlier = with(100), short_later = with(100);
  auto r = w.run();
  EXPECT_EQ(World::start_order(r), std::vector<JobId>{short_earlier});
  EXPECT_EQ(World::why(r, short_later)->rank, 1u);
  EXPECT_EQ(World::why(r, long_one)->rank, 2u);
  EXPECT_EQ(World::why(r, none)->rank, 3u) << "no declared duration: last";
}

}  // namespace
}  // namespace allot::core
