// A sweep's trade-off plots: one labelled point per grid point, x = a cost the operator picks
// (a queue wait, GPU-hours lost to preemption), y = impact and occupancy.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/run_result.h"

namespace allot::sim {

struct TradeoffCost {
  const char* name;        // as given to --plot-x
  const char* axis_label;  // for the plot
  bool is_duration;        // seconds
};
// Every cost a trade-off plot may put on its x axis; the first is the default.
const std::vector<TradeoffCost>& tradeoff_costs();
const TradeoffCost* find_tradeoff_cost(const std::string& name);
// The cost of one run, or nothing when it has no such figure (no debug jobs, say).
std::optional<double> tradeoff_value(const TradeoffCost& cost, const RunResult& r);

// Two inline SVG scatter plots (impact, occupancy against the cost); point k is labelled "k+1",
// as in the report's comparison table. Empty when no run has the cost.
std::string tradeoff_charts(const std::vector<RunResult>& runs, const TradeoffCost& cost);

}  // namespace allot::sim
