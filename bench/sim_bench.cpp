// Simulator speed. BM_PhillyFairshare: the Philly trace's first N jobs (10k, 40k, all 82k) with
// fairshare, preemption and node faults on the 152-GPU cluster at 2.5x overload; reports simulated
// events per second and the share of time spent in the core's cycle. Needs
// traces/philly.csv (ALLOT_TRACES_DIR overrides); skips itself when the trace is absent.
// BM_LabDay: one day of the lab workload model at 2.5x under each policy (below).
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

// The lab workload model (src/sim/lab_workload.h) at the design's scale: a fixed slice of one
// simulated day of arrivals at 2.5x on 1,024 H100 GPUs, open loop and closed loop, under each
// policy, so that the core's cost on the workload it exists for can be tracked. Arg 0: policy
// index (fairshare, fifo, priority, fairtree); arg 1: closed loop.
void BM_LabDay(benchmark::State& state) {
  static const char* const kPolicies[] = {"fairshare", "fifo", "priority", "fairtree"};
  ExperimentSpec spec;
  LabWorkloadModel m;
  m.days = 1;
  m.load = 2.5;
  m.closed_loop = state.range(1) != 0;
  spec.lab = m;
  spec.load = m.load;
  spec.policies = {kPolicies[state.range(0)]};
  spec.sim.until = m.days * allot::core::kDay;
  auto in = prepare_inputs(spec);
  if (!in.ok()) {
    state.SkipWithError(in.error().message().c_str());
    return;
  }
  auto runs = policy_runs(spec);
  RunResult last;
  for (auto _ : state) last = simulate(in.value().scenario, runs.value().front());
  state.SetLabel(std::string(kPolicies[state.range(0)]) + (m.closed_loop ? " closed" : " open"));
  state.counters["jobs"] = static_cast<double>(last.jobs);
  state.counters["events"] = static_cast<double>(last.events_processed);
  state.counters["cycles"] = static_cast<double>(last.cycles);
  state.counters["core_share"] = last.wall_seconds > 0 ? last.core_seconds / last.wall_seconds : 0;
  state.counters["cpu_s"] = last.cpu_seconds;
}
BENCHMARK(BM_LabDay)->ArgsProduct({{0, 1, 2, 3}, {0, 1}})->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace

BENCHMARK_MAIN();
