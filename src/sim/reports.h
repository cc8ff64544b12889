// What a simulation writes: report.json (every figure), events.csv (every decision), report.html
// (plots), and a terse table for the terminal.
#pragma once

#include <string>
#include <vector>

#include "sim/experiment.h"
#include "sim/run_result.h"

namespace allot::sim {

struct Report {
  const ExperimentSpec* spec = nullptr;
  const Inputs* inputs = nullptr;
  std::vector<RunResult> runs;
  bool sweep = false;  // runs are the points of a grid: report.html adds trade-off plots
  std::string tradeoff_x = "debug-p90";  // their x axis (tradeoff_costs())
};

// Byte-identical for the same seed and inputs: keys in a fixed order, numbers rounded to fixed
// precision, no wall-clock figures.
std::string report_json(const Report& r);
// One CSV of every decision of every policy: policy,time,event,job,run_id,gpus,reason.
std::string events_csv(const Report& r);
// What each run cost (wall, CPU and core-cycle seconds, events): timings.json, apart from
// report.json because these figures differ from run to run.
std::string timings_json(const Report& r);
// One self-contained page: inline SVG plots, no scripts, nothing downloaded.
std::string report_html(const Report& r);
// One row per policy (the four metrics, waits, preemptions), then any failed checks.
std::string summary_table(const Report& r, bool with_wall_time);

// "1h05m", "45s", "3.2d": a short human duration for tables.
std::string short_duration(double seconds);
// A run's name in tables and plots: the policy, then a sweep point's label.
std::string run_name(const RunResult& r);

}  // namespace allot::sim
