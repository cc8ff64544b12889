// Benchmarks of the scheduling core (issue 2). Figures are recorded in docs/benchmarks.md.
//
//   build/bench/core_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Method. "A full cycle" is measured on a steady state that makes the cycle do all its work:
//   * one cluster of N nodes x 8 GPUs (3/4 H100, 1/4 H200), topology blocks of 16 nodes;
//   * a 3-level budget tree, 4 organisations x 10 programs x 5 projects = 200 leaf budgets with
//     random shares, and 7 days of usage history recorded for every leaf (random rates), so that
//     some branches stand under their allocation (funded) and some over it (not funded);
//   * running jobs (500 on 1,024 GPUs, scaled with the cluster) of mixed shapes (1-8 GPUs, gangs,
//     fractions) filling about 90% of the GPUs (1.8 GPUs a job on average), started two hours
//     before the measured cycle: about a third without a minimum runtime (unallocated, preemptible
//     by any funded request) and the rest with a one-hour contract that has expired (preemptible by
//     better-standing branches, or demoted if their budget is over allocation);
//   * pending jobs of mixed shapes (1-8 GPUs, fractions, 2-4 and 16 node gangs, some pinned to a
//     GPU model, debug jobs), priorities, minimum runtimes and expected durations, spread over the
//     200 leaves.
// The measured cycle ranks every pending job through the tree, places what fits on the ~10% free
// GPUs, preempts for funded heads, plans reservations for blocked large gangs, backfills behind
// them and writes an explanation for every job left waiting.
//
// A cycle changes its state (jobs start, victims stop), so each iteration measures cycle() on a
// fresh copy of the same state. The state is rebuilt from the same seed by replaying the same
// events while the timer is paused (PauseTiming/ResumeTiming); only cycle() is timed. (Copying a
// Scheduler object is not used: a copy shares the pending queues' job pointers with its source, a
// bug reported with the property tests.) Counters: starts, stops, waiting and considered are per
// cycle; the rebuild is deterministic, so every iteration times the same work.
//
// "Decisions per second" fills an empty 1,024-GPU cluster from a 10,000-job queue: cycles run
// until a cycle starts nothing more; the rate counts start decisions (starts/s) and, separately,
// every decision including the explanation of each job left waiting (decisions/s).
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <string>

#include "core_state.h"

namespace {

using namespace allot::core;         // NOLINT(google-build-using-namespace)
using namespace allot::core::bench;  // NOLINT(google-build-using-namespace)

// glibc defers merging small chunks freed while the state was torn down and rebuilt until the
// next large allocation (the cycle's explanation vector), which would bill that untimed work to
// the measured cycle (about a quarter of its instructions). Merge them now, untimed.
void settle_heap() {
  malloc_trim(0);
}

void report(benchmark::State& bs, const CycleResult& r, const State& st) {
  bs.counters["running_before"] = static_cast<double>(st.running);
  bs.counters["starts"] = static_cast<double>(r.starts.size());
  bs.counters["stops"] = static_cast<double>(r.stops.size());
  bs.counters["class_changes"] = static_cast<double>(r.class_changes.size());
  bs.counters["reservations"] = static_cast<double>(r.reservations.size());
  bs.counters["waiting"] = static_cast<double>(r.waiting.size());
  bs.counters["searches"] = static_cast<double>(r.stats.placement_searches);
  bs.counters["preempt_tries"] = static_cast<double>(r.stats.preemption_attempts);
}

// A full cycle on a steady state (see the method above). Args: nodes, pending jobs, running jobs.
void BM_FullCycle(benchmark::State& bs) {
  const Params p{static_cast<int>(bs.range(0)), static_cast<int>(bs.range(1)),
                 static_cast<int>(bs.range(2)), true};
  State st;
  CycleResult r;
  for (auto _ : bs) {
    bs.PauseTiming();
    r = CycleResult{};
    st = State{};  // the previous state is destroyed here, untimed
    st = build(p);
    settle_heap();
    bs.ResumeTiming();
    r = st.sched->cycle(kMeasure);
    benchmark::DoNotOptimize(r);
  }
  report(bs, r, st);
  bs.counters["gpus"] = static_cast<double>(p.nodes) * 8;
}

// Issue 2 targets: <= 2 ms median at 1,024 GPUs / 10,000 pending; <= 50 ms at 16,384 / 100,000.
BENCHMARK(BM_FullCycle)
    ->Name("FullCycle/1024gpus_10k_pending_500_running")
    ->Args({128, 10000, 500})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);
