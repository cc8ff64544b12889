// The terminal summary: one row per policy, columns as wide as their widest cell.
#include <cmath>
#include <cstdio>

#include "sim/reports.h"
#include "sim/text_table.h"

namespace allot::sim {

std::string short_duration(double s) {
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%.1fm", s / 60);
  } else if (s < 2 * 86400) {
    std::snprintf(buf, sizeof buf, "%.1fh", s / 3600);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fd", s / 86400);
  }
  return buf;
}

std::string run_name(const RunResult& r) {
  return r.label.empty() ? r.policy : r.policy + " " + r.label;
}

std::string summary_table(const Report& rep, bool with_wall_time) {
  auto pct = [](double x) {
    char b[16];
    std::snprintf(b, sizeof b, "%.1f%%", 100 * x);
    return std::string(b);
  };
  auto wait = [&](const RunResult& r, const char* kind, bool p50) {
    for (const auto& [k, s] : r.waits) {
      if (k == kind) return s.count ? short_duration(p50 ? s.p50 : s.p90) : std::string("-");
    }
    return std::string("-");
  };
  TextTable t({"policy", "avail", "occ (alloc)", "impact mean/min", ">=95%", "util", "all p50",
               "dbg p90", "bat p90", "lrg p90", "preempt", "frag", "jain"});
  if (with_wall_time) t.add_column("wall");
  for (const RunResult& r : rep.runs) {
    char jain[16], wall[16];
    std::snprintf(jain, sizeof jain, "%.3f", r.jain_fairness);
    std::snprintf(wall, sizeof wall, "%.2fs", r.wall_seconds);
    std::vector<std::string> row = {run_name(r),
                                    pct(r.availability),
                                    pct(r.occupancy) + " (" + pct(r.occupancy_allocated) + ")",
                                    pct(r.impact_mean) + "/" + pct(r.impact_min),
                                    std::to_string(r.budgets_at_95) + "/" +
                                        std::to_string(r.budgets_owed - r.budgets_owed_little),
                                    r.utilization_known ? pct(r.utilization) : std::string("n/a"),
                                    wait(r, "all", true),
                                    wait(r, "debug", false),
                                    wait(r, "batch", false),
                                    wait(r, "large", false),
                                    std::to_string(r.preemptions),
                                    pct(r.fragmentation),
                                    jain};
    if (with_wall_time) row.emplace_back(wall);
    t.add_row(std::move(row));
  }
  std::string out;
  if (!rep.inputs->regime.empty()) out += "regime: " + rep.inputs->regime + "\n";
  out += t.render();
  char line[512];
  for (const RunResult& r : rep.runs) {
    const std::string name = run_name(r);
    std::snprintf(line, sizeof line,
                  "  %s: %zu of %zu jobs completed, %zu pending and %zu running at the end; "
                  "%zu preempted, %zu drained, %zu lost to node failures (%.0f GPU-h lost); "
                  "%llu cycles, %llu events\n",
                  name.c_str(), r.completed, r.jobs, r.pending_at_end, r.running_at_end,
                  r.preemptions, r.drain_stops, r.node_down_stops, r.lost_gpu_hours,
                  static_cast<unsigned long long>(r.cycles),
                  static_cast<unsigned long long>(r.events_processed));
    out += line;
    if (r.mig_splits + r.mig_merges > 0 || wait(r, "mig", true) != "-") {
      std::snprintf(line, sizeof line,
                    "    MIG: jobs naming a profile waited %s (p50) / %s (p90); %zu GPUs split, "
                    "%zu made whole, %.1f GPU-h unusable while re-partitioned\n",
                    wait(r, "mig", true).c_str(), wait(r, "mig", false).c_str(), r.mig_splits,
                    r.mig_merges, r.mig_reconfigure_gpu_hours);
      out += line;
    }
    if (!r.services.empty()) {
      std::snprintf(line, sizeof line,
                    "    training tier: impact %s / %s (budgets funding no service)\n",
                    pct(r.training_impact_mean).c_str(), pct(r.training_impact_min).c_str());
      out += line;
    }
    for (const ServiceResult& sv : r.services) {
      const std::string served = sv.served < 0 ? std::string("n/a") : pct(sv.served);
      const std::string delay = sv.scale_up_delay.count == 0
                                    ? std::string("-")
                                    : short_duration(sv.scale_up_delay.p50) + " / " +
                                          short_duration(sv.scale_up_delay.p90);
      std::snprintf(line, sizeof line,
                    "    service %s: replicas available %s, min %d held %s, load served %s, "
                    "%.1f replicas wanted on average; scale-up p50/p90 %s; %zu out, %zu in, "
                    "%zu replicas preempted\n",
                    sv.name.c_str(), pct(sv.availability).c_str(), sv.min_replicas,
                    pct(sv.floor_held).c_str(), served.c_str(), sv.mean_desired, delay.c_str(),
                    sv.scale_outs, sv.scale_ins, sv.preemptions);
      out += line;
    }
    if (with_wall_time) {
      std::snprintf(
          line, sizeof line,
          "  %s: %.2f s wall, %.2f s CPU, %.2f s CPU in the core's cycle (%.0f events/s)\n",
          name.c_str(), r.wall_seconds, r.cpu_seconds, r.core_seconds,
          r.wall_seconds > 0 ? static_cast<double>(r.events_processed) / r.wall_seconds : 0.0);
      out += line;
    }
    for (const Check& c : r.checks) {
      if (!c.passed) out += "  CHECK FAILED (" + name + "): " + c.name + ": " + c.detail + "\n";
    }
  }
  return out;
}

}  // namespace allot::sim
