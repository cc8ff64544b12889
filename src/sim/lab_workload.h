// A seeded workload model of the setting the lab design describes (docs/simulator.md, "The lab
// workload model"): 1,024 H100 GPUs in 8-GPU nodes, 15 teams in 4 programs with shares of 2% to
// 18.5%, team demand from 0.3x to 4x of share scaled to an overall load, and an AI lab's job kinds
// (debug, interactive, batch, large gangs, preemptible sweeps) arriving with a daily rhythm.
//
// Two regimes:
// - open loop: every job is drawn up front; the GPU-time submitted over `days` is `load` x the
//   cluster's GPU-time, split among teams by share x demand factor and among kinds by `mix`;
// - closed loop: arrivals follow users. Each user keeps `outstanding_per_user` jobs outstanding
//   and submits the next one a think time after one ends; the number of users is set so that the
//   GPUs requested by all outstanding jobs are `load` x the cluster's GPUs. "Demand 2.5x supply"
//   then means outstanding requests, not a queue that grows for as long as jobs arrive.
//
// The same model and seed give the same jobs byte for byte: every (team, kind) stream, and in the
// closed loop every user, draws from its own random stream (rng.h's mix_seed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "sim/budget_config.h"
#include "sim/cluster_config.h"
#include "sim/simulation.h"
#include "sim/workload.h"

namespace allot::sim {

// The kinds of work the model draws, in this order everywhere (mix, streams, reports).
enum class LabKind : std::uint8_t { Debug, Interactive, Batch, LargeGang, Sweep };
inline constexpr int kLabKinds = 5;
const char* to_string(LabKind k);

struct LabTeam {
  std::string program;  // budget path /<program>/<team>
  std::string name;
  double share = 0;          // of the cluster, in percent (all teams sum to 100)
  double demand_factor = 1;  // demand relative to share, before scaling to `load`
  double gang_fraction = 0;  // of the team's GPU-time that is large gangs
};

// How one kind's jobs are drawn. Durations and minimum runtimes are log-uniform in [lo, hi].
struct LabKindModel {
  core::JobKind kind = core::JobKind::Batch;
  std::vector<int> gpu_sizes;       // GPUs per job, drawn with `gpu_weights`
  std::vector<double> gpu_weights;  // same length as gpu_sizes
  core::Duration duration_lo = 0;   // seconds of work
  core::Duration duration_hi = 0;
  core::Duration min_runtime_lo = 0;  // the contract; 0 and 0 = unallocated (preemptible)
  core::Duration min_runtime_hi = 0;
  double resumable = 0;      // probability
  double high_priority = 0;  // probability of "high" (else normal, or low for sweeps)
  double low_priority = 0;   // probability of "low"
  double utilization = 1;    // mean used / assigned
};

struct LabWorkloadModel {
  std::uint64_t seed = 1;
  int days = 30;      // length of the arrival period
  double load = 1.0;  // overall demand / capacity (see the regimes above)
  bool closed_loop = false;

  // The cluster: `nodes` x `gpus_per_node` GPUs of `gpu_model` (128 x 8 = 1,024 H100).
  int nodes = 128;
  int gpus_per_node = 8;
  int nodes_per_block = 16;
  std::string gpu_model = "H100";

  // 15 teams in 4 programs; shares 2% .. 18.5% (sum 100); demand factors 0.3x .. 4x.
  std::vector<LabTeam> teams = default_teams();
  // The kinds, indexed by LabKind.
  std::vector<LabKindModel> kinds = default_kinds();
  // Of a team's GPU-time that is not large gangs, the fraction of each kind (debug, interactive,
  // batch, sweep; the LargeGang entry is ignored: gangs take the team's gang_fraction).
  std::vector<double> mix = {0.02, 0.10, 0.53, 0.0, 0.35};

  // Daily rhythm: the arrival rate at hour h is proportional to
  //   (1 + diurnal_amplitude x cos(2 pi (h - peak_hour) / 24)) x (weekend_factor on Sat/Sun),
  // day 0 being a Monday.
  double diurnal_amplitude = 0.6;
  double peak_hour = 14;
  double weekend_factor = 0.5;

  // Closed loop: each user keeps this many jobs outstanding, and submits the next one after a
  // think time (exponential with this mean, retried while the daily rhythm says the user is away).
  int outstanding_per_user = 3;
  core::Duration think_time = 20 * core::kMinute;

  static std::vector<LabTeam> default_teams();
  static std::vector<LabKindModel> default_kinds();
};

// Checks the model: every field named with its reason.
core::Status validate(const LabWorkloadModel& m);

// The cluster and budget tree of the model (examples/lab-1024.yaml and examples/lab-budgets.yaml
// hold the same, for use with other workloads).
ClusterConfig lab_cluster(const LabWorkloadModel& m);
BudgetConfig lab_budgets(const LabWorkloadModel& m);

// Each team's fraction of all demand: share x demand_factor, normalised to sum to 1.
std::vector<double> lab_demand_fractions(const LabWorkloadModel& m);

// Open loop: every job of the model. Closed loop: each user's first `outstanding_per_user` jobs
// (the rest come from lab_closed_loop). Sorted by submit time, ids 1..n; source "lab".
Workload generate_lab_workload(const LabWorkloadModel& m);

// The closed loop's users, as a source of further jobs for the simulation (nullptr in the open
// loop). Each run gets its own, so each policy's users react to that policy's job ends.
std::unique_ptr<JobSource> lab_closed_loop(const LabWorkloadModel& m);

// One job per line, in the native JSON Lines format (with the user, when there is one): the form
// in which two generated workloads are compared byte for byte.
std::string workload_jsonl(const Workload& w);

// "open loop, load 2.50x" / "closed loop, 2.50x outstanding": the regime every figure comes from.
std::string lab_regime(const LabWorkloadModel& m);

}  // namespace allot::sim
