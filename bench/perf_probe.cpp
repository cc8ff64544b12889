// The performance gate's workloads (scripts/perf-gate): each runs one fixed piece of work once,
// with callgrind's instrumentation switched on only around the measured part, so that the count of
// instructions executed is the same from run to run whatever else the machine is doing.
//
//   valgrind --tool=callgrind --instr-atstart=no build/bench/perf_probe PROBE
//
// Outside valgrind the client requests are no-ops and the probe just runs (useful to check that a
// probe works, and for `perf_probe --list`). Probes:
//   cycle/1024gpus_10k_pending  one full cycle of core_bench's FullCycle/1024gpus_10k_pending state
//                               (every waiting job explained); the state build is not measured
//   fill/1024gpus_10k_queue     core_bench's FillEmpty (explain_all = 0): cycles on an empty
//                               1,024-GPU cluster with 10,000 queued jobs until one starts nothing
//   events/1024gpus_30k_pending_x20  core_bench's EventCycle state with 30,000 pending: 20 job
//                               ends, each with its cycle (explain_all = 0); the settling is not
//                               measured
//   submit_body/small_x1000     request_bench's small body (bench/submit.lua's), parsed and
//                               validated 1,000 times
//   submit_body/full_x1000      request_bench's full training-job body, 1,000 times
//   sim/philly_2000_fairshare   the simulator on the Philly trace's first 2,000 jobs (fairshare,
//                               node faults, 2.5x load, examples/philly-2.5x.yaml), as sim_bench;
//                               reading the trace is not measured. Exits 3 when the trace is
//                               absent (ALLOT_TRACES_DIR overrides its folder).
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else  // valgrind not installed (scripts/install-deps installs it): the probes still run
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core_state.h"
#include "server/job_spec.h"
#include "sim/experiment.h"

