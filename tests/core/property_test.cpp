// Property tests of the scheduling core: thousands of seeded random scenarios, driven the way a
// simulator drives the core (events in, decisions carried out), with the invariants of issue 2
// checked after every cycle against a model the test keeps on its own.
//
// Environment:
//   ALLOT_PROPERTY_SCENARIOS=N   number of random scenarios in total (default 3000), split over the
//                                shards of RandomScenarios/*; the other tests scale with it.
//   ALLOT_PROPERTY_SEED=S        run only scenario S (every shard runs it once; use a filter such
//                                as --gtest_filter='*RandomScenarios/0') to reproduce a failure.
//
// A failure names the seed, the cycle and the simulated time, e.g.
//   seed 1234, cycle 17, t=5400: gpu-over-committed: ...
// and is reproduced with ALLOT_PROPERTY_SEED=1234 core_property_tests
// --gtest_filter='Property/RandomScenarios.Invariants/0'.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/scheduler.h"

namespace allot::core {
namespace {

// ---------------------------------------------------------------------------------------------
// Knobs.

std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  return std::strtoull(v, nullptr, 10);
}
std::uint64_t scenario_count() {
  return env_u64("ALLOT_PROPERTY_SCENARIOS", 3000);
}
std::optional<std::uint64_t> only_seed() {
  const char* v = std::getenv("ALLOT_PROPERTY_SEED");
  if (!v || !*v) return std::nullopt;
  return std::strtoull(v, nullptr, 10);
}
constexpr int kShards = 8;

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : g_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {  // inclusive
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(g_);
  }
  int i(int lo, int hi) { return static_cast<int>(uniform(lo, hi)); }
  double real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g_); }
  bool chance(double p) { return real(0.0, 1.0) < p; }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(v.size()) - 1))];
  }

 private:
  std::mt19937_64 g_;
};

