#include "server/telemetry_series.h"

#include <algorithm>

namespace allot::server {

void TelemetrySeries::add(core::JobId job, int run, const std::string& node, core::Time time,
                          double gpu_util_pct, std::int64_t mem_used_mib,
                          std::int64_t mem_total_mib) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = jobs_.try_emplace(job);
  Series& s = it->second;
  if (fresh) {
    s.age = by_age_.insert(by_age_.end(), job);
    if (jobs_.size() > kJobs) {
      jobs_.erase(by_age_.front());
      by_age_.pop_front();
    }
  } else {
    by_age_.splice(by_age_.end(), by_age_, s.age);
  }
  if (run < s.run) return;  // a late report of an earlier run
  if (run > s.run) {
    s.run = run;
    s.points.clear();
    s.newest.clear();
  }
  const NodeReport report{node, gpu_util_pct, mem_used_mib, mem_total_mib};
  if (!s.points.empty() && s.points.back().time == time) {
    // The same second: this node's report joins the point, or replaces its earlier one.
    auto same = std::find_if(s.newest.begin(), s.newest.end(),
                             [&](const NodeReport& r) { return r.node == node; });
    if (same != s.newest.end()) {
      *same = report;
    } else {
      s.newest.push_back(report);
    }
    // The mean of the nodes' means, their memory summed.
    TelemetryPoint& p = s.points.back();
    p = TelemetryPoint{time, 0, 0, 0, static_cast<int>(s.newest.size())};
    for (const NodeReport& r : s.newest) {
      p.gpu_util_pct += r.gpu_util_pct / static_cast<double>(s.newest.size());
      p.mem_used_mib += r.mem_used_mib;
      p.mem_total_mib += r.mem_total_mib;
    }
    return;
  }
  if (!s.points.empty() && s.points.back().time > time) return;  // out of order: dropped
  s.points.push_back({time, gpu_util_pct, mem_used_mib, mem_total_mib, 1});
  s.newest.assign(1, report);
  if (s.points.size() > kPoints) s.points.pop_front();
}

std::vector<TelemetryPoint> TelemetrySeries::points(core::JobId job, int run) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.run != run) return {};
  return {it->second.points.begin(), it->second.points.end()};
}

}  // namespace allot::server
