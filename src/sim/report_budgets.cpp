#include "sim/report_budgets.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "sim/report_numbers.h"
#include "sim/svg_plot.h"

namespace allot::sim {
namespace {

// More runs than this (a sweep's grid) would make the per-budget sections unreadable.
constexpr std::size_t kMaxRunsPerBudget = 8;

// The budget paths of every run, in first-seen order.
std::vector<std::string> budget_paths(const Report& rep) {
  std::vector<std::string> out;
  for (const RunResult& r : rep.runs) {
    for (const BudgetResult& b : r.budgets) {
      if (std::find(out.begin(), out.end(), b.path) == out.end()) out.push_back(b.path);
    }
  }
  return out;
}

const BudgetResult* find_budget(const RunResult& r, const std::string& path) {
  for (const BudgetResult& b : r.budgets) {
    if (b.path == path) return &b;
  }
  return nullptr;
}

// Average GPUs over groups of `step` buckets of a milli-GPU-seconds series, as (day, GPUs); the
// last bucket may be shorter than the others (the run's end).
std::vector<std::pair<double, double>> gpus_series(const std::vector<core::MilliGpuSeconds>& v,
                                                   const RunResult& r, std::size_t step,
                                                   double scale = 1) {
  std::vector<std::pair<double, double>> out;
  const std::size_t n = r.series_total.size();
  const double bucket = static_cast<double>(r.bucket);
  const double span = static_cast<double>(r.end - r.start);
  for (std::size_t i = 0; i < n; i += step) {
    const std::size_t to = std::min(n, i + step);
    double sum = 0;
    for (std::size_t k = i; k < to; ++k) sum += static_cast<double>(k < v.size() ? v[k] : 0);
    const double secs =
        std::min(span, bucket * static_cast<double>(to)) - bucket * static_cast<double>(i);
    const double mid = (bucket * static_cast<double>(i) + bucket * static_cast<double>(to)) / 2;
    out.emplace_back(std::min(mid, span) / 86400.0, secs > 0 ? scale * sum / (1000.0 * secs) : 0);
  }
  return out;
}

// The smallest m x 10^k at or above v, m one of a few values that split into four even ticks.
double nice_ceiling(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 1.2, 1.6, 2.0, 2.4, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0}) {
    if (m * p >= v * (1 - 1e-9)) return m * p;
  }
  return 10 * p;
}

double max_y(const std::vector<std::pair<double, double>>& v) {
  double m = 0;
  for (const auto& p : v) m = std::max(m, p.second);
  return m;
}

}  // namespace

double report_days(const Report& rep) {
  double days = 0;
  for (const RunResult& r : rep.runs) {
    days = std::max(days, static_cast<double>(r.end - r.start) / 86400.0);
  }
  return days > 0 ? days : 1;
}

std::string budget_comparison_html(const Report& rep) {
  if (rep.runs.empty() || rep.runs.size() > kMaxRunsPerBudget) return "";
  const std::vector<std::string> paths = budget_paths(rep);
  std::string h =
      "<h2>Budgets across policies</h2><p>Per budget and policy: impact (delivered toward owed / "
      "owed), queue wait p90 from submission to first start, and runs preempted with the "
      "GPU-hours they lost. <i>owed little</i>: owed less than " +
      pct(kOwedLittleFraction) +
      " of the mean owed per budget, so left out of the worst impact and the count at &ge; "
      "95%.</p><div class='scroll'><table><tr><th rowspan='2'>budget</th>";
  for (const RunResult& r : rep.runs) {
    h += "<th colspan='3'>" + html_escape(run_name(r)) + "</th>";
  }
  h += "</tr><tr>";
  for (std::size_t k = 0; k < rep.runs.size(); ++k) {
    h += "<th>impact</th><th>wait p90</th><th>preempted (lost GPU-h)</th>";
  }
  h += "</tr>";
  for (const std::string& path : paths) {
    h += "<tr><td>" + html_escape(path) + "</td>";
    for (const RunResult& r : rep.runs) {
      const BudgetResult* b = find_budget(r, path);
      if (!b) {
        h += "<td>-</td><td>-</td><td>-</td>";
        continue;
      }
      std::string impact = b->owed_gpu_hours > 0 ? pct(b->impact) : "not owed";
      const char* cls = b->owed_gpu_hours <= 0 || b->owed_little ? ""
                        : b->impact >= 0.95                      ? "ok"
                                                                 : "bad";
      if (b->owed_little) impact += " <i>owed little</i>";
      h += "<td class='" + std::string(cls) + "'>" + impact + "</td><td>" +
           (b->waits.count ? short_duration(b->waits.p90) : std::string("-")) + "</td><td>" +
           std::to_string(b->preemptions) + " (" + fmt(b->lost_gpu_hours) + ")</td>";
    }
    h += "</tr>";
  }
  return h + "</table></div>";
}

