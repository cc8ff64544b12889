// The lazy walk's jumps (docs/design/0004) happen only in queues of 512 jobs or more, which the
// property tests' small scenarios never build. Here twins replay the same long-queue scenario,
// one with explain_all (the full walk: no passing over, no jumps) and one without (the lazy walk,
// which jumps): every decision of every cycle must be the same, under each queue order and
// funding rule.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <sstream>
#include <string>

#include "core/scheduler.h"

namespace allot::core {
namespace {

std::string describe(const CycleResult& r) {
  std::ostringstream o;
  for (const StartDecision& d : r.starts) {
    o << "start " << d.job << " c" << d.cluster << (d.allocated ? " alloc" : " free") << " until "
      << d.protected_until << " mode " << static_cast<int>(d.mode) << " on";
    for (const GpuSlot& g : d.placement) o << ' ' << g.node << '/' << g.gpu << '/' << g.milli;
    o << " taking";
    for (JobId v : d.victims) o << ' ' << v;
    o << '\n';
  }
  for (const StopDecision& d : r.stops) o << "stop " << d.job << '\n';
  for (const ClassChange& c : r.class_changes) o << "class " << c.job << ' ' << c.allocated << '\n';
  for (const Reservation& v : r.reservations) {
    o << "reserve " << v.job << " at " << v.expected_start << " on";
    for (NodeId n : v.nodes) o << ' ' << n;
    o << '\n';
  }
  return o.str();
}

struct Twins {
  explicit Twins(const PolicyConfig& config) : full(config), lazy(config) {}
  Scheduler full, lazy;
};

void replay(const PolicyConfig& config, std::uint64_t seed) {
  Twins t(config);
  std::mt19937_64 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<BudgetId> leaves;
  for (Scheduler* s : {&t.full, &t.lazy}) {
    const ClusterId c = s->add_cluster("long");
    for (int n = 0; n < 16; ++n) {
      NodeSpec spec;
      spec.name = "n" + std::to_string(n);
      spec.cluster = c;
      spec.model = *s->catalog().find(n % 4 == 3 ? "H200" : "H100");
      spec.gpus = 8;
      spec.block = "b" + std::to_string(n / 8);
      ASSERT_TRUE(s->add_node(spec).ok());
    }
    leaves.clear();
    for (const char* path : {"/a/x", "/a/y", "/b/x", "/b/y"}) {
      leaves.push_back(s->budgets().ensure_path(path, 1.0).value());
    }
  }
  // A history that leaves some budgets under their allocation and some over it.
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const Milli rate = static_cast<Milli>(i) * 30 * kWholeGpu;
    for (Scheduler* s : {&t.full, &t.lazy}) s->record_usage(0, leaves[i], 0, 3 * kDay, rate);
  }
  Time now = 3 * kDay;
  std::map<JobId, Duration> duration;
  JobId next = 1;
  auto submit_some = [&](int count) {
    for (int i = 0; i < count; ++i) {
      JobSpec j;
      j.id = next++;
      j.owner = "u";
      j.budget = leaves[static_cast<std::size_t>(pick(0, 3))];
      const int shape = pick(0, 9);
      if (shape == 0) {
        j.shape.gpu_milli = pick(0, 1) ? 250 : 500;
      } else {
        j.shape.gpus_per_node = std::vector<int>{1, 2, 4, 8}[static_cast<std::size_t>(pick(0, 3))];
        if (j.shape.gpus_per_node == 8)
          j.shape.nodes = std::vector<int>{1, 2, 4}[static_cast<std::size_t>(pick(0, 2))];
      }
      j.min_runtime = std::vector<Duration>{0, 10 * kMinute, kHour,
                                            4 * kHour}[static_cast<std::size_t>(pick(0, 3))];
      if (pick(0, 19) == 0 && j.shape.total_gpus() <= 2) {
        j.kind = JobKind::Debug;
        j.min_runtime = 10 * kMinute;
      }
      j.priority = static_cast<Priority>(pick(0, 3));
      j.resumable = pick(0, 1) == 1;
      j.submit_time = now;
      duration[j.id] = pick(1, 36) * 10 * kMinute;
      ASSERT_TRUE(t.full.submit(j, now).ok());
      ASSERT_TRUE(t.lazy.submit(j, now).ok());
    }
  };
  submit_some(2400);  // about 600 a budget: long enough queues for the jumps
  std::map<JobId, Time> started;
  for (int step = 0; step < 60; ++step) {
    const CycleResult a = t.full.cycle(now, CycleOptions{/*explain_all=*/true});
    const CycleResult b = t.lazy.cycle(now, CycleOptions{/*explain_all=*/false});
    ASSERT_EQ(describe(a), describe(b)) << "seed " << seed << ", cycle " << step;
    for (const StopDecision& d : a.stops) {
      ASSERT_TRUE(t.full.job_stopped(d.job, now).ok());
      ASSERT_TRUE(t.lazy.job_stopped(d.job, now).ok());
      started.erase(d.job);
    }
    for (const StartDecision& d : a.starts) started[d.job] = now;
    now += 10 * kMinute;
    for (auto it = started.begin(); it != started.end();) {
      if (now - it->second >= duration[it->first]) {
        ASSERT_TRUE(t.full.job_finished(it->first, now).ok());
        ASSERT_TRUE(t.lazy.job_finished(it->first, now).ok());
        it = started.erase(it);
      } else {
        ++it;
      }
    }
    if (step % 10 == 9) submit_some(100);
  }
  EXPECT_GE(t.lazy.pending_count(), 1000u) << "the queues stayed long";
}

PolicyConfig fifo() {
  PolicyConfig c;
  c.order = QueueOrder::Fifo;
  c.funding = Funding::Always;
  c.minimum_runtime_contract = false;
  c.preemption = false;
  return c;
}
PolicyConfig priority() {
  PolicyConfig c;
  c.order = QueueOrder::Priority;
  c.funding = Funding::ConcurrentCap;
  c.minimum_runtime_contract = false;
  return c;
}
PolicyConfig fairtree() {
  PolicyConfig c;
  c.funding = Funding::Always;
  c.minimum_runtime_contract = false;
  c.preemption = false;
  return c;
}

TEST(LongQueues, LazyWalkWithJumpsDecidesAsTheFullWalkUnderFairShare) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) replay(PolicyConfig{}, seed);
}
TEST(LongQueues, LazyWalkWithJumpsDecidesAsTheFullWalkUnderFifo) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) replay(fifo(), seed);
}
TEST(LongQueues, LazyWalkWithJumpsDecidesAsTheFullWalkUnderPriority) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) replay(priority(), seed);
}
TEST(LongQueues, LazyWalkWithJumpsDecidesAsTheFullWalkUnderFairTree) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) replay(fairtree(), seed);
}

}  // namespace
}  // namespace allot::core
