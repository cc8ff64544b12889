#include "sim/sweep.h"

#include <cstdio>

#include "sim/duration_text.h"

namespace allot::sim {

std::vector<SimOptions> sweep_points(const std::vector<SimOptions>& bases, const SweepGrid& g) {
  std::vector<SimOptions> out;
  const std::vector<core::Duration> none_d = {-1};
  const std::vector<double> none_m = {-1};
  for (const SimOptions& base : bases) {
    for (core::Duration lb : g.lookback.empty() ? none_d : g.lookback) {
      for (core::Duration mmr : g.max_min_runtime.empty() ? none_d : g.max_min_runtime) {
        for (double margin : g.preemption_margin.empty() ? none_m : g.preemption_margin) {
          SimOptions o = base;
          std::string label;
          if (lb >= 0) {
            o.policy.lookback = lb;
            label += "lookback=" + duration_text(lb);
          }
          if (mmr >= 0) {
            o.policy.max_min_runtime = mmr;
            label +=
                std::string(label.empty() ? "" : " ") + "max_min_runtime=" + duration_text(mmr);
          }
          if (margin >= 0) {
            o.policy.preemption_margin = margin;
            char b[32];
            std::snprintf(b, sizeof b, "%g", margin);
            label += std::string(label.empty() ? "" : " ") + "margin=" + b;
          }
          o.label = base.label.empty() ? label : base.label + " " + label;
          out.push_back(std::move(o));
        }
      }
    }
  }
  return out;
}

}  // namespace allot::sim
