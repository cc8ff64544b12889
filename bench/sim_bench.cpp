// Simulator speed: the Philly trace's first N jobs (10k, 40k, all 82k) with fairshare, preemption
// and node faults on the 152-GPU cluster at 2.5x overload. Reports simulated events per second
// and the share of time spent in the core's cycle. Needs ../shared/traces/philly.csv
// (ALLOT_TRACES_DIR overrides); skips itself when the trace is absent.
#include <benchmark/benchmark.h>

#include <filesystem>

#include "sim/experiment.h"

namespace {

using namespace allot::sim;

void BM_PhillyFairshare(benchmark::State& state) {
  const char* env = std::getenv("ALLOT_TRACES_DIR");
  const std::string path = std::string(env ? env : ALLOT_TRACES_DIR) + "/philly.csv";
  if (!std::filesystem::exists(path)) {
    state.SkipWithError("philly.csv not found (set ALLOT_TRACES_DIR)");
    return;
  }
  ExperimentSpec spec;
  spec.workload_path = path;
  spec.cluster_path = std::string(ALLOT_EXAMPLES_DIR) + "/philly-2.5x.yaml";
  spec.limit = static_cast<std::size_t>(state.range(0));
  spec.load = 2.5;
  spec.policies = {"fairshare"};
  spec.sim.faults.enabled = true;
  auto in = prepare_inputs(spec);
  if (!in.ok()) {
    state.SkipWithError(in.error().message().c_str());
    return;
  }
  auto runs = policy_runs(spec);
  RunResult last;
  for (auto _ : state) last = simulate(in.value().scenario, runs.value().front());
  state.counters["jobs"] = static_cast<double>(in.value().scenario.jobs.size());
  state.counters["events"] = static_cast<double>(last.events_processed);
  state.counters["cycles"] = static_cast<double>(last.cycles);
  state.counters["events_per_s"] = benchmark::Counter(
      static_cast<double>(last.events_processed) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["core_share"] = last.wall_seconds > 0 ? last.core_seconds / last.wall_seconds : 0;
}
BENCHMARK(BM_PhillyFairshare)
    ->Arg(10000)
    ->Arg(40000)
    ->Arg(82247)
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
