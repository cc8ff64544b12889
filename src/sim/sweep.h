// A sweep: every combination of a few policy parameters, each point a full simulation, run in
// parallel on all cores.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "sim/simulation.h"

namespace allot::sim {

struct SweepBudgets {
  std::string name;  // for labels: the file name without directory and extension
  const Scenario* scenario = nullptr;
};

struct SweepGrid {
  std::vector<SweepBudgets> budgets;
  std::vector<core::Duration> lookback;
  std::vector<core::Duration> max_min_runtime;
  std::vector<double> preemption_margin;
  bool empty() const {
    return budgets.empty() && lookback.empty() && max_min_runtime.empty() &&
           preemption_margin.empty();
  }
};

// "examples/philly-equal.yaml" -> "philly-equal".
std::string budgets_name(const std::string& path);

// The grid's points for each base run, in a fixed order (base, then budgets, then lookback, then
// maximum minimum runtime, then margin); each point's label names its values.
std::vector<SimOptions> sweep_points(const std::vector<SimOptions>& bases, const SweepGrid& grid);

}  // namespace allot::sim
