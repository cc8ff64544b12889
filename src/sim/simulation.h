// The discrete-event simulation: one policy, one cluster, one workload, on the real scheduling
// core. Events (arrivals, job ends, node faults and repairs) at one timestamp are applied
// together, then the core runs one cycle and its decisions are carried out; the core's
// next_wakeup() adds cycles where time alone may change a decision.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/scheduler.h"
#include "sim/budget_config.h"
#include "sim/cluster_config.h"
#include "sim/diagnostics.h"
#include "sim/fault_model.h"
#include "sim/progress.h"
#include "sim/run_result.h"
#include "sim/service_model.h"
#include "sim/workload.h"

namespace allot::sim {

// What a preemption costs the preempted job.
struct PreemptionCost {
  // A resumable job keeps the work up to its last checkpoint (every `checkpoint_interval` of
  // useful running, from the start of its run); 0 = it loses nothing.
  core::Duration checkpoint_interval = 30 * core::kMinute;
  // A resumable job's next run first spends this long restoring (GPUs held, no progress).
  core::Duration restart_delay = 5 * core::kMinute;
};

// A job ready for the core: the trace job with its shape fixed for the cluster.
struct AdmittedJob {
  SimJob job;
  core::Shape shape;         // GangShape::Even
  core::Shape uneven_shape;  // GangShape::Uneven (the even shape where the nodes cannot take it)
  const core::Shape& shape_for(GangShape rule) const {
    return rule == GangShape::Uneven ? uneven_shape : shape;
  }
  std::string budget_path;
};

// Jobs that arrive in answer to the simulation: a closed loop, where a person submits their next
// job some time after one of theirs ends. Each run makes its own (Scenario::job_source), so each
// policy's users answer that policy's job ends.
class JobSource {
 public:
  virtual ~JobSource() = default;
  // Logical job `ended` completed (or was refused by the core) at `t`: the jobs to submit next,
  // each with submit >= t. The simulation numbers them and fixes their shape for the cluster.
  virtual std::vector<SimJob> on_job_end(const SimJob& ended, core::Time t) = 0;
  // No job arrives after this time.
  virtual core::Time horizon() const = 0;
};

// An inference service on the scenario's cluster: its model and its replicas' job, admitted like a
// workload's job (its budget a leaf of the tree, its replica's shape one the nodes can take).
struct ScenarioService {
  SimService spec;
  AdmittedJob replica;  // kind inference; its tier's minimum runtime is set per replica
};

// The inputs every policy run shares, checked once.
struct Scenario {
  ClusterConfig cluster;
  BudgetConfig budgets;
  std::vector<AdmittedJob> jobs;  // by submit time
  std::string workload_source;
  // Empty for a fixed workload (a trace); otherwise makes each run's closed loop.
  std::function<std::unique_ptr<JobSource>()> job_source;
  // Inference services beside the workload (docs/simulator.md, "Inference services"), and the
  // seed of their loads' noise.
  std::vector<ScenarioService> services;
  std::uint64_t service_seed = 1;
};

// The shape of a request of `gpus` whole GPUs on nodes of at most `node_gpus` GPUs: one node if
// it fits; otherwise, Even: the fewest nodes that split it evenly, otherwise whole nodes rounding
// up; Uneven: whole nodes of node_gpus plus one node with the remainder.
core::Shape shape_for(const SimJob& j, int node_gpus, GangShape rule = GangShape::Even);

// Checks the jobs against the cluster and the budgets: an unknown budget, a budget that is not a
// leaf, a job larger than any node or than the cluster, an unknown GPU model are reported to
// `diag` and the job is left out.
Scenario make_scenario(ClusterConfig cluster, BudgetConfig budgets, const Workload& workload,
                       Diagnostics& diag);

// Adds the services of `file` to a scenario: their budgets to its tree (a path the tree has
// already is refused), and each service's replica admitted as a job is. The first problem is
// returned, naming the file, line and field.
core::Status add_services(Scenario& sc, const ServiceFile& file, std::uint64_t seed);

struct SimOptions {
  std::string policy_name = "fairshare";
  std::string policy_description;
  std::string label;  // a sweep point's parameters, for reports
  // Runs on this scenario instead of the one given to run_all (a sweep over budget files).
  const Scenario* scenario = nullptr;
  core::PolicyConfig policy;
  GangShape gang_shape = GangShape::Even;  // the preset's shape rule for jobs that give a GPU count
  // Dynamic MIG: how long a GPU the core decided to re-partition stays unusable before its new
  // layout is in service (the agent's next poll, draining nothing, NVML's destroy and create).
  core::Duration mig_reconfigure = 30;
  bool oracle_durations = false;  // jobs declare their true duration (PolicyPreset)
  FaultModel faults;
  // Health changes at given times (maintenance, or a test's hand-made failure), besides `faults`.
  std::vector<FaultEvent> scripted_health;
  PreemptionCost cost;
  // Stop at this time (absolute). kNever: when every job has ended, but no later than
  // `max_drain` after the last arrival.
  core::Time until = core::kNever;
  core::Duration max_drain = 365 * core::kDay;
  core::Duration bucket = core::kHour;  // of the time series
  bool record_events = false;
  // Where the run reports its simulated time and events (relaxed atomic stores), or nothing.
  RunProgress* progress = nullptr;
};

RunResult simulate(const Scenario& scenario, const SimOptions& options);

}  // namespace allot::sim
