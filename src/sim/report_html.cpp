// report.html: one self-contained page of plots and tables.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "sim/duration_text.h"
#include "sim/report_budgets.h"
#include "sim/report_numbers.h"
#include "sim/reports.h"
#include "sim/svg_plot.h"
#include "sim/tradeoff.h"

namespace allot::sim {
namespace {

// Averages of consecutive ratio buckets, at most `points` of them, as (day, value).
std::vector<std::pair<double, double>> downsample(const std::vector<core::MilliGpuSeconds>& part,
                                                  const std::vector<core::MilliGpuSeconds>& whole,
                                                  core::Duration bucket, std::size_t points) {
  std::vector<std::pair<double, double>> out;
  const std::size_t n = whole.size();
  const std::size_t step = std::max<std::size_t>(1, (n + points - 1) / points);
  for (std::size_t i = 0; i < n; i += step) {
    double p = 0, w = 0;
    for (std::size_t k = i; k < std::min(n, i + step); ++k) {
      p += static_cast<double>(k < part.size() ? part[k] : 0);
      w += static_cast<double>(whole[k]);
    }
    // NOLINTNEXTLINE(bugprone-integer-division): the middle bucket of the step, a whole index
    const double day = static_cast<double>(i + step / 2) * static_cast<double>(bucket) / 86400.0;
    out.emplace_back(day, w > 0 ? p / w : 0);
  }
  return out;
}

std::vector<core::MilliGpuSeconds> sum(const std::vector<core::MilliGpuSeconds>& a,
                                       const std::vector<core::MilliGpuSeconds>& b) {
  std::vector<core::MilliGpuSeconds> o(std::max(a.size(), b.size()), 0);
  for (std::size_t i = 0; i < a.size(); ++i) o[i] += a[i];
  for (std::size_t i = 0; i < b.size(); ++i) o[i] += b[i];
  return o;
}

std::string time_series_chart(const RunResult& r, double days) {
  PlotAxes a;
  a.hover = true;
  a.title = run_name(r) + ": availability and occupancy over time";
  a.x_label = "days since the first submission";
  a.y_label = "fraction";
  a.percent_y = true;
  a.x_max = days;
  a.y_max = 1.0;
  std::vector<PlotLine> lines;
  lines.push_back({"availability", "#2ca02c",
                   downsample(r.series_available, r.series_total, r.bucket, 400), false});
  lines.push_back(
      {"occupancy", "#1f77b4",
       downsample(sum(r.series_allocated, r.series_unallocated), r.series_available, r.bucket, 400),
       true});
  lines.push_back({"allocated part", "#ff7f0e",
                   downsample(r.series_allocated, r.series_available, r.bucket, 400), true});
  return line_chart(a, lines);
}

std::string wait_cdf_chart(const Report& rep, const std::string& kind) {
  PlotAxes a;
  a.title = "Queue wait, " + kind + " jobs: fraction started within x";
  a.x_label = "wait (log scale)";
  a.y_label = "fraction of jobs";
  a.percent_y = true;
  a.log_x = true;
  a.x_min = 1;
  a.x_max = 60;
  std::vector<PlotLine> lines;
  for (std::size_t p = 0; p < rep.runs.size(); ++p) {
    for (const auto& [k, v] : rep.runs[p].wait_samples) {
      if (k != kind || v.empty()) continue;
      a.x_max = std::max(a.x_max, v.back());
      PlotLine l;
      l.name = run_name(rep.runs[p]);
      l.colour = palette(p);
      const std::size_t n = v.size();
      const std::size_t step = std::max<std::size_t>(1, n / 300);
      for (std::size_t i = 0; i < n; i += step) {
        l.points.emplace_back(std::max(1.0, v[i]), static_cast<double>(i + 1) / n);
      }
      l.points.emplace_back(std::max(1.0, v.back()), 1.0);
      lines.push_back(std::move(l));
    }
  }
  if (lines.empty()) return "";
  for (double t : {1.0, 60.0, 3600.0, 86400.0, 7 * 86400.0, 30 * 86400.0, 365 * 86400.0}) {
    if (t <= a.x_max * 1.01)
      a.x_ticks.emplace_back(t, duration_text(static_cast<core::Duration>(t)));
  }
  return line_chart(a, lines);
}

std::string budget_chart(const RunResult& r) {
  std::vector<BarGroup> groups;
  double max_v = 0;
  for (const BudgetResult& b : r.budgets) {
    if (b.owed_gpu_hours <= 0 && b.delivered_gpu_hours <= 0) continue;
    groups.push_back(
        {b.path, {b.owed_gpu_hours, b.delivered_toward_owed_gpu_hours, b.delivered_gpu_hours}});
    max_v = std::max({max_v, b.owed_gpu_hours, b.delivered_gpu_hours});
  }
  return bar_chart(run_name(r) + ": owed vs delivered GPU-hours per budget",
                   {"owed (fraction x available, capped hourly at demand)", "delivered toward owed",
                    "delivered in all"},
                   {"#999999", "#1f77b4", "#aec7e8"}, groups, max_v, false);
}

std::string comparison_chart(const Report& rep) {
  std::vector<std::string> names, colours;
  for (std::size_t p = 0; p < rep.runs.size(); ++p) {
    names.push_back(run_name(rep.runs[p]));
    colours.push_back(palette(p));
  }
  std::vector<BarGroup> g(5);
  g[0].label = "availability";
  g[1].label = "occupancy";
  g[2].label = "impact (mean)";
  g[3].label = "impact (worst)";
  g[4].label = "utilization";
  for (const RunResult& r : rep.runs) {
    g[0].values.push_back(r.availability);
    g[1].values.push_back(r.occupancy);
    g[2].values.push_back(r.impact_mean);
    g[3].values.push_back(r.impact_min);
    g[4].values.push_back(r.utilization);
  }
  return bar_chart("The four metrics by policy", names, colours, g, 1.0, true, 0.95);
}

}  // namespace

std::string report_html(const Report& rep) {
  const Inputs& in = *rep.inputs;
  const Scenario& sc = in.scenario;
  std::string h =
      "<!doctype html><html><head><meta charset='utf-8'><title>allot sim report</title><style>"
      "body{font-family:sans-serif;max-width:1200px;margin:24px auto;padding:0 12px;color:#222}"
      ".scroll{max-width:100%;overflow-x:auto}"
      "table{border-collapse:collapse;font-size:13px;margin:8px 0}"
      "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}"
      "th{background:#f3f3f3;font-weight:600}td:first-child,th:first-child{text-align:left}"
      "td:first-child{overflow-wrap:anywhere;min-width:11em;max-width:260px}"
      "th[colspan]{text-align:center}"
      ".bad{color:#b00;font-weight:bold}.ok{color:#070}"
      "svg{display:block;margin:10px 0;max-width:100%;height:auto}h2{margin-top:32px}"
      ".grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(580px,1fr))}"
      ".hover rect:hover{fill-opacity:.08}details{margin:8px 0}summary{cursor:pointer}"
      "</style></head><body>";
  const double days = report_days(rep);
  h += "<h1>allot sim</h1><p>";
  h += "Cluster <b>" + html_escape(sc.cluster.name) +
       "</b>: " + std::to_string(sc.cluster.total_gpus()) + " GPUs. Workload <b>" +
       html_escape(sc.workload_source) + "</b> (" + html_escape(in.workload_format) +
       "): " + std::to_string(sc.jobs.size()) + " jobs admitted of " +
       std::to_string(in.jobs_read) + " read, " + std::to_string(in.diag.skipped().size()) +
       " skipped. Load (demand / supply): " + load_text(in.load_after.ratio) +
       "x (trace as given: " + load_text(in.load_before.ratio) + "x). Seed " +
       std::to_string(rep.spec->seed) + ". Faults: " +
       (rep.spec->sim.faults.enabled
            ? "MTBF " + duration_text(rep.spec->sim.faults.mtbf) + " per node, repair " +
                  duration_text(rep.spec->sim.faults.repair)
            : std::string("off")) +
       ".</p>";

  h += std::string("<h2>Comparison</h2><div class='scroll'><table><tr>") +
       (rep.sweep ? "<th>#</th>" : "") +
       "<th>policy</th><th>availability</th><th>occupancy</th>"
       "<th>allocated</th><th>unallocated</th><th>impact mean</th><th>impact worst</th>"
       "<th>budgets &ge;95%</th><th>utilization</th><th>wait p50</th><th>debug p90</th>"
       "<th>batch p90</th><th>large p90</th><th>preempted</th><th>lost GPU-h</th>"
       "<th>fragmentation</th><th>Jain</th><th>completed</th></tr>";
  for (std::size_t k = 0; k < rep.runs.size(); ++k) {
    const RunResult& r = rep.runs[k];
    auto wait = [&](const char* kind, bool p50) {
      for (const auto& [k, s] : r.waits) {
        if (k == kind && s.count) return short_duration(p50 ? s.p50 : s.p90);
      }
      return std::string("-");
    };
    h += "<tr>" + (rep.sweep ? "<td>" + std::to_string(k + 1) + "</td>" : std::string()) + "<td>" +
         html_escape(run_name(r)) + "</td><td>" + pct(r.availability) + "</td><td>" +
         pct(r.occupancy) + "</td><td>" + pct(r.occupancy_allocated) + "</td><td>" +
         pct(r.occupancy_unallocated) + "</td><td>" + pct(r.impact_mean) + "</td><td>" +
         pct(r.impact_min) + "</td><td>" + std::to_string(r.budgets_at_95) + "/" +
         std::to_string(r.budgets_owed - r.budgets_owed_little) + "</td><td>" +
         (r.utilization_known ? pct(r.utilization) : std::string("n/a")) + "</td><td>" +
         wait("all", true) + "</td><td>" + wait("debug", false) + "</td><td>" +
         wait("batch", false) + "</td><td>" + wait("large", false) + "</td><td>" +
         std::to_string(r.preemptions) + "</td><td>" + fmt(r.lost_gpu_hours) + "</td><td>" +
         pct(r.fragmentation) + "</td><td>" + fmt(r.jain_fairness, "%.3f") + "</td><td>" +
         std::to_string(r.completed) + "/" + std::to_string(r.jobs) + "</td></tr>";
  }
  h += "</table></div><p>Impact worst and budgets &ge; 95% leave out budgets owed almost nothing: "
       "less than " +
       pct(kOwedLittleFraction) + " of the mean GPU-hours owed per budget (";
  for (std::size_t k = 0; k < rep.runs.size(); ++k) {
    const RunResult& r = rep.runs[k];
    h += (k ? "; " : "") + html_escape(run_name(r)) + ": under " +
         fmt(r.owed_little_gpu_hours, "%.1f") + " GPU-h, " + std::to_string(r.budgets_owed_little) +
         " of " + std::to_string(r.budgets_owed) + " budgets owed anything";
  }
  h += "). Impact mean and Jain count every budget owed anything.";
  if (!rep.runs.empty() && !rep.runs.front().utilization_known) {
    h += " Utilization: n/a, the workload carries no utilisation data.";
  }
  h += "</p>";
  if (rep.sweep) {
    const TradeoffCost* cost = find_tradeoff_cost(rep.tradeoff_x);
    if (!cost) cost = &tradeoff_costs().front();
    h += "<h2>Trade-off</h2><p>One point per grid point, numbered as in the table above (hover "
         "for its parameters): what each setting buys in impact and occupancy for what it costs "
         "in " +
         html_escape(cost->axis_label) + ". Up and to the left is better.</p>";
    h += tradeoff_charts(rep.runs, *cost);
  }
  if (!rep.runs.empty() && !rep.runs.front().services.empty()) {
    h += "<h2>Tiers</h2><p>Training: the impact of budgets that fund no service (the other "
         "figures above are the training tier's too: replicas are in occupancy only). Inference: "
         "per service, replicas serving over replicas wanted in time, time with at least its "
         "minimum serving, requests within the serving replicas' capacity, and the time from a "
         "scale-out to its replica serving.</p><div class='scroll'><table><tr><th>policy</th>"
         "<th>training impact mean</th><th>training impact worst</th><th>service</th>"
         "<th>replicas available</th><th>minimum held</th><th>load served</th>"
         "<th>replicas wanted</th><th>scale-up p50</th><th>scale-up p90</th><th>out / in</th>"
         "<th>replicas preempted</th></tr>";
    for (const RunResult& r : rep.runs) {
      for (const ServiceResult& sv : r.services) {
        h += "<tr><td>" + html_escape(run_name(r)) + "</td><td>" + pct(r.training_impact_mean) +
             "</td><td>" + pct(r.training_impact_min) + "</td><td>" + html_escape(sv.name) +
             "</td><td>" + pct(sv.availability) + "</td><td>" + pct(sv.floor_held) + "</td><td>" +
             (sv.served < 0 ? std::string("n/a") : pct(sv.served)) + "</td><td>" +
             fmt(sv.mean_desired, "%.1f") + "</td><td>" +
             (sv.scale_up_delay.count ? short_duration(sv.scale_up_delay.p50) : "-") + "</td><td>" +
             (sv.scale_up_delay.count ? short_duration(sv.scale_up_delay.p90) : "-") + "</td><td>" +
             std::to_string(sv.scale_outs) + " / " + std::to_string(sv.scale_ins) + "</td><td>" +
             std::to_string(sv.preemptions) + "</td></tr>";
      }
    }
    h += "</table></div>";
  }
  h += comparison_chart(rep);

  h += "<h2>Queue waits</h2><p>From submission to first start; jobs still waiting at the end "
       "count with the wait so far (a lower bound).</p>";
  for (const char* kind : {"all", "debug", "batch", "large"}) h += wait_cdf_chart(rep, kind);
  h += budget_comparison_html(rep);
  h += budget_time_series_html(rep);

  for (const RunResult& r : rep.runs) {
    h += "<h2>" + html_escape(run_name(r)) + "</h2><p>" + html_escape(r.description) + "</p>";
    h += time_series_chart(r, days);
    h += budget_chart(r);
    h += "<div class='scroll'><table><tr><th>budget</th><th>fraction</th><th>jobs</th>"
         "<th>owed GPU-h</th><th>delivered GPU-h</th><th>of which allocated</th><th>impact</th>"
         "<th>wait p50</th><th>wait p90</th><th>preempted</th><th>lost GPU-h</th></tr>";
    for (const BudgetResult& b : r.budgets) {
      const char* cls = b.owed_gpu_hours <= 0 || b.owed_little ? ""
                        : b.impact >= 0.95                     ? "ok"
                                                               : "bad";
      h += "<tr><td>" + html_escape(b.path) + "</td><td>" + pct(b.fraction) + "</td><td>" +
           std::to_string(b.jobs) + "</td><td>" + fmt(b.owed_gpu_hours) + "</td><td>" +
           fmt(b.delivered_gpu_hours) + "</td><td>" + fmt(b.allocated_gpu_hours) +
           "</td><td class='" + cls + "'>" +
           (b.owed_gpu_hours > 0 ? pct(b.impact) : std::string("not owed")) +
           (b.owed_little ? " <i>owed little</i>" : "") + "</td><td>" +
           (b.waits.count ? short_duration(b.waits.p50) : std::string("-")) + "</td><td>" +
           (b.waits.count ? short_duration(b.waits.p90) : std::string("-")) + "</td><td>" +
           std::to_string(b.preemptions) + "</td><td>" + fmt(b.lost_gpu_hours) + "</td></tr>";
    }
    std::size_t failed = 0;
    for (const Check& c : r.checks) failed += !c.passed;
    h += std::string("</table></div><details") + (failed ? " open" : "") +
         "><summary>Conservation checks: " +
         (failed ? "<span class='bad'>" + std::to_string(failed) + " of " +
                       std::to_string(r.checks.size()) + " failed</span>"
                 : "<span class='ok'>all " + std::to_string(r.checks.size()) + " passed</span>") +
         "</summary><ul>";
    for (const Check& c : r.checks) {
      h += std::string("<li class='") + (c.passed ? "ok'>&#10003; " : "bad'>&#10007; ") +
           html_escape(c.name) + " <span style='color:#555;font-weight:normal'>(" +
           html_escape(c.detail) + ")</span></li>";
    }
    h += "</ul></details>";
  }
  if (!in.diag.skipped().empty()) {
    h += "<h2>Skipped input</h2><ul>";
    for (std::size_t i = 0; i < in.diag.skipped().size() && i < 50; ++i) {
      h += "<li>" + html_escape(in.diag.skipped()[i].message()) + "</li>";
    }
    h += "</ul>";
  }
  return h + "<p style='color:#777'>Definitions: docs/simulator.md.</p></body></html>\n";
}

}  // namespace allot::sim
