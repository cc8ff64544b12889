// One experiment: read the cluster, budgets and workload once, fill in what traces lack, scale the
// load, then run each policy on the same scenario (in parallel, one thread per policy).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "sim/diagnostics.h"
#include "sim/lab_workload.h"
#include "sim/load_scaling.h"
#include "sim/simulation.h"
#include "sim/trace_assignment.h"

namespace allot::sim {

struct ExperimentSpec {
  std::string cluster_path;  // YAML; for openb, empty = the trace's own node list
  std::string budgets_path;  // YAML; empty = leaves in proportion to their demand
  // A sweep over budget files: each file makes its own scenario (Inputs::budget_variants).
  std::vector<std::string> budget_variants;
  std::string workload_path;
  // Inference services beside the workload (docs/simulator.md); empty: none.
  std::string services_path;
  // The lab workload model instead of a file (`--workload lab`): it brings its own cluster (unless
  // cluster_path is given) and budget tree; `load` is then the model's, not a rescaling.
  std::optional<LabWorkloadModel> lab;
  std::string workload_format;   // "", "native", "philly", "openb"
  std::string openb_nodes_path;  // empty = openb_node_list_gpu_node.csv next to the pod list
  std::vector<std::string> policies = {"fairshare", "fifo", "priority", "fairtree"};
  std::uint64_t seed = 1;
  double load = 0;        // target demand / supply ratio; 0 = leave arrival times alone
  std::size_t limit = 0;  // only the first N jobs (by submit time); 0 = all
  bool strict = false;    // the first bad record fails the run
  AssignmentModel assignment;
  SimOptions sim;        // policy fields are set per policy from the presets
  unsigned threads = 0;  // 0 = one per policy, at most the hardware's cores
};

// The same workload and cluster under another budget file (a sweep's budgets axis).
struct BudgetVariant {
  std::string path;
  Scenario scenario;
  std::size_t skipped = 0;  // jobs left out: a budget this file does not have
};

struct Inputs {
  Scenario scenario;
  std::vector<BudgetVariant> budget_variants;  // one per ExperimentSpec::budget_variants
  Diagnostics diag;
  std::size_t jobs_read = 0;
  LoadInfo load_before, load_after;
  double arrival_factor = 1;
  std::string workload_format;
  // Where the figures come from: "open loop, load 2.50x, 30 days" for the lab model; empty for a
  // trace or file (its load is in load_after).
  std::string regime;
};

core::Result<Inputs> prepare_inputs(const ExperimentSpec& spec);

// Runs `configs` on the scenario with up to `threads` threads; results come back in the order of
// `configs`, whatever order they finish in.
std::vector<RunResult> run_all(const Scenario& scenario, const std::vector<SimOptions>& configs,
                               unsigned threads);

// The SimOptions of each named policy of the spec (with the spec's seed, faults and costs).
core::Result<std::vector<SimOptions>> policy_runs(const ExperimentSpec& spec);

}  // namespace allot::sim
