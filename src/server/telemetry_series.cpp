#include "server/telemetry_series.h"

namespace allot::server {

void TelemetrySeries::add(core::JobId job, int run, core::Time time, double gpu_util_pct,
                          std::int64_t mem_used_mib, std::int64_t mem_total_mib) {
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
  }
  if (!s.points.empty() && s.points.back().time == time) {
    // Another node of the same run: the mean of the nodes' means, their memory summed.
    auto& p = s.points.back();
    p.gpu_util_pct = (p.gpu_util_pct * p.reports + gpu_util_pct) / (p.reports + 1);
    p.mem_used_mib += mem_used_mib;
    p.mem_total_mib += mem_total_mib;
    ++p.reports;
    return;
  }
  if (!s.points.empty() && s.points.back().time > time) return;  // out of order: dropped
  s.points.push_back({time, gpu_util_pct, mem_used_mib, mem_total_mib, 1});
  if (s.points.size() > kPoints) s.points.pop_front();
}

std::vector<TelemetryPoint> TelemetrySeries::points(core::JobId job, int run) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end() || it->second.run != run) return {};
  return {it->second.points.begin(), it->second.points.end()};
}

}  // namespace allot::server