BENCHMARK(BM_FullCycle)
    ->Name("FullCycle/16384gpus_100k_pending_8000_running")
    ->Args({2048, 100000, 8000})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(4);

// Growth: pending jobs x nodes; running jobs scale with the cluster (500 per 128 nodes).
void BM_Growth(benchmark::State& bs) {
  BM_FullCycle(bs);
}
BENCHMARK(BM_Growth)
    ->ArgNames({"nodes", "pending", "running"})
    ->Args({128, 1000, 500})
    ->Args({128, 10000, 500})
    ->Args({128, 100000, 500})
    ->Args({2048, 1000, 8000})
    ->Args({2048, 10000, 8000})
    ->Args({2048, 100000, 8000})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(4);

// Time per event as the backlog grows (issue 11): what the simulator and the server's event loop
// pay. On the steady state above, settled first (untimed: cycles without explain_all until one
// starts nothing), 20 events are timed, each a running job ending one minute after the last and
// the cycle it triggers (explain_all = false). Args: nodes, pending jobs, running jobs. The time
// per event is the benchmark's time divided by 20 (the per_event counter).
void BM_EventCycle(benchmark::State& bs) {
  constexpr int kEvents = 20;
  const Params p{static_cast<int>(bs.range(0)), static_cast<int>(bs.range(1)),
                 static_cast<int>(bs.range(2)), true};
  State st;
  std::size_t starts = 0;
  for (auto _ : bs) {
    bs.PauseTiming();
    st = State{};
    st = build(p);
    const Time t = settle(*st.sched, kMeasure);
    const std::vector<JobId> ending = running_jobs(*st.sched, kEvents);
    settle_heap();
    bs.ResumeTiming();
    starts += end_one_by_one(*st.sched, t, ending);
  }
  bs.counters["pending"] = static_cast<double>(p.pending);
  bs.counters["starts_per_event"] =
      benchmark::Counter(static_cast<double>(starts) / kEvents, benchmark::Counter::kAvgIterations);
  bs.counters["per_event"] = benchmark::Counter(
      kEvents, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_EventCycle)
    ->Name("EventCycle")
    ->ArgNames({"nodes", "pending", "running"})
    ->Args({128, 1000, 500})
    ->Args({128, 10000, 500})
    ->Args({128, 100000, 500})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

// Decisions per second while filling an empty 1,024-GPU cluster from a 10,000-job queue.
// Arg 1: every cycle explains every waiting job (what `allot why` needs); arg 0: cycles stop
// walking the queue once nothing more can start (CycleOptions{explain_all = false}), the mode an
// event-driven loop or the simulator runs; the decisions are the same.
void BM_FillEmptyCluster(benchmark::State& bs) {
  const Params p{128, 10000, 0, false};
  const CycleOptions options{bs.range(0) != 0};
  State st;
  std::size_t starts = 0, decisions = 0, cycles = 0;
  for (auto _ : bs) {
    bs.PauseTiming();
    st = build(p);
    settle_heap();
    bs.ResumeTiming();
    for (Time t = kMeasure;; t += 1) {
      const CycleResult r = st.sched->cycle(t, options);
      starts += r.starts.size();
      decisions += r.starts.size() + r.stops.size() + r.waiting.size() + r.reservations.size();
      ++cycles;
      if (r.starts.empty()) break;
    }
  }
  bs.counters["starts/s"] =
      benchmark::Counter(static_cast<double>(starts), benchmark::Counter::kIsRate);
  bs.counters["decisions/s"] =
      benchmark::Counter(static_cast<double>(decisions), benchmark::Counter::kIsRate);
  bs.counters["starts_per_fill"] =
      benchmark::Counter(static_cast<double>(starts), benchmark::Counter::kAvgIterations);
  bs.counters["cycles_per_fill"] =
      benchmark::Counter(static_cast<double>(cycles), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_FillEmptyCluster)
    ->Name("FillEmpty/1024gpus_10k_queue")
    ->ArgName("explain_all")
    ->Arg(1)
    ->Arg(0)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);

}  // namespace

BENCHMARK_MAIN();
