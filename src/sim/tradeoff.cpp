#include "sim/tradeoff.h"

#include <algorithm>
#include <cmath>

#include "sim/duration_text.h"
#include "sim/reports.h"
#include "sim/svg_plot.h"

namespace allot::sim {
namespace {

std::optional<double> wait(const RunResult& r, const char* kind, bool p50) {
  for (const auto& [k, s] : r.waits) {
    if (k == kind && s.count > 0) return p50 ? s.p50 : s.p90;
  }
  return std::nullopt;
}

// Round ticks for a duration axis from 0 to `max_s` seconds.
std::vector<std::pair<double, std::string>> duration_ticks(double max_s) {
  static const double steps[] = {1,        10,        60,    300,       900,       3600,
                                 4 * 3600, 12 * 3600, 86400, 7 * 86400, 30 * 86400};
  double step = steps[std::size(steps) - 1];
  for (double s : steps) {
    if (max_s / s <= 6) {
      step = s;
      break;
    }
  }
  std::vector<std::pair<double, std::string>> ticks;
  for (double t = 0; t <= max_s * 1.0001; t += step) {
    ticks.emplace_back(t, t == 0 ? "0" : duration_text(static_cast<core::Duration>(t)));
  }
  return ticks;
}

}  // namespace

const std::vector<TradeoffCost>& tradeoff_costs() {
  static const std::vector<TradeoffCost> costs = {
      {"debug-p90", "debug jobs' p90 queue wait", true},
      {"batch-p90", "batch jobs' p90 queue wait", true},
      {"large-p90", "large (multi-node) jobs' p90 queue wait", true},
      {"wait-p50", "median queue wait, all jobs", true},
      {"lost-gpu-hours", "GPU-hours lost to preemption, drain and node failures", false},
      {"preemptions", "jobs preempted", false},
  };
  return costs;
}

const TradeoffCost* find_tradeoff_cost(const std::string& name) {
  for (const TradeoffCost& c : tradeoff_costs()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

std::optional<double> tradeoff_value(const TradeoffCost& cost, const RunResult& r) {
  const std::string n = cost.name;
  if (n == "debug-p90") return wait(r, "debug", false);
  if (n == "batch-p90") return wait(r, "batch", false);
  if (n == "large-p90") return wait(r, "large", false);
  if (n == "wait-p50") return wait(r, "all", true);
  if (n == "lost-gpu-hours") return r.lost_gpu_hours;
  if (n == "preemptions") return static_cast<double>(r.preemptions);
  return std::nullopt;
}

std::string tradeoff_charts(const std::vector<RunResult>& runs, const TradeoffCost& cost) {
  struct Point {
    std::size_t index;
    double x;
  };
  std::vector<Point> have;
  double x_max = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (auto v = tradeoff_value(cost, runs[i])) {
      have.push_back({i, *v});
      x_max = std::max(x_max, *v);
    }
  }
  if (have.empty()) return "";
  x_max = x_max > 0 ? x_max * 1.08 : 1;
  std::string out;
  for (int chart = 0; chart < 2; ++chart) {
    PlotAxes a;
    a.title = std::string(chart == 0 ? "Impact (mean over budgets)" : "Occupancy") + " against " +
              cost.axis_label;
    a.x_label = cost.axis_label;
    a.y_label = chart == 0 ? "impact" : "occupancy";
    a.percent_y = true;
    a.x_max = x_max;
    if (cost.is_duration) a.x_ticks = duration_ticks(x_max);
    std::vector<ScatterPoint> points;
    for (const Point& p : have) {
      const RunResult& r = runs[p.index];
      ScatterPoint s;
      s.x = p.x;
      s.y = chart == 0 ? r.impact_mean : r.occupancy;
      s.label = std::to_string(p.index + 1);
      s.tooltip = std::to_string(p.index + 1) + ": " + run_name(r);
      s.colour = palette(chart);
      points.push_back(std::move(s));
    }
    out += scatter_chart(a, points);
  }
  return out;
}

}  // namespace allot::sim
