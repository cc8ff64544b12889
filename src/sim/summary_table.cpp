// The terminal summary: one row per policy.
#include <cmath>
#include <cstdio>

#include "sim/reports.h"

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

std::string summary_table(const Report& rep, bool with_wall_time) {
  std::string out;
  char line[512];
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
  std::snprintf(line, sizeof line, "%-22s %6s %15s %16s %6s %7s %7s %7s %7s %7s %8s %6s %5s%s\n",
                "policy", "avail", "occ (alloc)", "impact mean/min", ">=95%", "util", "all p50",
                "dbg p90", "bat p90", "lrg p90", "preempt", "frag", "jain",
                with_wall_time ? "   wall" : "");
  out += line;
  for (const RunResult& r : rep.runs) {
    const std::string name = r.label.empty() ? r.policy : r.policy + " " + r.label;
    char occ[32], impact[32], at95[16];
    std::snprintf(occ, sizeof occ, "%s (%s)", pct(r.occupancy).c_str(),
                  pct(r.occupancy_allocated).c_str());
    std::snprintf(impact, sizeof impact, "%s/%s", pct(r.impact_mean).c_str(),
                  pct(r.impact_min).c_str());
    std::snprintf(at95, sizeof at95, "%zu/%zu", r.budgets_at_95, r.budgets_owed);
    char wall[16] = "";
    if (with_wall_time) std::snprintf(wall, sizeof wall, " %6.2fs", r.wall_seconds);
    std::snprintf(line, sizeof line,
                  "%-22s %6s %15s %16s %6s %7s %7s %7s %7s %7s %8zu %6s %5.3f%s\n", name.c_str(),
                  pct(r.availability).c_str(), occ, impact, at95, pct(r.utilization).c_str(),
                  wait(r, "all", true).c_str(), wait(r, "debug", false).c_str(),
                  wait(r, "batch", false).c_str(), wait(r, "large", false).c_str(), r.preemptions,
                  pct(r.fragmentation).c_str(), r.jain_fairness, wall);
    out += line;
  }
  for (const RunResult& r : rep.runs) {
    std::snprintf(line, sizeof line,
                  "  %s: %zu of %zu jobs completed, %zu pending and %zu running at the end; "
                  "%zu preempted, %zu drained, %zu lost to node failures (%.0f GPU-h lost); "
                  "%llu cycles, %llu events\n",
                  r.policy.c_str(), r.completed, r.jobs, r.pending_at_end, r.running_at_end,
                  r.preemptions, r.drain_stops, r.node_down_stops, r.lost_gpu_hours,
                  static_cast<unsigned long long>(r.cycles),
                  static_cast<unsigned long long>(r.events_processed));
    out += line;
    if (with_wall_time) {
      std::snprintf(line, sizeof line, "  %s: %.2f s wall, %.2f s of it in the core's cycle\n",
                    r.policy.c_str(), r.wall_seconds, r.core_seconds);
    }
    out += line;
    for (const Check& c : r.checks) {
      if (!c.passed) out += "  CHECK FAILED (" + r.policy + "): " + c.name + ": " + c.detail + "\n";
    }
  }
  return out;
}

}  // namespace allot::sim
