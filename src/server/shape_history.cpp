#include "server/shape_history.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace allot::server {

using json = nlohmann::json;

std::string ShapeHistory::key(const std::string& budget, const std::string& spec_json) {
  const json s = json::parse(spec_json, nullptr, false);
  auto num = [&](const char* k, int fallback) {
    return s.is_object() && s.contains(k) && s[k].is_number_integer() ? s[k].get<int>() : fallback;
  };
  return budget + " " + std::to_string(num("nodes", 1)) + "x" +
         std::to_string(num("gpus_per_node", 1)) + "x" + std::to_string(num("gpu_milli", 1000));
}

void ShapeHistory::add(const store::TelemetryRecord& d, const std::string& spec_json) {
  const std::string k = key(d.budget, spec_json);
  std::lock_guard lock(mu_);
  auto [it, fresh] = entries_.try_emplace(k);
  Entry& e = it->second;
  if (fresh) {
    e.age = by_age_.insert(by_age_.end(), k);
    if (entries_.size() > kKeys) {
      entries_.erase(by_age_.front());
      by_age_.pop_front();
    }
  } else {
    by_age_.splice(by_age_.end(), by_age_, e.age);
  }
  auto [jt, added] = e.jobs.try_emplace(d.job);
  MeasuredJob& m = jt->second;
  if (added) {
    m.job.id = d.job;
    m.job.budget = d.budget;
    m.job.spec_json = spec_json;
    m.telemetry.job = d.job;
    m.telemetry.budget = d.budget;
    if (e.jobs.size() > kJobs) {
      e.jobs.erase(std::prev(e.jobs.end()));  // the oldest (it may be this one)
      if (!e.jobs.count(d.job)) return;
    }
  }
  auto& t = m.telemetry;
  t.samples += d.samples;
  t.seconds += d.seconds;
  t.mem_peak_mib = std::max(t.mem_peak_mib, d.mem_peak_mib);
  t.mem_total_mib = std::max(t.mem_total_mib, d.mem_total_mib);
}

std::vector<MeasuredJob> ShapeHistory::recent(const std::string& budget,
                                              const std::string& spec_json) const {
  const std::string k = key(budget, spec_json);
  std::lock_guard lock(mu_);
  auto it = entries_.find(k);
  if (it == entries_.end()) return {};
  std::vector<MeasuredJob> out;
  for (const auto& [id, m] : it->second.jobs) out.push_back(m);
  return out;
}

}  // namespace allot::server
