#include "sim/sweep.h"

#include <cstdio>

#include "sim/duration_text.h"

namespace allot::sim {

std::string budgets_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const auto dot = name.find_last_of('.');
  if (dot != std::string::npos && dot > 0) name.resize(dot);
  return name;
}

std::vector<SimOptions> sweep_points(const std::vector<SimOptions>& bases, const SweepGrid& g) {
  std::vector<SimOptions> out;
  const std::vector<SweepBudgets> none_b = {SweepBudgets{}};
  const std::vector<core::Duration> none_d = {-1};
  const std::vector<double> none_m = {-1};
  auto append = [](std::string& label, const std::string& part) {
    label += (label.empty() ? "" : " ") + part;
  };
  for (const SimOptions& base : bases) {
    for (const SweepBudgets& budgets : g.budgets.empty() ? none_b : g.budgets) {
      for (core::Duration lb : g.lookback.empty() ? none_d : g.lookback) {
        for (core::Duration mmr : g.max_min_runtime.empty() ? none_d : g.max_min_runtime) {
          for (double margin : g.preemption_margin.empty() ? none_m : g.preemption_margin) {
            SimOptions o = base;
            std::string label;
            if (budgets.scenario) {
              o.scenario = budgets.scenario;
              append(label, "budgets=" + budgets.name);
            }
            if (lb >= 0) {
              o.policy.lookback = lb;
              append(label, "lookback=" + duration_text(lb));
            }
            if (mmr >= 0) {
              o.policy.max_min_runtime = mmr;
              append(label, "max_min_runtime=" + duration_text(mmr));
            }
            if (margin >= 0) {
              o.policy.preemption_margin = margin;
              char b[32];
              std::snprintf(b, sizeof b, "%g", margin);
              append(label, std::string("margin=") + b);
            }
            o.label = base.label.empty() ? label : base.label + " " + label;
            out.push_back(std::move(o));
          }
        }
      }
    }
  }
  return out;
}

}  // namespace allot::sim