namespace {

using allot::core::bench::build;
using allot::core::bench::kMeasure;
using allot::core::bench::Params;

// What the probe did, printed so that a changed workload (not only a slower one) shows.
using Probe = std::function<std::string()>;

// Starts and stops the measured part. Instrumentation (not only collection) is switched, so the
// unmeasured setup runs at valgrind's uninstrumented speed.
struct Measured {
  Measured() { CALLGRIND_START_INSTRUMENTATION; }
  ~Measured() { CALLGRIND_STOP_INSTRUMENTATION; }
  Measured(const Measured&) = delete;
  Measured& operator=(const Measured&) = delete;
};

std::string full_cycle() {
  auto st = build(Params{128, 10000, 500, true});
  allot::core::CycleResult r;
  {
    Measured m;
    r = st.sched->cycle(kMeasure);
  }
  return "starts=" + std::to_string(r.starts.size()) + " stops=" + std::to_string(r.stops.size()) +
         " waiting=" + std::to_string(r.waiting.size());
}

std::string fill_empty() {
  auto st = build(Params{128, 10000, 0, false});
  const allot::core::CycleOptions options{false};
  std::size_t starts = 0, cycles = 0;
  {
    Measured m;
    for (allot::core::Time t = kMeasure;; t += 1) {
      const allot::core::CycleResult r = st.sched->cycle(t, options);
      starts += r.starts.size();
      ++cycles;
      if (r.starts.empty()) break;
    }
  }
  return "starts=" + std::to_string(starts) + " cycles=" + std::to_string(cycles);
}

// core_bench's EventCycle at 30,000 pending (the backlog of a 30-day lab run at 2.5x): 20 job
// ends, each with the cycle it triggers, on a settled state. Guards the cost per event against
// growing with the backlog again.
std::string event_cycles() {
  auto st = build(Params{128, 30000, 500, true});
  const allot::core::Time t = allot::core::bench::settle(*st.sched, kMeasure);
  const auto ending = allot::core::bench::running_jobs(*st.sched, 20);
  std::size_t starts = 0;
  {
    Measured m;
    starts = allot::core::bench::end_one_by_one(*st.sched, t, ending);
  }
  return "events=" + std::to_string(ending.size()) + " starts=" + std::to_string(starts);
}

// The bodies of bench/request_bench.cpp (keep them the same).
const std::string kSmallBody =
    R"({"idempotency_key":"wrk-1700000000-1-12345","budget":"/lab/t3","gpus_per_node":1,)"
    R"("expected_duration":3600})";
const std::string kFullBody =
    R"({"idempotency_key":"cli-7f3a9c2e","name":"llama-70b-sft","budget":"/lab/t3","nodes":4,)"
    R"("gpus_per_node":8,"models":["H100","H200"],"min_runtime":14400,"resumable":true,)"
    R"("priority":"high","kind":"batch","expected_duration":172800,)"
    R"("command":["torchrun","--nproc-per-node=8","train.py","--config","configs/70b.yaml"],)"
    R"("env":{"WANDB_PROJECT":"sft","NCCL_DEBUG":"WARN"},"workdir":"/home/alice/sft",)"
    R"("memory_mib":1048576,"cpus":96,"container":"nvcr.io/nvidia/pytorch:24.05-py3"})";

std::string submit_body(const std::string& body) {
  const allot::core::GpuCatalog catalog = allot::core::GpuCatalog::standard();
  const std::map<std::string, allot::core::ClusterId> clusters{{"default", 0}};
  allot::core::BudgetTree budgets;
  const allot::core::PolicyConfig policy;
  const auto lab = budgets.add(budgets.root(), "lab", 1).value();
  for (int i = 0; i < 10; ++i) (void)budgets.add(lab, "t" + std::to_string(i), 1);
  int accepted = 0;
  {
    Measured m;
    for (int i = 0; i < 1000; ++i) {
      const auto b = nlohmann::json::parse(body, nullptr, false);
      const auto r = allot::server::parse_job_request(b, catalog, clusters, budgets, policy);
      accepted += r.ok() ? 1 : 0;
    }
  }
  return "accepted=" + std::to_string(accepted);
}

constexpr int kTraceAbsent = 3;

std::string sim_philly() {
  const char* env = std::getenv("ALLOT_TRACES_DIR");
  const std::string path = std::string(env ? env : ALLOT_TRACES_DIR) + "/philly.csv";
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "perf_probe: %s not found (set ALLOT_TRACES_DIR)\n", path.c_str());
    std::exit(kTraceAbsent);
  }
  allot::sim::ExperimentSpec spec;
  spec.workload_path = path;
  spec.cluster_path = std::string(ALLOT_EXAMPLES_DIR) + "/philly-2.5x.yaml";
  spec.limit = 2000;
  spec.load = 2.5;
  spec.policies = {"fairshare"};
  spec.sim.faults.enabled = true;
  auto in = allot::sim::prepare_inputs(spec);
  auto runs = allot::sim::policy_runs(spec);
  if (!in.ok() || !runs.ok()) {
    std::fprintf(stderr, "perf_probe: %s\n",
                 (in.ok() ? runs.error() : in.error()).message().c_str());
    std::exit(1);
  }
  allot::sim::RunResult r;
  {
    Measured m;
    r = allot::sim::simulate(in.value().scenario, runs.value().front());
  }
  return "events=" + std::to_string(r.events_processed) + " cycles=" + std::to_string(r.cycles);
}

const std::vector<std::pair<std::string, Probe>>& probes() {
  static const std::vector<std::pair<std::string, Probe>> all = {
      {"cycle/1024gpus_10k_pending", full_cycle},
      {"fill/1024gpus_10k_queue", fill_empty},
      {"events/1024gpus_30k_pending_x20", event_cycles},
      {"submit_body/small_x1000", [] { return submit_body(kSmallBody); }},
      {"submit_body/full_x1000", [] { return submit_body(kFullBody); }},
      {"sim/philly_2000_fairshare", sim_philly},
  };
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: perf_probe PROBE | --list\n");
    return 2;
  }
  const std::string want = argv[1];
  for (const auto& [name, run] : probes()) {
    if (want == "--list") {
      std::printf("%s\n", name.c_str());
    } else if (want == name) {
      std::printf("%s: %s\n", name.c_str(), run().c_str());
      return 0;
    }
  }
  if (want == "--list") return 0;
  std::fprintf(stderr, "perf_probe: unknown probe '%s' (perf_probe --list names them)\n",
               want.c_str());
  return 2;
}
