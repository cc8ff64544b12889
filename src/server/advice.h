// Right-sizing advice from telemetry (docs/api.md, "Advice"): what each
// job's GPUs did over the week, and what to ask for instead. Pure: telemetry summaries and job
// specs in, advice out.
//
// Each telemetry report an agent posts covers about ten seconds of one run on one node;
// classify_interval() files that interval as idle, starved or busy, and the store adds the
// seconds to the job's summary (store::TelemetryRecord::idle_seconds, starved_seconds): so a
// job's summary is a fixed-size row however long it runs, and "idle for long stretches" and
// "starved most of the time" are measured, not guessed from a mean.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/gpu_catalog.h"
#include "store/store.h"

namespace allot::server {

// The thresholds, each a named constant (documented in docs/api.md, "Advice").
struct AdviceRules {
  // An interval is *idle* when its mean GPU use is below this, percent.
  static constexpr double kIdleUtilPct = 10;
  // An interval is *starved* (data-pipeline bound) when its mean GPU use is below this ...
  static constexpr double kStarvedUtilPct = 50;
  // ... while its I/O wait share, or its cgroup's I/O pressure, is at least this, percent ...
  static constexpr double kStarvedIoPct = 20;
  // ... or its CPU use is at least this fraction of its CPU limit (of one core when it has
  // none: a single-threaded loader saturated) ...
  static constexpr double kCpuSaturatedFraction = 0.9;
  // ... or its cgroup's CPU pressure (tasks waiting for a CPU) is at least this, percent.
  static constexpr double kStarvedCpuPressurePct = 50;
  // A job is named idle / starved when that share of its measured time was.
  static constexpr double kIdleShare = 0.5;
  static constexpr double kStarvedShare = 0.5;
  // A job is named oversized when its peak GPU memory stayed at or below this share of its
  // GPUs' memory ...
  static constexpr double kMemoryShare = 0.5;
  // ... and the suggestion must hold the peak with this much headroom.
  static constexpr double kHeadroom = 1.1;
  // The window advice looks back over, seconds.
  static constexpr std::int64_t kWindowSeconds = std::int64_t{7} * 86400;
  // At submission: a hint needs at least this many recent jobs of the same shape, each using at
  // most kMemoryShare of its memory; it names at most kHintJobs of them.
  static constexpr int kHintMinJobs = 3;
  static constexpr int kHintJobs = 5;

  // Jobs measured for less than this get no advice (a server option: tests and demos lower it).
  double min_seconds = 600;
};

struct IntervalClass {
  bool idle = false;
  bool starved = false;
};
// One report's interval: mean GPU use, CPU (100 = one core), I/O wait share, and the cgroup's
// CPU / I/O pressure (-1 = unknown); `cpus`: the job's CPU limit per node (0 = none). Starved
// wins over idle: GPUs that wait on a busy pipeline are starved, not idle.
IntervalClass classify_interval(double gpu_util_pct, double cpu_pct, double io_wait_pct,
                                double cpu_pressure_pct, double io_pressure_pct, double cpus);

struct AdviceItem {
  std::string reason;      // idle, starved, oversized-memory
  std::string hint;        // what happened and what to do, in a sentence
  std::string suggestion;  // oversized-memory: "MIG 1g.10gb", "2 GPUs"; else ""
};

// The advice for one job from its whole-job summary (run 0) and canonical spec (nodes,
// gpus_per_node, gpu_milli, cpus). None for a job measured less than rules.min_seconds or
// without GPUs.
std::vector<AdviceItem> job_advice(const store::TelemetryRecord& t, const nlohmann::json& spec,
                                   const core::GpuCatalog& catalog, const AdviceRules& rules = {});

// The GPUs a job asks for (nodes × gpus_per_node × gpu_milli / 1000).
double requested_gpus(const nlohmann::json& spec);

// A job with its summary, for the reports below.
struct MeasuredJob {
  store::JobRecord job;
  store::TelemetryRecord telemetry;  // run 0
};

// The advice report: each job with advice, and per budget the jobs and GPU-hours measured, idle
// and starved, and how many jobs were named for each reason.
nlohmann::json advice_report(const std::vector<MeasuredJob>& jobs, const core::GpuCatalog& catalog,
                             const AdviceRules& rules = {});

// The hint at submission, if any: `recent` are the budget's measured jobs, newest first; those
// of the same shape (nodes, gpus_per_node, gpu_milli as `spec`) count. Empty when there is none.
std::string submission_hint(const nlohmann::json& spec, const std::vector<MeasuredJob>& recent,
                            const AdviceRules& rules = {});

}  // namespace allot::server