// Bit-exact comparison of doubles ("the same decisions bit for bit").
bool same_bits(double a, double b) {
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

// ---------------------------------------------------------------------------------------------
// Field-by-field comparison of two cycle results. Returns "" when equal, else the first difference.

// With decisions_only, explanations and statistics are not compared (a cycle without explain_all
// explains only part of the queue, but must decide exactly the same). Without search_stats, the
// number of placement searches is not compared (a cycle without CycleOptions::shortcut_settled
// makes searches that the shortcut knows would fail).
std::string diff_results(const CycleResult& a, const CycleResult& b, bool decisions_only = false,
                         bool search_stats = true) {
  std::ostringstream os;
#define ALLOT_CMP(cond, what) \
  do {                        \
    if (!(cond)) {            \
      os << what;             \
      return os.str();        \
    }                         \
  } while (0)
  ALLOT_CMP(a.now == b.now, "now " << a.now << " vs " << b.now);
  ALLOT_CMP(a.stops.size() == b.stops.size(),
            "stops.size " << a.stops.size() << " vs " << b.stops.size());
  for (std::size_t i = 0; i < a.stops.size(); ++i) {
    const StopDecision &x = a.stops[i], &y = b.stops[i];
    ALLOT_CMP(x.job == y.job && x.reason == y.reason && x.for_job == y.for_job &&
                  x.requeue == y.requeue && x.node == y.node && x.victim.cls == y.victim.cls &&
                  x.victim.victim_branch == y.victim.victim_branch &&
                  x.victim.requester_branch == y.victim.requester_branch &&
                  same_bits(x.victim.victim_standing, y.victim.victim_standing) &&
                  same_bits(x.victim.requester_standing, y.victim.requester_standing) &&
                  x.victim.ran_for == y.victim.ran_for,
              "stops[" << i << "] differ (job " << x.job << " vs " << y.job << ")");
  }
  ALLOT_CMP(a.class_changes.size() == b.class_changes.size(),
            "class_changes.size " << a.class_changes.size() << " vs " << b.class_changes.size());
  for (std::size_t i = 0; i < a.class_changes.size(); ++i) {
    const ClassChange &x = a.class_changes[i], &y = b.class_changes[i];
    ALLOT_CMP(x.job == y.job && x.allocated == y.allocated &&
                  x.protected_until == y.protected_until && x.limiting_budget == y.limiting_budget,
              "class_changes[" << i << "] differ (job " << x.job << " vs " << y.job << ")");
  }
  ALLOT_CMP(a.starts.size() == b.starts.size(),
            "starts.size " << a.starts.size() << " vs " << b.starts.size());
  for (std::size_t i = 0; i < a.starts.size(); ++i) {
    const StartDecision &x = a.starts[i], &y = b.starts[i];
    ALLOT_CMP(x.job == y.job && x.cluster == y.cluster && x.placement == y.placement &&
                  x.allocated == y.allocated && x.protected_until == y.protected_until &&
                  x.mode == y.mode && x.victims == y.victims,
              "starts[" << i << "] differ (job " << x.job << " vs " << y.job << ")");
  }
  ALLOT_CMP(a.reservations.size() == b.reservations.size(),
            "reservations.size " << a.reservations.size() << " vs " << b.reservations.size());
  for (std::size_t i = 0; i < a.reservations.size(); ++i) {
    const Reservation &x = a.reservations[i], &y = b.reservations[i];
    ALLOT_CMP(x.job == y.job && x.cluster == y.cluster && x.nodes == y.nodes &&
                  x.expected_start == y.expected_start,
              "reservations[" << i << "] differ (job " << x.job << " vs " << y.job << ")");
  }
  if (decisions_only) return "";
  ALLOT_CMP(a.waiting.size() == b.waiting.size(),
            "waiting.size " << a.waiting.size() << " vs " << b.waiting.size());
  for (std::size_t i = 0; i < a.waiting.size(); ++i) {
    const Explanation &x = a.waiting[i], &y = b.waiting[i];
    ALLOT_CMP(
        x.job == y.job && x.code == y.code && x.cluster == y.cluster && x.rank == y.rank &&
            x.ahead_in_budget == y.ahead_in_budget && x.funded == y.funded &&
            x.budget == y.budget && same_bits(x.standing, y.standing) &&
            x.limiting_budget == y.limiting_budget &&
            same_bits(x.limiting_standing, y.limiting_standing) && x.needs_nodes == y.needs_nodes &&
            x.needs_gpus_per_node == y.needs_gpus_per_node && x.largest_free == y.largest_free &&
            x.expected_start == y.expected_start && x.reserved_for == y.reserved_for,
        "waiting[" << i << "] differ (job " << x.job << " vs " << y.job << ")");
  }
  ALLOT_CMP(a.stats.considered == b.stats.considered &&
                (!search_stats || a.stats.placement_searches == b.stats.placement_searches) &&
                a.stats.preemption_attempts == b.stats.preemption_attempts,
            "stats differ");
#undef ALLOT_CMP
  return "";
}

// ---------------------------------------------------------------------------------------------
// A random scenario and the simulator that plays it.

struct Options {
  bool twin = true;         // replay every event on a second scheduler and compare decisions
  bool plan_cycle = false;  // also compare plan_cycle(copy, now) with cycle(now)
};

struct Failure {
  std::string text;
};

// What the scenarios exercised, so that a passing run can be seen to mean something.
struct Coverage {
  std::size_t scenarios = 0, cycles = 0, starts = 0, gang_starts = 0, fractional_starts = 0,
              backfilled = 0, preempting = 0, preempted = 0, preempted_allocated = 0, claimed = 0,
              drained = 0, node_down = 0, promoted = 0, demoted = 0, reservations = 0,
              explanations = 0, past_lookback = 0;
  std::map<WaitCode, std::size_t> codes;
  void add(const Coverage& o) {
    scenarios += o.scenarios;
    cycles += o.cycles;
    starts += o.starts;
    gang_starts += o.gang_starts;
    fractional_starts += o.fractional_starts;
    backfilled += o.backfilled;
    preempting += o.preempting;
    preempted += o.preempted;
    preempted_allocated += o.preempted_allocated;
    claimed += o.claimed;
    drained += o.drained;
    node_down += o.node_down;
    promoted += o.promoted;
    demoted += o.demoted;
    reservations += o.reservations;
    explanations += o.explanations;
    past_lookback += o.past_lookback;
    for (const auto& [k, v] : o.codes) codes[k] += v;
  }
  std::string str() const {
    std::ostringstream os;
    os << scenarios << " scenarios (" << past_lookback << " longer than their lookback), " << cycles
       << " cycles, " << starts << " starts (" << gang_starts << " gang, " << fractional_starts
       << " fractional, " << backfilled << " backfilled, " << preempting << " preempting), "
       << preempted << " preempted (" << preempted_allocated << " allocated, " << claimed
       << " for share claims), " << drained << " drained, " << node_down << " node-down, "
       << promoted << " promoted, " << demoted << " demoted, " << reservations << " reservations, "
       << explanations << " explanations:";
    for (const auto& [k, v] : codes) os << " " << to_string(k) << "=" << v;
    return os.str();
  }
};

// What the test knows about a job, kept from the decisions alone (never read back from the core).
struct ModelJob {
  enum class State { Pending, Running, Stopping } state = State::Pending;
  JobSpec spec;
  std::optional<Duration> actual;  // how long a run lasts before it ends by itself; none: forever
  ClusterId cluster = 0;
  Placement placement;
  Time started = 0;
  bool allocated = false;
  bool ever_allocated = false;  // allocated at some point of this run
  Time protected_until = 0;
  Time finish_at = kNever;
  Time stopped_at = kNever;  // when the simulator reports job_stopped
};

class Sim {
 public:
  Sim(std::uint64_t seed, Options opt) : seed_(seed), opt_(opt), rng_(seed) {}

  // Plays the scenario; returns the first invariant broken, if any.
  std::optional<Failure> run() {
    make_config();
    scheds_.emplace_back(config_);
    if (opt_.twin) scheds_.emplace_back(config_);
    make_clusters();
    make_budgets();
    if (failure_) return failure_;
    play();
    return failure_;
  }

  Coverage coverage() const {
    Coverage c = cov_;
    c.scenarios = 1;
    c.cycles = cycle_;
    c.past_lookback = now_ > config_.lookback;
    return c;
  }
  const std::map<std::string, std::string>& soft_failures() const { return soft_; }

 private:
  // ---- failure reporting ----
  bool fail(const std::string& what) {
    if (failure_) return false;
    std::ostringstream os;
    os << "seed " << seed_ << ", cycle " << cycle_ << ", t=" << now_ << ": " << what
       << "\n  reproduce: ALLOT_PROPERTY_SEED=" << seed_
       << " core_property_tests --gtest_filter='Property/RandomScenarios.Invariants/0'";
    failure_ = Failure{os.str()};
    return false;
  }
  // A broken invariant that does not stop the scenario: the first occurrence of each kind is
  // kept and reported at the end (the test still fails).
  void soft_fail(const std::string& kind, const std::string& what) {
    if (soft_.count(kind)) return;
    std::ostringstream os;
    os << "seed " << seed_ << ", cycle " << cycle_ << ", t=" << now_ << ": " << what
       << "\n  reproduce: ALLOT_PROPERTY_SEED=" << seed_
       << " core_property_tests --gtest_filter='Property/RandomScenarios.Invariants/0'";
    soft_[kind] = os.str();
  }
#define SOFT(cond, kind, what)    \
  do {                            \
    if (!(cond)) {                \
      std::ostringstream os_;     \
      os_ << what;                \
      soft_fail(kind, os_.str()); \
    }                             \
  } while (0)
#define INV(cond, what)       \
  do {                        \
    if (!(cond)) {            \
      std::ostringstream os_; \
      os_ << what;            \
      return fail(os_.str()); \
    }                         \
  } while (0)

  Scheduler& main() {
    return scheds_.front();
  }

  template <typename F>
  bool on_all(const char* what, F&& f) {
    std::optional<bool> first;
    for (Scheduler& s : scheds_) {
      const Status st = f(s);
      if (!first) first = st.ok();
      INV(st.ok() == *first, what << ": twins disagree on the status");
      if (!st.ok()) last_error_ = st.error().message();
    }
    return first.value_or(true);
  }

  // ---- the scenario ----
  void make_config() {
    PolicyConfig& c = config_;
    const int lb = rng_.i(0, 9);
    if (lb < 6) {  // default: 7 days of 1 h buckets
    } else if (lb < 8) {
      c.lookback = kDay;
      c.usage_bucket = kHour;
    } else {
      c.lookback = 6 * kHour;
      c.usage_bucket = 10 * kMinute;
    }
    c.preemption_margin = rng_.pick(std::vector<double>{0.0, 0.1, 0.1, 0.5});
    c.allocation_limit = rng_.pick(std::vector<double>{0.5, 1.0, 1.0, 1.0, 1.5});
    c.backfill = rng_.chance(0.85);
    c.reserve_for_blocked = rng_.chance(0.85);
    c.backfill_unallocated_on_reserved = rng_.chance(0.8);
    c.gang_spans_blocks = rng_.chance(0.8);
    c.debug_jobs_first = rng_.chance(0.9);
    c.max_reservations = rng_.pick(std::vector<int>{0, 1, 2, 2, 4});
    c.max_preemption_attempts = rng_.pick(std::vector<int>{1, 4, 32, 32});
    c.demote_over_allocation = rng_.chance(0.85);
    c.promote_when_funded = rng_.chance(0.85);
    c.preemption = rng_.chance(0.95);
    c.minimum_runtime_contract = rng_.chance(0.9);
    const int f = rng_.i(0, 9);
    c.funding = f < 8 ? Funding::Lookback : f < 9 ? Funding::Always : Funding::ConcurrentCap;
    const int o = rng_.i(0, 9);
    c.order = o < 8 ? QueueOrder::FairShare : o < 9 ? QueueOrder::Fifo : QueueOrder::Priority;
    c.burst_limit = rng_.pick(std::vector<double>{0.0, 0.5, 1.1, 1.1, 2.0});
    c.max_unallocated_loss_ratio = rng_.pick(std::vector<double>{0.0, 0.25, 1.0, 1.0});
    // The strict baselines' rules, from a stream of their own so that every other draw (and so
    // every scenario the seeds made before) stays as it was.
    Rng strict(seed_ ^ 0x5712C7F1F0ull);
    c.head_of_line_blocking = strict.chance(0.15);
    if (strict.chance(0.15)) c.placement = PlacementRule::Consolidate;
    if (c.order == QueueOrder::Fifo && strict.chance(0.5)) c.order = QueueOrder::ShortestFirst;
    // The burst exception's variants and kept non-resumable runs (docs/design/0014): a stream of
    // their own too.
    Rng kept(seed_ ^ 0x6B3E9A0D14ull);
    if (kept.chance(0.2)) c.burst_exempt_below = kept.pick(std::vector<double>{0.5, 1.0});
    if (kept.chance(0.2)) c.burst_exempt_max_size = kept.pick(std::vector<double>{1.0, 2.0});
    c.keep_non_resumable_allocated = kept.chance(0.2);
    if (kept.chance(0.2)) c.inference_share = kept.pick(std::vector<double>{0.25, 0.5});
    // Fragmentation-aware placement (§14), from its own stream as well.
    Rng frag(seed_ ^ 0x3F6D2A91C5ull);
    if (c.placement == PlacementRule::BestFit && frag.chance(0.25)) {
      c.placement = PlacementRule::LeastFragmenting;
    }
  }

  void make_clusters() {
    const int nclusters = rng_.chance(0.8) ? 1 : rng_.i(2, 3);
    for (int c = 0; c < nclusters; ++c) {
      for (Scheduler& s : scheds_) s.add_cluster("c" + std::to_string(c));
    }
    const int size_class = rng_.i(0, 9);
    const int nnodes = size_class < 4   ? rng_.i(1, 8)
                       : size_class < 8 ? rng_.i(9, 64)
                                        : rng_.i(65, 200);
    // A few models per scenario; H100=0 H200=1 B200=2 A100=4 in the standard catalogue.
    std::vector<GpuModelId> models{0};
    if (rng_.chance(0.5)) models.push_back(1);
    if (rng_.chance(0.3)) models.push_back(2);
    if (rng_.chance(0.2)) models.push_back(4);
    models_ = models;
    const int block_size = rng_.pick(std::vector<int>{2, 4, 8, 16, 32});
    for (int n = 0; n < nnodes; ++n) {
      NodeSpec spec;
      spec.name = "n" + std::to_string(n);
      spec.cluster = static_cast<ClusterId>(rng_.i(0, nclusters - 1));
      spec.model = rng_.pick(models);
      spec.gpus = rng_.pick(std::vector<int>{1, 2, 4, 8, 8, 8, 8});
      spec.block = "c" + std::to_string(spec.cluster) + "-b" + std::to_string(n / block_size);
      for (Scheduler& s : scheds_) {
        auto r = s.add_node(spec);
        if (!r.ok()) {
          fail("add_node failed: " + r.error().message());
          return;
        }
      }
      node_gpus_.push_back(spec.gpus);
      node_cluster_.push_back(spec.cluster);
      node_model_.push_back(spec.model);
    }
    used_.resize(static_cast<std::size_t>(nnodes));
    for (int n = 0; n < nnodes; ++n) used_[n].assign(static_cast<std::size_t>(node_gpus_[n]), 0);
    nclusters_ = nclusters;
  }

  void make_budgets() {
    const int levels = rng_.i(1, 4);
    parent_.push_back(kNoBudget);  // the root
    std::vector<BudgetId> frontier{0};
    for (int level = 1; level <= levels; ++level) {
      std::vector<BudgetId> next;
      for (BudgetId p : frontier) {
        if (level > 1 && rng_.chance(0.2) && !next.empty()) {
          leaves_.push_back(p);  // stops early: a leaf above the deepest level
          continue;
        }
        const int kids = rng_.i(1, level == 1 ? 5 : 3);
        for (int k = 0; k < kids; ++k) {
          const double share =
              rng_.chance(0.03) ? 0.0 : rng_.pick(std::vector<double>{0.5, 1, 1, 1, 2, 3, 10});
          std::optional<BudgetId> id;
          for (Scheduler& s : scheds_) {
            auto r = s.budgets().add(p, "b" + std::to_string(parent_.size()), share);
            if (!r.ok()) {
              fail("budget add failed: " + r.error().message());
              return;
            }
            id = r.value();
          }
          if (*id != parent_.size()) {
            fail("budget ids are not dense");
            return;
          }
          parent_.push_back(p);
          if (nclusters_ > 1 && rng_.chance(0.1)) {
            const ClusterId c = static_cast<ClusterId>(rng_.i(0, nclusters_ - 1));
            const double cs = rng_.real(0.1, 5.0);
            for (Scheduler& s : scheds_) (void)s.budgets().set_cluster_share(*id, c, cs);
          }
          next.push_back(*id);
        }
      }
      frontier = next;
    }
    leaves_.insert(leaves_.end(), frontier.begin(), frontier.end());
    std::sort(leaves_.begin(), leaves_.end());
    children_.resize(parent_.size());
    for (BudgetId b = 1; b < parent_.size(); ++b) children_[parent_[b]].push_back(b);
    rate_.assign(static_cast<std::size_t>(nclusters_), std::vector<Milli>(parent_.size(), 0));
    usage_.assign(static_cast<std::size_t>(nclusters_),
                  std::vector<std::map<std::int64_t, MilliGpuSeconds>>(parent_.size()));
  }

  JobSpec random_job() {
    JobSpec j;
    j.id = next_id_++;
    j.owner = "u" + std::to_string(rng_.i(0, 9));
    j.budget = rng_.pick(leaves_);
    const int kind = rng_.i(0, 99);
    Shape& s = j.shape;
    if (kind < 35) {
      s = Shape{1, 1, kWholeGpu};
    } else if (kind < 55) {
      s = Shape{1, rng_.pick(std::vector<int>{2, 4, 8}), kWholeGpu};
    } else if (kind < 70) {
      s = Shape{1, 1, rng_.pick(std::vector<Milli>{125, 250, 333, 500, 750, 999})};
    } else if (kind < 93) {
      s = Shape{rng_.i(2, 8), rng_.pick(std::vector<int>{1, 2, 4, 8, 8}), kWholeGpu};
    } else {
      // Large or impossible: most of the cluster, or more GPUs per node than any node has.
      s = Shape{rng_.i(1, std::max<int>(1, static_cast<int>(node_gpus_.size()))),
                rng_.pick(std::vector<int>{8, 16}), kWholeGpu};
    }
    if (rng_.chance(0.25)) j.models = {rng_.pick(models_)};
    if (rng_.chance(0.05)) j.models = {rng_.pick(models_), 3 /* B300: maybe on no node */};
    if (nclusters_ > 1 && rng_.chance(0.3)) {
      j.clusters = {static_cast<ClusterId>(rng_.i(0, nclusters_ - 1))};
    }
    j.min_runtime =
        rng_.chance(0.25)
            ? 0
            : rng_.pick(std::vector<Duration>{1, 60, 600, 1800, kHour, 4 * kHour, 8 * kHour});
    j.resumable = rng_.chance(0.5);
    j.priority = static_cast<Priority>(rng_.i(0, 3));
    j.kind = static_cast<JobKind>(rng_.i(0, 3));
    if (j.kind == JobKind::Debug) {
      j.min_runtime =
          std::min<Duration>(j.min_runtime, rng_.pick(std::vector<Duration>{0, 60, 900}));
      if (s.total_gpus() > 4) s = Shape{1, rng_.i(1, 4), kWholeGpu};
    }
    j.submit_time = now_;
    return j;
  }

  std::optional<Duration> random_actual(JobSpec& j) {
    const int r = rng_.i(0, 99);
    if (r < 60) {
      const Duration expected =
          rng_.pick(std::vector<Duration>{300, 900, kHour, 3 * kHour, 12 * kHour, kDay, 2 * kDay});
      j.expected_duration = expected;
      return std::max<Duration>(1, static_cast<Duration>(expected * rng_.real(0.3, 1.5)));
    }
    if (r < 85) return rng_.uniform(30, 2 * kDay);
    return std::nullopt;  // runs until cancelled, preempted or drained
  }

  bool submit_random() {
    JobSpec j = random_job();
    ModelJob m;
    m.actual = random_actual(j);
    m.spec = j;
    const bool ok = on_all("submit", [&](Scheduler& s) { return s.submit(j, now_); });
    if (failure_) return false;
    INV(ok, "submit of a valid job was refused: " << last_error_);
    jobs_.emplace(j.id, std::move(m));
    return true;
  }

  // ---- the independent usage model ----
  // Charges the allocated rate of every budget over [from, to) into buckets like the lookback
  // window does, so that the window's totals can be compared exactly.
  void integrate(Time from, Time to) {
    if (to <= from) return;
    const Duration bk = config_.usage_bucket;
    for (int c = 0; c < nclusters_; ++c) {
      for (BudgetId b = 0; b < parent_.size(); ++b) {
        const Milli r = rate_[c][b];
        if (r == 0) continue;
        for (Time t = from; t < to;) {
          const std::int64_t k = t / bk;
          const Time hi = std::min(to, (k + 1) * bk);
          usage_[c][b][k] += r * (hi - t);
          t = hi;
        }
      }
    }
  }
  MilliGpuSeconds model_usage(int c, BudgetId b) {
    const Duration bk = config_.usage_bucket;
    const std::int64_t n = (config_.lookback + bk - 1) / bk;
    const std::int64_t first_live = now_ / bk - n + 1;
    auto& m = usage_[c][b];
    m.erase(m.begin(), m.lower_bound(first_live));
    MilliGpuSeconds total = 0;
    for (const auto& [k, v] : m) total += v;
    return total;
  }
  void charge(const ModelJob& j, Milli sign) {
    Milli m = 0;
    for (const GpuSlot& g : j.placement) m += g.milli;
    for (BudgetId b = j.spec.budget; b != kNoBudget; b = parent_[b])
      rate_[j.cluster][b] += sign * m;
  }

  void advance_to(Time t) {
    integrate(now_, t);
    now_ = t;
  }

  // ---- playing ----
  void play() {
    const int initial = rng_.i(0, 3) == 0 ? rng_.i(0, 5) : rng_.i(5, 120);
    for (int i = 0; i < initial; ++i) {
      if (!submit_random()) return;
    }
    const int steps = rng_.i(15, 70);
    arrival_ = rng_.real(0.0, 3.0);
    const int step_class = rng_.i(0, 2);  // short, mixed or long steps
    for (int step = 0; step < steps && !failure_; ++step) {
      // Next time: a random step, cut short by the next job end or stop report (a discrete-event
      // simulator), or sometimes the core's own next wake-up.
      Duration dt = 0;
      const int r = rng_.i(0, 99);
      if (r < 5) {
        dt = 0;  // a second cycle at the same time
      } else if (step_class == 0 || r < 40) {
        dt = rng_.uniform(1, 120);
      } else if (step_class == 1 || r < 80) {
        dt = rng_.uniform(60, kHour);
      } else {
        dt = rng_.uniform(kHour, 8 * kHour);
      }
      Time t = now_ + dt;
      for (const auto& [id, j] : jobs_) {
        if (j.finish_at > now_) t = std::min(t, j.finish_at);
        if (j.stopped_at > now_) t = std::min(t, j.stopped_at);
      }
      if (rng_.chance(0.1)) {
        const Time w = main().next_wakeup();
        if (w != kNever && w > now_) t = std::min(t, w);
      }
      advance_to(t);
      if (!events()) return;
      if (!cycle()) return;
    }
  }

  bool events() {
    // Stops carried out, then jobs that end on their own.
    std::vector<JobId> stopped, finished;
    for (const auto& [id, j] : jobs_) {
      if (j.state == ModelJob::State::Stopping && j.stopped_at <= now_) stopped.push_back(id);
      if (j.state == ModelJob::State::Running && j.finish_at <= now_) finished.push_back(id);
    }
    for (JobId id : stopped) {
      const bool ok = on_all("job_stopped", [&](Scheduler& s) { return s.job_stopped(id, now_); });
      if (failure_) return false;
      INV(ok, "job_stopped(" << id << ") refused: " << last_error_);
      ModelJob& j = jobs_.at(id);
      if (j.spec.resumable) {
        j.state = ModelJob::State::Pending;
        j.stopped_at = j.finish_at = kNever;
      } else {
        jobs_.erase(id);
      }
    }
    for (JobId id : finished) finish(id);
    if (failure_) return false;
    // Cancellations of any job, pending or not.
    if (!jobs_.empty() && rng_.chance(0.15)) {
      auto it = jobs_.begin();
      std::advance(it, rng_.uniform(0, static_cast<std::int64_t>(jobs_.size()) - 1));
      finish(it->first);
      if (failure_) return false;
    }
    // Health and cordons.
    if (rng_.chance(0.15)) {
      const NodeId n = static_cast<NodeId>(rng_.i(0, static_cast<int>(node_gpus_.size()) - 1));
      const int h = rng_.i(0, 99);
      const NodeHealth health = h < 25   ? NodeHealth::Unhealthy
                                : h < 40 ? NodeHealth::Draining
                                : h < 50 ? NodeHealth::Down
                                         : NodeHealth::Healthy;
      const bool ok = on_all("set_node_health", [&](Scheduler& s) {
        return s.set_node_health(n, health, "property test", now_);
      });
      if (failure_) return false;
      INV(ok, "set_node_health refused: " << last_error_);
    }
    if (rng_.chance(0.05)) {
      const NodeId n = static_cast<NodeId>(rng_.i(0, static_cast<int>(node_gpus_.size()) - 1));
      const bool cordon = rng_.chance(0.6);
      on_all("set_cordoned", [&](Scheduler& s) { return s.set_cordoned(n, cordon); });
      if (failure_) return false;
    }
    // Managers change shares while jobs run.
    if (parent_.size() > 1 && rng_.chance(0.05)) {
      const BudgetId b = static_cast<BudgetId>(rng_.i(1, static_cast<int>(parent_.size()) - 1));
      const double share = rng_.pick(std::vector<double>{0.0, 0.5, 1, 2, 5});
      on_all("set_share", [&](Scheduler& s) { return s.budgets().set_share(b, share); });
      if (failure_) return false;
    }
    // Arrivals.
    const int arrivals = static_cast<int>(rng_.real(0.0, 2.0 * arrival_rate()));
    for (int i = 0; i < arrivals; ++i) {
      if (!submit_random()) return false;
    }
    return true;
  }
  double arrival_rate() const {
    return arrival_;
  }

  void finish(JobId id) {
    if (!on_all("job_finished", [&](Scheduler& s) { return s.job_finished(id, now_); })) {
      fail("job_finished(" + std::to_string(id) + ") refused: " + last_error_);
      return;
    }
    if (failure_) return;
    ModelJob& j = jobs_.at(id);
    if (j.state == ModelJob::State::Running) release_model(j);
    jobs_.erase(id);
  }

  void release_model(ModelJob& j) {
    for (const GpuSlot& g : j.placement) used_[g.node][g.gpu] -= g.milli;
    if (j.allocated) charge(j, -1);
  }

  // ---- one cycle and its invariants ----
  bool cycle() {
    ++cycle_;
    // Snapshot of what the caller can see, to prove plan_cycle leaves it alone.
    std::vector<std::pair<JobId, JobState>> before;
    std::optional<CycleResult> planned, lazy;
    if (opt_.plan_cycle) {
      for (const auto& [id, e] : main().jobs()) before.emplace_back(id, e.state);
      planned = plan_cycle(main(), now_);
      Scheduler copy = main();
      lazy = copy.cycle(now_, CycleOptions{/*explain_all=*/false});
      std::vector<std::pair<JobId, JobState>> after;
      for (const auto& [id, e] : main().jobs()) after.emplace_back(id, e.state);
      INV(before == after, "plan_cycle(copy) changed the caller's jobs");
      INV(main().pending_count() == count_pending(),
          "plan_cycle(copy) changed the caller's pending count");
    }
    std::vector<CycleResult> results;
    // On odd seeds the twin runs without explain_all: it must still decide exactly the same. On
    // even seeds it runs every job through every step (no shortcut once the pass has settled): it
    // must decide and explain exactly the same.
    const bool lazy_twin = seed_ % 2 == 1;
    for (std::size_t i = 0; i < scheds_.size(); ++i) {
      CycleOptions options;
      if (i > 0) {
        options.explain_all = !lazy_twin;
        options.shortcut_settled = lazy_twin;
      }
      results.push_back(scheds_[i].cycle(now_, options));
    }
    const CycleResult& r = results.front();
    for (std::size_t i = 1; i < results.size(); ++i) {
      const std::string d = diff_results(r, results[i], lazy_twin, /*search_stats=*/false);
      INV(d.empty(), "determinism: the same events gave different decisions"
                         << (lazy_twin ? " (twin without explain_all)"
                                       : " (twin without the settled shortcut)")
                         << ": " << d);
    }
    if (planned) {
      const std::string d = diff_results(*planned, r);
      INV(d.empty(), "determinism: plan_cycle(copy, now) and cycle(now) differ: " << d);
      const std::string l = diff_results(*lazy, r, /*decisions_only=*/true);
      INV(l.empty(), "a cycle without explain_all decided differently: " << l);
      INV(lazy->waiting.size() <= r.waiting.size(), "a lazy cycle explained more jobs");
    }
    return check_decisions(r) && check_state(r);
  }

  std::size_t count_pending() const {
    std::size_t n = 0;
    for (const auto& [id, j] : jobs_) n += j.state == ModelJob::State::Pending;
    return n;
  }

  const Node& node(NodeId n) {
    return main().nodes().at(n);
  }

  bool check_decisions(const CycleResult& r) {
    INV(r.now == now_, "result.now " << r.now << " != " << now_);
    // 1. Drain and node-down stops come first and are judged on the state before the cycle.
    std::set<JobId> stopped;
    for (const StopDecision& s : r.stops) {
      INV(jobs_.count(s.job), "stop of unknown job " << s.job);
      ModelJob& j = jobs_.at(s.job);
      INV(j.state == ModelJob::State::Running, "stop of job " << s.job << " that is not running");
      INV(stopped.insert(s.job).second, "job " << s.job << " stopped twice in one cycle");
      INV(s.requeue == j.spec.resumable, "stop of job " << s.job << ": requeue != resumable");
      if (s.reason == StopReason::Preempted) continue;
      cov_.drained += s.reason == StopReason::Drain;
      cov_.node_down += s.reason == StopReason::NodeDown;
      bool touches = false;
      for (const GpuSlot& g : j.placement) touches |= g.node == s.node;
      INV(touches, "stop of job " << s.job << " names node " << s.node << " it does not use");
      if (s.reason == StopReason::NodeDown) {
        INV(node(s.node).health == NodeHealth::Down,
            "job " << s.job << " stopped for node-down on a node that is not down");
      } else {
        INV(node(s.node).draining(),
            "job " << s.job << " drained from node " << s.node << " that is not draining");
        // Drain honours the contract: minimum runtime of the run, and the protected period.
        INV(now_ >= j.started + j.spec.min_runtime &&
                (!j.allocated || j.protected_until == kNever || now_ >= j.protected_until),
            "job " << s.job << " drained inside its minimum runtime (started " << j.started
                   << ", min " << j.spec.min_runtime << ", protected until " << j.protected_until
                   << ")");
      }
    }
    // 2. Class changes of running jobs.
    for (const ClassChange& c : r.class_changes) {
      INV(jobs_.count(c.job), "class change of unknown job " << c.job);
      ModelJob& j = jobs_.at(c.job);
      INV(j.state == ModelJob::State::Running &&
              !(stopped.count(c.job) && !was_preempted(r, c.job)),
          "class change of job " << c.job << " that is not running");
      INV(c.allocated != j.allocated, "class change of job " << c.job << " to its own class");
      if (c.allocated) {
        if (config_.funding == Funding::Lookback) {
          INV(j.spec.min_runtime > 0, "job " << c.job << " without a contract promoted");
        }
        INV(c.protected_until ==
                (config_.minimum_runtime_contract ? now_ + j.spec.min_runtime : kNever),
            "promotion of job " << c.job << " with protected_until " << c.protected_until);
        ++cov_.promoted;
        j.allocated = j.ever_allocated = true;
        j.protected_until = c.protected_until;
        charge(j, +1);
      } else {
        INV(now_ >= j.protected_until, "job " << c.job
                                              << " demoted inside its protected period (until "
                                              << j.protected_until << ")");
        ++cov_.demoted;
        j.allocated = false;
        j.protected_until = now_;
        charge(j, -1);
      }
    }
    // 3. Starts, indexed so that preemptions can be matched with their requesters.
    std::map<JobId, const StartDecision*> starts;
    for (const StartDecision& s : r.starts) {
      INV(starts.emplace(s.job, &s).second, "job " << s.job << " started twice in one cycle");
    }
    // 4. Preemptions. What each leaf runs once drains and failures are out (share claims, §8).
    std::set<JobId> drained;
    for (const StopDecision& s : r.stops) {
      if (s.reason != StopReason::Preempted) drained.insert(s.job);
    }
    std::map<std::pair<ClusterId, BudgetId>, Milli> held;
    for (const auto& [id, j] : jobs_) {
      if (j.state != ModelJob::State::Running || drained.count(id)) continue;
      for (const GpuSlot& g : j.placement) held[{j.cluster, j.spec.budget}] += g.milli;
    }
    for (const StopDecision& s : r.stops) {
      if (s.reason != StopReason::Preempted) continue;
      const ModelJob& v = jobs_.at(s.job);
      auto it = starts.find(s.for_job);
      INV(it != starts.end(), "job " << s.job << " preempted for job " << s.for_job
                                     << " that did not start in this cycle");
      const StartDecision& req = *it->second;
      // An unallocated start preempts only as a share claim: unallocated work of another leaf that
      // ran above its share of the cluster.
      if (!req.allocated) {
        INV(config_.share_claims && s.victim.cls == VictimClass::AboveShare && !v.allocated,
            "allocated-for-unallocated: job " << s.job << " (allocated=" << v.allocated
                                              << ") preempted for job " << s.for_job
                                              << " that starts unallocated");
        const BudgetId vb = v.spec.budget;
        INV(vb != jobs_.at(s.for_job).spec.budget,
            "share claim: job " << s.for_job << " took job " << s.job << " of its own budget");
        const double share = main().budgets().allocated_fraction(vb, v.cluster) *
                             static_cast<double>(main().capacity(v.cluster));
        const Milli ran = held[std::make_pair(v.cluster, vb)];
        INV(static_cast<double>(ran) > share,
            "share claim: job " << s.for_job << " took job " << s.job << " whose leaf ran " << ran
                                << " milli, within its share " << share);
      }
      INV(req.mode == StartMode::Preempting &&
              std::count(req.victims.begin(), req.victims.end(), s.job) == 1,
          "job " << s.job << " preempted for job " << s.for_job << " that does not list it");
      INV(req.cluster == v.cluster, "job " << s.job << " preempted for a job of another cluster");
      // The contract: an allocated job is never preempted inside its protected period.
      INV(!v.allocated || now_ >= v.protected_until,
          "protected job " << s.job << " preempted (protected until " << v.protected_until
                           << ", min runtime " << v.spec.min_runtime << ") for job " << s.for_job);
      if (v.allocated) {
        INV(s.victim.cls == VictimClass::OverAllocation,
            "allocated victim " << s.job << " reported as unallocated");
      }
      // No job preempted twice within one of its own minimum runtimes while allocated.
      if (v.ever_allocated && config_.minimum_runtime_contract) {
        INV(now_ - v.started >= v.spec.min_runtime,
            "job " << s.job << " allocated in this run preempted " << now_ - v.started
                   << " s after its start, inside its minimum runtime " << v.spec.min_runtime);
      }
      // No loops: a job preempted for X never preempts X back during X's protected period (nor in
      // the same cycle). "Never in the next cycle" holds exactly when X's minimum runtime spans the
      // gap to the next cycle; a contract shorter than the cycle interval promises no more.
      auto loop = no_preempt_.find({s.job, s.for_job});
      // The guard protects the run of X that began with the preemption, not a later run of X.
      if (loop != no_preempt_.end() && loop->second.run_started == v.started) {
        INV(now_ >= loop->second.until && cycle_ > loop->second.cycle,
            "preemption loop: job " << s.for_job << " preempts job " << s.job
                                    << " which preempted it at cycle " << loop->second.cycle
                                    << " (protected until " << loop->second.until << ")");
      }
      INV(s.victim.ran_for == now_ - v.started, "victim " << s.job << ": ran_for is wrong");
      ++cov_.preempted;
      cov_.preempted_allocated += v.allocated;
      cov_.claimed += !req.allocated;
    }
    for (const StartDecision& s : r.starts) {
      std::size_t listed = 0;
      for (const StopDecision& st : r.stops) {
        listed += st.reason == StopReason::Preempted && st.for_job == s.job;
      }
      INV(listed == s.victims.size(), "start of job " << s.job << " lists " << s.victims.size()
                                                      << " victims but " << listed
                                                      << " were preempted for it");
      INV((s.mode == StartMode::Preempting) == !s.victims.empty(),
          "start of job " << s.job << ": mode and victims disagree");
    }
    // 5. Carry the stops out: GPUs come back at once, the report follows after a grace period.
    for (const StopDecision& s : r.stops) {
      ModelJob& j = jobs_.at(s.job);
      release_model(j);
      j.state = ModelJob::State::Stopping;
      j.finish_at = kNever;
      j.stopped_at = now_ + rng_.pick(std::vector<Duration>{0, 0, 5, 30, 120});
      if (s.reason == StopReason::Preempted) {
        // s.job may not preempt s.for_job back while s.for_job is protected.
        const StartDecision& req = *starts.at(s.for_job);
        Guard& g = no_preempt_[{s.for_job, s.job}];
        g.until = req.protected_until;
        g.cycle = cycle_;
        g.run_started = now_;
      }
    }
    // 6. Starts: placement, shape, constraints, classes.
    for (const StartDecision& s : r.starts) {
      INV(jobs_.count(s.job), "start of unknown job " << s.job);
      ModelJob& j = jobs_.at(s.job);
      INV(j.state == ModelJob::State::Pending, "start of job " << s.job << " that is not pending");
      if (!check_placement(s, j)) return false;
      if (j.spec.min_runtime == 0 && config_.funding == Funding::Lookback) {
        INV(!s.allocated, "job " << s.job << " without a minimum runtime started allocated");
      }
      const Time want =
          s.allocated ? (config_.minimum_runtime_contract ? now_ + j.spec.min_runtime : kNever)
                      : now_;
      INV(s.protected_until == want, "start of job " << s.job << ": protected_until "
                                                     << s.protected_until << ", expected " << want);
      j.state = ModelJob::State::Running;
      j.cluster = s.cluster;
      j.placement = s.placement;
      j.started = now_;
      j.allocated = j.ever_allocated = s.allocated;
      j.protected_until = s.protected_until;
      j.finish_at = j.actual ? now_ + *j.actual : kNever;
      for (const GpuSlot& g : j.placement) used_[g.node][g.gpu] += g.milli;
      if (j.allocated) charge(j, +1);
      ++cov_.starts;
      cov_.gang_starts += j.spec.shape.gang();
      cov_.fractional_starts += j.spec.shape.fractional();
      cov_.backfilled += s.mode == StartMode::Backfilled;
      cov_.preempting += s.mode == StartMode::Preempting;
    }
    // 7. Reservations.
    std::set<NodeId> reserved;
    cov_.reservations += r.reservations.size();
    for (const Reservation& res : r.reservations) {
      // BUG (reported; see MultiCluster.HolderThatStartsElsewhereKeepsNoReservation): a job that
      // accepts several clusters reserves nodes in one cluster and starts in a later one in the
      // same cycle; the stale reservation is returned and held for the rest of the cycle. Checked
      // softly so that the scenario goes on to the other invariants; the test still fails.
      SOFT(jobs_.count(res.job) && jobs_.at(res.job).state == ModelJob::State::Pending,
           "reservation-holder-not-pending",
           "reservation on cluster "
               << res.cluster << " for job " << res.job << " that is not pending after the cycle ("
               << (starts.count(res.job) ? "it started in this cycle on cluster " +
                                               std::to_string(starts.at(res.job)->cluster)
                                         : std::string("gone"))
               << ", " << nclusters_ << " clusters, mode "
               << (starts.count(res.job) ? static_cast<int>(starts.at(res.job)->mode) : -1) << ")");
      for (NodeId n : res.nodes) {
        INV(n < node_cluster_.size() && node_cluster_[n] == res.cluster,
            "reservation for job " << res.job << " names node " << n << " of another cluster");
        INV(reserved.insert(n).second, "node " << n << " reserved twice in one cycle");
      }
    }
    // 8. Every pending job gets exactly one explanation; nobody else gets one.
    std::set<JobId> explained;
    for (const Explanation& e : r.waiting) {
      INV(explained.insert(e.job).second, "job " << e.job << " explained twice");
      ++cov_.explanations;
      ++cov_.codes[e.code];
      INV(jobs_.count(e.job) && jobs_.at(e.job).state == ModelJob::State::Pending,
          "explanation for job " << e.job << " that is not pending");
      const ModelJob& j = jobs_.at(e.job);
      INV(e.budget == j.spec.budget && e.needs_nodes == j.spec.shape.nodes &&
              e.needs_gpus_per_node == j.spec.shape.gpus_per_node,
          "explanation for job " << e.job << " describes another request");
      if (e.code == WaitCode::BlockedByReservation) {
        INV(e.reserved_for != kNoJob, "job " << e.job << " blocked by a reservation of nobody");
      }
    }
    for (const auto& [id, j] : jobs_) {
      INV(j.state != ModelJob::State::Pending || explained.count(id),
          "pending job " << id << " got no explanation");
    }
    return true;
  }

  bool was_preempted(const CycleResult& r, JobId id) {
    for (const StopDecision& s : r.stops) {
      if (s.job == id && s.reason == StopReason::Preempted) return true;
    }
    return false;
  }

  bool check_placement(const StartDecision& s, const ModelJob& j) {
    const Shape& shape = j.spec.shape;
    INV(s.cluster < static_cast<ClusterId>(nclusters_), "start in unknown cluster");
    if (!j.spec.clusters.empty()) {
      INV(std::count(j.spec.clusters.begin(), j.spec.clusters.end(), s.cluster) == 1,
          "job " << s.job << " started on cluster " << s.cluster << " it does not accept");
    }
    INV(static_cast<int>(s.placement.size()) == shape.total_gpus(),
        "gang all-or-nothing: job " << s.job << " got " << s.placement.size() << " GPU slots for "
                                    << shape.nodes << "x" << shape.gpus_per_node);
    std::map<NodeId, std::set<int>> per_node;
    for (const GpuSlot& g : s.placement) {
      INV(g.node < node_gpus_.size(), "job " << s.job << " placed on unknown node " << g.node);
      INV(g.gpu < node_gpus_[g.node], "job " << s.job << " placed on GPU " << g.gpu << " of node "
                                             << g.node << " which has only " << node_gpus_[g.node]);
      INV(node_cluster_[g.node] == s.cluster,
          "job " << s.job << " placed on node " << g.node << " of another cluster");
      INV(node(g.node).schedulable(), "job " << s.job << " started on node " << g.node
                                             << " that is not schedulable ("
                                             << to_string(node(g.node).health)
                                             << (node(g.node).cordoned ? ", cordoned" : "") << ")");
      INV(j.spec.models.empty() ||
              std::count(j.spec.models.begin(), j.spec.models.end(), node_model_[g.node]) > 0,
          "job " << s.job << " placed on a GPU model it does not accept");
      INV(g.milli == shape.gpu_milli,
          "job " << s.job << " got " << g.milli << " milli per GPU, asked " << shape.gpu_milli);
      INV(per_node[g.node].insert(g.gpu).second,
          "job " << s.job << " got GPU " << g.gpu << " of node " << g.node << " twice");
    }
    INV(static_cast<int>(per_node.size()) == shape.nodes,
        "gang all-or-nothing: job " << s.job << " spans " << per_node.size() << " nodes, asked "
                                    << shape.nodes);
    for (const auto& [n, gpus] : per_node) {
      INV(static_cast<int>(gpus.size()) == shape.gpus_per_node,
          "gang all-or-nothing: job " << s.job << " got " << gpus.size() << " GPUs on node " << n
                                      << ", asked " << shape.gpus_per_node);
    }
    return true;
  }

  bool check_state(const CycleResult&) {
    Scheduler& s = main();
    // No GPU capacity given twice, and the pool agrees with the decisions.
    for (NodeId n = 0; n < node_gpus_.size(); ++n) {
      for (int g = 0; g < node_gpus_[n]; ++g) {
        const Milli used = used_[n][g];
        INV(used >= 0 && used <= kWholeGpu,
            "GPU " << g << " of node " << n << " given twice: " << used << " milli in use");
        INV(s.pool().free_milli(n, g) == kWholeGpu - used,
            "pool free_milli of node " << n << " GPU " << g << " is " << s.pool().free_milli(n, g)
                                       << ", decisions leave " << kWholeGpu - used);
      }
    }
    // The core's view of every job matches the decisions.
    INV(s.jobs().size() == jobs_.size(),
        "the core holds " << s.jobs().size() << " jobs, the decisions " << jobs_.size());
    for (const auto& [id, m] : jobs_) {
      const JobEntry* e = s.job(id);
      INV(e, "job " << id << " unknown to the core");
      const JobState want = m.state == ModelJob::State::Pending   ? JobState::Pending
                            : m.state == ModelJob::State::Running ? JobState::Running
                                                                  : JobState::Stopping;
      INV(e->state == want,
          "job " << id << " is " << to_string(e->state) << ", decisions say " << to_string(want));
      if (m.state != ModelJob::State::Running) continue;
      INV(e->run.placement == m.placement && e->run.allocated == m.allocated &&
              e->run.protected_until == m.protected_until && e->run.cluster == m.cluster,
          "running job " << id << " differs from its decisions");
      // Drain: nothing runs on a down node, or on a draining node past its contract.
      for (const GpuSlot& g : m.placement) {
        const Node& nd = node(g.node);
        INV(nd.health != NodeHealth::Down, "job " << id << " still runs on down node " << g.node);
        if (nd.draining()) {
          const Time deadline =
              std::max(m.started + m.spec.min_runtime, m.allocated ? m.protected_until : Time{0});
          INV(now_ < deadline, "job " << id << " still runs on draining node " << g.node
                                      << " past its contract (deadline " << deadline << ")");
        }
      }
    }
    INV(s.pending_count() == count_pending(),
        "pending_count " << s.pending_count() << ", decisions leave " << count_pending());
    // Usage conservation: each budget node's usage is the sum of its children's and the integral
    // of its allocated running GPUs (within the lookback), tracked here independently.
    for (int c = 0; c < nclusters_; ++c) {
      for (BudgetId b = 0; b < parent_.size(); ++b) {
        const MilliGpuSeconds u = s.usage(static_cast<ClusterId>(c), b);
        INV(s.allocated_rate(static_cast<ClusterId>(c), b) == rate_[c][b],
            "allocated rate of budget " << b << " on cluster " << c << " is "
                                        << s.allocated_rate(static_cast<ClusterId>(c), b)
                                        << ", decisions give " << rate_[c][b]);
        const MilliGpuSeconds want = model_usage(c, b);
        INV(u == want, "usage of budget " << b << " on cluster " << c << " is " << u
                                          << " milli-GPU-s, the integral of its allocated jobs is "
                                          << want);
        if (!children_[b].empty()) {
          MilliGpuSeconds sum = 0;
          for (BudgetId k : children_[b]) sum += s.usage(static_cast<ClusterId>(c), k);
          INV(u == sum,
              "usage of budget " << b << " (" << u << ") != sum of its children (" << sum << ")");
        }
      }
    }
    return true;
  }
#undef INV
#undef SOFT

  struct Guard {
    Time until = 0;
    std::size_t cycle = 0;
    Time run_started = 0;  // the run of the protected job that the guard is about
  };

  std::uint64_t seed_;
  Options opt_;
  Rng rng_;
  PolicyConfig config_;
  std::vector<Scheduler> scheds_;
  std::optional<Failure> failure_;
  std::map<std::string, std::string> soft_;  // kind -> first occurrence
  std::string last_error_;
  Time now_ = 0;
  std::size_t cycle_ = 0;
  Coverage cov_;
  JobId next_id_ = 1;
  int nclusters_ = 1;
  double arrival_ = 1.0;  // mean submissions per step
  std::vector<GpuModelId> models_;
  std::vector<int> node_gpus_;
  std::vector<ClusterId> node_cluster_;
  std::vector<GpuModelId> node_model_;
  std::vector<std::vector<Milli>> used_;  // [node][gpu] milli in use by running jobs
  std::vector<BudgetId> parent_;
  std::vector<std::vector<BudgetId>> children_;
  std::vector<BudgetId> leaves_;
  std::vector<std::vector<Milli>> rate_;  // [cluster][budget] allocated milli running
  std::vector<std::vector<std::map<std::int64_t, MilliGpuSeconds>>> usage_;  // [c][b][bucket]
  std::map<JobId, ModelJob> jobs_;
  // (X, V) -> X may not be preempted for V before `until`, nor in the cycle after V's eviction.
  std::map<std::pair<JobId, JobId>, Guard> no_preempt_;
};

// ---------------------------------------------------------------------------------------------
// Random scenarios, sharded so that CTest can run the shards side by side.

class RandomScenarios : public ::testing::TestWithParam<int> {};

TEST_P(RandomScenarios, Invariants) {
  const int shard = GetParam();
  std::vector<std::uint64_t> seeds;
  if (auto s = only_seed()) {
    seeds.push_back(*s);
  } else {
    for (std::uint64_t seed = 1; seed <= scenario_count(); ++seed) {
      if (static_cast<int>(seed % kShards) == shard) seeds.push_back(seed);
    }
  }
  std::size_t failures = 0;
  Coverage cov;
  std::map<std::string, std::pair<std::string, std::size_t>> soft;  // kind -> (first, scenarios)
  for (std::uint64_t seed : seeds) {
    Sim sim(seed, Options{});
    if (auto f = sim.run()) {
      ADD_FAILURE() << f->text;
      if (++failures >= 5) break;  // enough to go on
    }
    for (const auto& [kind, text] : sim.soft_failures()) {
      auto [it, fresh] = soft.try_emplace(kind, text, 0);
      ++it->second.second;
    }
    cov.add(sim.coverage());
  }
  for (const auto& [kind, first] : soft) {
    ADD_FAILURE() << kind << " in " << first.second << " scenario(s); first: " << first.first;
  }
  std::printf("shard %d: %s\n", shard, cov.str().c_str());
}

INSTANTIATE_TEST_SUITE_P(Property, RandomScenarios, ::testing::Range(0, kShards));

// plan_cycle(copy, now) is the pure form of cycle(now): it must leave the caller's state alone and
// decide exactly what cycle(now) then decides.
TEST(PlanCycle, MatchesCycleAndLeavesStateAlone) {
  const std::uint64_t n = std::max<std::uint64_t>(10, scenario_count() / 40);
  int failures = 0;
  for (std::uint64_t seed = 100001; seed < 100001 + n; ++seed) {
    Sim sim(seed, Options{/*twin=*/false, /*plan_cycle=*/true});
    if (auto f = sim.run()) {
      ADD_FAILURE() << f->text;
      if (++failures >= 3) break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Minimal reproducers of what the random scenarios found, kept as tests of their own.

// plan_cycle(Scheduler state, now) copies the scheduler, but the copy's per-budget pending queues
// hold JobEntry* into the caller's job map, so the copy's cycle marks the caller's jobs Running.
TEST(Reproducer, PlanCycleOnACopyLeavesTheCallerAlone) {
  Scheduler s;
  const ClusterId c = s.add_cluster("c");
  NodeSpec n;
  n.name = "n0";
  n.cluster = c;
  n.gpus = 8;
  ASSERT_TRUE(s.add_node(n).ok());
  JobSpec j;
  j.id = 1;
  j.budget = s.budgets().ensure_path("/a").value();
  j.shape = Shape{1, 2, kWholeGpu};
  j.min_runtime = 60;
  ASSERT_TRUE(s.submit(j, 0).ok());
  const CycleResult planned = plan_cycle(s, 10);
  ASSERT_EQ(planned.starts.size(), 1u);
  EXPECT_EQ(s.job(1)->state, JobState::Pending) << "plan_cycle changed the caller's job";
  EXPECT_TRUE(s.job(1)->run.placement.empty()) << "plan_cycle changed the caller's job";
  EXPECT_EQ(s.pool().free_milli(0, 0), kWholeGpu);
  const CycleResult real = s.cycle(10);
  EXPECT_EQ(diff_results(planned, real), "");
}

// A job that accepts any cluster is blocked in cluster 0, gets nodes reserved there, and then
// starts in cluster 1 in the same cycle. The reservation is still returned and, for the rest of
// cluster 0's pass, keeps a job that could run there off the reserved node.
TEST(Reproducer, HolderThatStartsElsewhereKeepsNoReservation) {
  Scheduler s;
  const ClusterId c0 = s.add_cluster("c0");
  const ClusterId c1 = s.add_cluster("c1");
  for (ClusterId c : {c0, c1}) {
    NodeSpec n;
    n.name = "n" + std::to_string(c);
    n.cluster = c;
    n.gpus = 8;
    ASSERT_TRUE(s.add_node(n).ok());
  }
  const BudgetId a = s.budgets().ensure_path("/a").value();
  auto job = [&](JobId id, int gpus, std::vector<ClusterId> clusters, Time submit) {
    JobSpec j;
    j.id = id;
    j.budget = a;
    j.shape = Shape{1, gpus, kWholeGpu};
    j.min_runtime = kHour;
    j.clusters = std::move(clusters);
    j.submit_time = submit;
    return j;
  };
  // Job 1 holds half of cluster 0's node, protected for an hour.
  ASSERT_TRUE(s.submit(job(1, 4, {c0}, 0), 0).ok());
  ASSERT_EQ(s.cycle(0).starts.size(), 1u);
  // Job 2 wants a whole node anywhere; job 3 wants the other half of cluster 0's node.
  ASSERT_TRUE(s.submit(job(2, 8, {}, 1), 1).ok());
  ASSERT_TRUE(s.submit(job(3, 4, {c0}, 2), 2).ok());
  const CycleResult r = s.cycle(10);
  std::set<JobId> started;
  for (const StartDecision& d : r.starts) started.insert(d.job);
  ASSERT_TRUE(started.count(2)) << "job 2 should start on cluster 1";
  for (const Reservation& res : r.reservations) {
    EXPECT_FALSE(started.count(res.job)) << "reservation on cluster " << res.cluster << " for job "
                                         << res.job << " which started in the same cycle";
  }
  // Job 3 fits cluster 0 and is funded, but the stale reservation pushes it onto the reserved
  // node as evictable (unallocated) backfill instead of an allocated, protected start.
  bool job3_allocated = false;
  for (const StartDecision& d : r.starts) job3_allocated |= d.job == 3 && d.allocated;
  EXPECT_TRUE(job3_allocated)
      << "job 3 was kept off (or demoted to evictable backfill on) a node reserved for job 2, "
         "which started on cluster 1 in the same cycle";
}

// ---------------------------------------------------------------------------------------------
// The classic preemption loop (Kueue #3779): two budgets with equal shares, each with a job that
// needs the whole cluster. Whichever runs drives its own standing up and the other's relatively
// down, so a naive fair-share preemptor hands the cluster back and forth every cycle. allot's
// guarantee: a preempting job runs allocated and is protected for its minimum runtime, so over a
// time T there are at most T / min_runtime + 1 preemptions, and both sides still get served.

struct LoopCase {
  Duration min_runtime;
  Duration cycle_every;
  double margin;
  Duration lookback;
  int nodes;
};

void run_loop_case(const LoopCase& lc) {
  PolicyConfig cfg;
  cfg.preemption_margin = lc.margin;
  cfg.lookback = lc.lookback;
  cfg.usage_bucket = std::min<Duration>(kHour, lc.lookback / 4);
  Scheduler s(cfg);
  const ClusterId c = s.add_cluster("c");
  for (int n = 0; n < lc.nodes; ++n) {
    NodeSpec spec;
    spec.name = "n" + std::to_string(n);
    spec.cluster = c;
    spec.gpus = 8;
    spec.block = "b0";
    ASSERT_TRUE(s.add_node(spec).ok());
  }
  const BudgetId a = s.budgets().add(0, "a", 1.0).value();
  const BudgetId b = s.budgets().add(0, "b", 1.0).value();
  auto job = [&](JobId id, BudgetId budget) {
    JobSpec j;
    j.id = id;
    j.budget = budget;
    j.shape = Shape{lc.nodes, 8, kWholeGpu};
    j.min_runtime = lc.min_runtime;
    j.resumable = true;  // always comes back: both sides always want the whole cluster
    return j;
  };
  ASSERT_TRUE(s.submit(job(1, a), 0).ok());
  ASSERT_TRUE(s.submit(job(2, b), 0).ok());
  const Duration horizon = 30 * kDay;
  std::size_t preemptions = 0;
  std::map<JobId, Duration> ran;  // seconds each job held the cluster
  std::map<JobId, Time> since;
  std::vector<JobId> stopping;
  for (Time t = 0; t <= horizon; t += lc.cycle_every) {
    for (JobId id : stopping) ASSERT_TRUE(s.job_stopped(id, t).ok());
    stopping.clear();
    const CycleResult r = s.cycle(t);
    for (const StopDecision& st : r.stops) {
      ASSERT_EQ(st.reason, StopReason::Preempted);
      ++preemptions;
      ran[st.job] += t - since[st.job];
      stopping.push_back(st.job);
      // Never preempted inside its minimum runtime.
      ASSERT_GE(t - since[st.job], lc.min_runtime) << "job " << st.job << " preempted at " << t;
    }
    for (const StartDecision& st : r.starts) since[st.job] = t;
    // Bound: each preemption starts an allocated job protected for min_runtime, and the only
    // running job is that job until then.
    ASSERT_LE(preemptions, static_cast<std::size_t>(t / lc.min_runtime) + 1)
        << "preemption loop: " << preemptions << " preemptions in " << t << " s with min runtime "
        << lc.min_runtime << " (cycle every " << lc.cycle_every << " s, margin " << lc.margin
        << ")";
  }
  for (const auto& [id, t0] : since) {
    const JobEntry* e = s.job(id);
    if (e && e->state == JobState::Running) ran[id] += horizon - t0;
  }
  std::printf(
      "loop min=%llds every=%llds margin=%.2f lookback=%lldh: %zu preemptions in 30 days "
      "(bound %lld); job a ran %llds, job b ran %llds\n",
      static_cast<long long>(lc.min_runtime), static_cast<long long>(lc.cycle_every), lc.margin,
      static_cast<long long>(lc.lookback / kHour), preemptions,
      static_cast<long long>(horizon / lc.min_runtime + 1), static_cast<long long>(ran[1]),
      static_cast<long long>(ran[2]));
  // Both sides are served: neither is starved over 30 days.
  EXPECT_GT(ran[1], 0);
  EXPECT_GT(ran[2], 0);
}

TEST(PreemptionLoop, EqualSharesWholeClusterJobsAreBounded) {
  const std::vector<LoopCase> cases = {
      {kHour, 60, 0.0, 7 * kDay, 4},
      {kHour, 60, 0.1, 7 * kDay, 4},
      {10 * kMinute, 30, 0.0, kDay, 2},
      {8 * kHour, 300, 0.0, 7 * kDay, 16},
      {kHour, 5 * kMinute, 0.0, 6 * kHour, 1},
      {1, 60, 0.0, kDay, 4},
      {1, 60, 0.1, kDay, 4},
  };
  for (const LoopCase& lc : cases) {
    SCOPED_TRACE(testing::Message() << "min_runtime " << lc.min_runtime << " margin " << lc.margin);
    run_loop_case(lc);
  }
}

}  // namespace
}  // namespace allot::core