std::string budget_time_series_html(const Report& rep) {
  if (rep.runs.empty()) return "";
  if (rep.runs.size() > kMaxRunsPerBudget) {
    return "<h2>Allocation against usage, per budget</h2><p>Not drawn for more than " +
           std::to_string(kMaxRunsPerBudget) +
           " runs (a sweep): run the points of interest with `allot sim` to see them.</p>";
  }
  const double days = report_days(rep);
  const std::vector<std::string> paths = budget_paths(rep);
  std::string h =
      "<h2>Allocation against usage, per budget</h2><p>GPUs each budget held (average over the "
      "plotted interval), allocated (within its share, protected) and unallocated (beyond it, "
      "preemptible), against its entitlement (its fraction of the GPUs available at the time) and "
      "its demand (GPUs its submitted, unfinished jobs asked for; clipped at the top of the plot "
      "when far above the rest). A budget whose held GPUs stay under its entitlement while its "
      "demand is above it is owed GPUs it did not get. Same axes for a budget under every policy; "
      "hover for values.</p>";
  for (const std::string& path : paths) {
    struct Lines {
      const RunResult* run;
      std::vector<PlotLine> lines;
    };
    std::vector<Lines> charts;
    double top = 0, demand_top = 0;
    for (const RunResult& r : rep.runs) {
      const BudgetResult* b = find_budget(r, path);
      if (!b) continue;
      const std::size_t step = std::max<std::size_t>(1, (r.series_total.size() + 239) / 240);
      std::vector<core::MilliGpuSeconds> unalloc(b->series_held.size());
      for (std::size_t i = 0; i < unalloc.size(); ++i) {
        unalloc[i] =
            b->series_held[i] - (i < b->series_allocated.size() ? b->series_allocated[i] : 0);
      }
      Lines c{&r, {}};
      c.lines.push_back({"held in all", "#aec7e8", gpus_series(b->series_held, r, step), true});
      c.lines.push_back({"allocated", "#1f77b4", gpus_series(b->series_allocated, r, step), true});
      c.lines.push_back({"unallocated", "#ff7f0e", gpus_series(unalloc, r, step), false});
      c.lines.push_back(
          {"entitlement", "#2ca02c", gpus_series(r.series_available, r, step, b->fraction), false});
      c.lines.push_back({"demand", "#d62728", gpus_series(b->series_demand, r, step), false});
      for (std::size_t i = 0; i < 4; ++i) top = std::max(top, max_y(c.lines[i].points));
      demand_top = std::max(demand_top, max_y(c.lines[4].points));
      charts.push_back(std::move(c));
    }
    if (charts.empty()) continue;
    top = nice_ceiling(std::max({1.0, std::min(demand_top, 2 * top), top}) * 1.02);
    h += "<h3>" + html_escape(path) + "</h3><div class='grid'>";
    for (const Lines& c : charts) {
      PlotAxes a;
      a.title = run_name(*c.run);
      a.x_label = "days since the first submission";
      a.y_label = "GPUs";
      a.x_max = days;
      a.y_max = top;
      a.hover = true;
      a.hover_y_unit = " GPUs";
      a.hover_columns = 80;
      h += line_chart(a, c.lines, 580, 210);
    }
    h += "</div>";
  }
  return h;
}

}  // namespace allot::sim
