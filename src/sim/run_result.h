// Everything one simulated policy run measured: the four metrics and the rest, with the series
// the reports plot. Definitions are in docs/simulator.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/policy_config.h"
#include "core/types.h"

namespace allot::sim {

struct Summary {  // of a sample of durations, in seconds
  std::size_t count = 0;
  std::size_t censored = 0;  // of which only a lower bound is known (still waiting at the end)
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
// Nearest-rank percentiles; sorts `v`.
Summary summarize(std::vector<double>& v, std::size_t censored);

// A budget owed less than this fraction of the mean owed per budget is "owed little".
inline constexpr double kOwedLittleFraction = 0.05;

struct BudgetResult {
  std::string path;
  double fraction = 0;  // of capacity
  std::size_t jobs = 0;
  double demand_gpu_hours = 0;     // GPU-time its submitted, unfinished jobs asked for
  double owed_gpu_hours = 0;       // sum over hours of min(fraction x available, demand)
  double delivered_gpu_hours = 0;  // GPU-time its jobs ran
  double allocated_gpu_hours = 0;  // of which allocated
  double delivered_toward_owed_gpu_hours = 0;  // sum over hours of min(delivered, owed)
  double impact = 1;         // delivered_toward_owed / owed (1 when nothing was owed)
  bool owed_little = false;  // owed under RunResult::owed_little_gpu_hours: not in worst, >= 95%
  Summary waits;             // its jobs' waits from submission to first start
  std::size_t preemptions = 0;
  double lost_gpu_hours = 0;  // GPU-time its preempted or stopped runs lost
  // Hourly series (milli-GPU-seconds per bucket, the run's buckets): GPUs held by its running
  // jobs in all and of which allocated, and GPUs its submitted, unfinished jobs asked for. Its
  // entitlement is fraction x RunResult::series_available.
  std::vector<core::MilliGpuSeconds> series_held, series_allocated, series_demand;
};

struct Check {
  std::string name;
  bool passed = true;
  std::string detail;
};

struct EventRecord {
  core::Time time = 0;
  std::string event;         // submit, start, stop, finish, class, node, resubmit
  std::uint64_t job = 0;     // logical job (0 for node events)
  std::uint64_t run_id = 0;  // the core's job id (a resubmission gets a new one)
  double gpus = 0;
  std::string reason;
};

// One inference service's figures (docs/simulator.md, "Inference services").
struct ServiceResult {
  std::string name, budget;
  int min_replicas = 0, max_replicas = 0;
  double mean_desired = 0, mean_serving = 0;  // replicas wanted, and serving up to those wanted
  double mean_load = 0;                       // requests/s reported
  double availability = 1;  // replica availability: serving (up to wanted) over wanted, in time
  double floor_held = 1;    // time with at least min_replicas serving, over the run
  double served = -1;       // load within serving capacity over load; -1: no capacity given
  Summary scale_up_delay;   // from a scale-out decision to its replica serving
  std::size_t scale_outs = 0, scale_ins = 0;
  std::size_t preemptions = 0, stops = 0;  // of its replicas (stops: any cause), each replaced
};

struct RunResult {
  std::string policy;
  std::string description;
  std::string label;  // what varied, in a sweep ("lookback=1d max_min_runtime=8h")
  core::PolicyConfig config;
  bool uneven_gangs = false;      // the shape rule (GangShape::Uneven), for the report
  core::Time start = 0, end = 0;  // simulated period
  core::Duration bucket = core::kHour;

  // The four metrics.
  double availability = 0;
  double occupancy = 0, occupancy_allocated = 0, occupancy_unallocated = 0;
  double impact_mean = 0;  // over budgets that were owed anything
  // Over budgets owed at least owed_little_gpu_hours (kOwedLittleFraction of the mean owed):
  // a budget owed almost nothing reaches any impact by chance.
  double impact_min = 0;
  std::size_t budgets_owed = 0, budgets_at_95 = 0, budgets_owed_little = 0;
  double owed_little_gpu_hours = 0;
  double utilization = 0;
  bool utilization_known = false;  // some job carries utilisation data (else "n/a")
  // Waits from submission to first start, by kind: all, debug, batch, large (multi-node).
  std::vector<std::pair<std::string, Summary>> waits;
  std::vector<std::pair<std::string, std::vector<double>>> wait_samples;  // sorted, for CDFs

  // The rest.
  Summary completion;  // completion time (end - submit) of completed jobs
  double makespan = 0;
  std::size_t jobs = 0, completed = 0, pending_at_end = 0, running_at_end = 0;
  std::size_t runs = 0, resubmissions = 0;
  std::size_t preemptions = 0, drain_stops = 0, node_down_stops = 0, class_changes = 0;
  double lost_gpu_hours = 0;
  // Interactive jobs (JobKind::Interactive): stops of them, the work they lost (a stop with the
  // interactive grace saves it), and their waits from submission to first start (also counted in
  // `waits` under their category).
  std::size_t interactive_preemptions = 0, interactive_stops = 0;
  double interactive_lost_gpu_hours = 0;
  Summary interactive_wait;
  double fragmented_gpu_hours = 0, fragmentation = 0;  // idle while a fitting-size job waited
  // Dynamic MIG (docs/policy.md section 7.5): GPUs re-partitioned (split and made whole), and the
  // GPU-hours they spent unusable meanwhile (SimOptions::mig_reconfigure each).
  std::size_t mig_splits = 0, mig_merges = 0;
  double mig_reconfigure_gpu_hours = 0;
  double jain_fairness = 1;
  // Inference services, when the run has some: each one's figures, and the training tier's
  // impact (budgets that fund no service). The other figures keep replicas out of the jobs,
  // waits, preemptions and GPU-hours lost (theirs are here); replicas are in occupancy and in
  // their budgets' delivered GPU-hours.
  std::vector<ServiceResult> services;
  double training_impact_mean = 1, training_impact_min = 1;
  double total_gpu_hours = 0, available_gpu_hours = 0, occupied_gpu_hours = 0;
  double allocated_gpu_hours = 0, unallocated_gpu_hours = 0, draining_gpu_hours = 0;
  std::uint64_t cycles = 0, events_processed = 0, submit_errors = 0;
  std::vector<BudgetResult> budgets;

  // Hourly series (milli-GPU-seconds per bucket).
  std::vector<core::MilliGpuSeconds> series_total, series_available, series_allocated,
      series_unallocated;

  std::vector<Check> checks;
  std::vector<EventRecord> events;  // only when recording
  double wall_seconds = 0;          // not part of report.json (it would break byte identity)
  double core_seconds = 0;          // of which in Scheduler::cycle (CPU time)
  // The same by the backlog each cycle faced (pending jobs before it), in buckets from 0, 1,000,
  // 3,000, 10,000, 30,000 and 100,000 pending: how the cost of a cycle grows with the backlog.
  struct BacklogCost {
    std::size_t pending_from = 0;
    std::uint64_t cycles = 0;
    double core_seconds = 0;
  };
  std::vector<BacklogCost> core_by_backlog;  // not part of report.json (wall time)
  double cpu_seconds = 0;  // CPU time of the run's thread (not part of report.json)
};

}  // namespace allot::sim
