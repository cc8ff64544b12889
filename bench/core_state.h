// The core benchmarks' seeded steady state (method: bench/core_bench.cpp's header comment), shared
// by core_bench and perf_probe so that the performance gate measures the benchmarks' own workload.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/scheduler.h"

// In the core's namespace so that its names read unqualified without a using-directive in a header.
namespace allot::core::bench {

constexpr Time kT0 = 8 * kDay;              // history covers [kT0 - 7 days, kT0)
constexpr Time kMeasure = kT0 + 2 * kHour;  // running contracts (1 h) have expired

struct Params {
  int nodes = 128;
  int pending = 10000;
  int running = 500;  // target; the state reports how many really run
  bool history = true;
};

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : g_(seed) {}
  int i(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g_); }
  double real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g_); }

 private:
  std::mt19937_64 g_;
};

struct State {
  std::unique_ptr<Scheduler> sched;
  std::size_t running = 0;
};

inline std::vector<BudgetId> build_tree(Scheduler& s, Rng& rng) {
  std::vector<BudgetId> leaves;
  for (int o = 0; o < 4; ++o) {
    const BudgetId org = s.budgets().add(0, "org" + std::to_string(o), rng.real(0.5, 4)).value();
    for (int p = 0; p < 10; ++p) {
      const BudgetId prog =
          s.budgets().add(org, "prog" + std::to_string(p), rng.real(0.5, 4)).value();
      for (int q = 0; q < 5; ++q) {
        leaves.push_back(
            s.budgets().add(prog, "proj" + std::to_string(q), rng.real(0.5, 4)).value());
      }
    }
  }
  return leaves;
}

inline Shape running_shape(Rng& rng) {
  // About 1.8 GPUs on average: 500 jobs fill ~90% of 1,024 GPUs.
  const int k = rng.i(0, 99);
  if (k < 50) return Shape{1, 1, kWholeGpu};
  if (k < 67) return Shape{1, 2, kWholeGpu};
  if (k < 75) return Shape{1, 4, kWholeGpu};
  if (k < 78) return Shape{1, 8, kWholeGpu};
  if (k < 98) return Shape{1, 1, 500};
  return Shape{2, 8, kWholeGpu};
}

inline Shape pending_shape(Rng& rng) {
  const int k = rng.i(0, 99);
  if (k < 35) return Shape{1, 1, kWholeGpu};
  if (k < 50) return Shape{1, 2, kWholeGpu};
  if (k < 60) return Shape{1, 4, kWholeGpu};
  if (k < 72) return Shape{1, 8, kWholeGpu};
  if (k < 82) return Shape{1, 1, rng.i(0, 1) ? 250 : 500};
  if (k < 96) return Shape{rng.i(2, 4), 8, kWholeGpu};
  return Shape{16, 8, kWholeGpu};
}

inline State build(const Params& p, std::uint64_t seed = 42) {
  Rng rng(seed);
  State st;
  st.sched = std::make_unique<Scheduler>();
  Scheduler& s = *st.sched;
  const ClusterId c = s.add_cluster("bench");
  const GpuModelId h100 = *s.catalog().find("H100");
  const GpuModelId h200 = *s.catalog().find("H200");
  for (int n = 0; n < p.nodes; ++n) {
    NodeSpec spec;
    spec.name = "node" + std::to_string(n);
    spec.cluster = c;
    spec.model = n % 4 == 3 ? h200 : h100;
    spec.gpus = 8;
    spec.block = "block" + std::to_string(n / 16);
    (void)s.add_node(std::move(spec));
  }
  const std::vector<BudgetId> leaves = build_tree(s, rng);
  s.advance(kT0);
  if (p.history) {
    // Seven days of past usage: each leaf used between 0 and ~2.5x its fair part of the cluster.
    const double fair = static_cast<double>(p.nodes) * 8 * kWholeGpu / leaves.size();
    for (BudgetId leaf : leaves) {
      const Milli rate = static_cast<Milli>(fair * rng.real(0.0, 2.5));
      s.record_usage(c, leaf, kT0 - 7 * kDay, kT0, rate);
    }
  }
  JobId id = 1;
  auto leaf = [&] { return leaves[static_cast<std::size_t>(rng.i(0, 199))]; };
  // The running cohort: submitted and started at kT0, until ~90% of the GPUs are asked for.
  const Milli capacity = static_cast<Milli>(p.nodes) * 8 * kWholeGpu;
  Milli asked = 0;
  for (int i = 0; i < p.running && asked < capacity * 92 / 100; ++i) {
    JobSpec j;
    j.id = id++;
    j.budget = leaf();
    j.shape = running_shape(rng);
    j.min_runtime = rng.i(0, 2) == 0 ? 0 : kHour;
    j.resumable = rng.i(0, 1) == 1;
    j.expected_duration =
        rng.i(0, 1) ? std::optional<Duration>(rng.i(3, 48) * kHour) : std::nullopt;
    j.submit_time = kT0;
    asked += j.shape.total_milli();
    (void)s.submit(std::move(j), kT0);
  }
  const CycleResult first = s.cycle(kT0);
  st.running = first.starts.size();
  // Anything of the cohort that did not fit is dropped, so that the pending set is as specified.
  for (const Explanation& e : first.waiting) (void)s.job_finished(e.job, kT0);
  // The pending queue, submitted over the two hours before the measured cycle.
  for (int i = 0; i < p.pending; ++i) {
    JobSpec j;
    j.id = id++;
    j.budget = leaf();
    j.shape = pending_shape(rng);
    const int kind = rng.i(0, 99);
    if (kind < 3 && j.shape.total_gpus() <= 4) {
      j.kind = JobKind::Debug;
      j.min_runtime = 10 * kMinute;
    } else {
      j.min_runtime = rng.i(0, 3) == 0 ? 0 : rng.i(1, 8) * kHour;
    }
    if (rng.i(0, 9) == 0) j.models = {h200};
    j.priority = static_cast<Priority>(rng.i(0, 3));
    j.resumable = rng.i(0, 1) == 1;
    if (rng.i(0, 1)) j.expected_duration = rng.i(1, 24) * kHour;
    const Time at = kT0 + 1 + static_cast<Time>(i) * (2 * kHour - 2) / std::max(1, p.pending);
    j.submit_time = at;
    (void)s.submit(std::move(j), at);
  }
  return st;
}

// Cycles without explain_all, one second apart from `t`, until one starts nothing (the state an
// event-driven loop keeps); returns the time of the last.
inline Time settle(Scheduler& s, Time t) {
  while (!s.cycle(t, CycleOptions{/*explain_all=*/false}).starts.empty()) t += 1;
  return t;
}

// Up to n running jobs, in id order: the ones whose ends make an event benchmark's events.
inline std::vector<JobId> running_jobs(const Scheduler& s, std::size_t n) {
  std::vector<JobId> out;
  for (const auto& [id, j] : s.jobs()) {
    if (out.size() == n) break;
    if (j.state == JobState::Running) out.push_back(id);
  }
  return out;
}

// The events of an event benchmark: each of `ending` ends one minute after the last event (from
// t), followed by the cycle it triggers (explain_all = false). Returns the jobs started.
inline std::size_t end_one_by_one(Scheduler& s, Time t, const std::vector<JobId>& ending) {
  std::size_t starts = 0;
  for (JobId id : ending) {
    t += kMinute;
    (void)s.job_finished(id, t);
    starts += s.cycle(t, CycleOptions{/*explain_all=*/false}).starts.size();
  }
  return starts;
}

}  // namespace allot::core::bench
