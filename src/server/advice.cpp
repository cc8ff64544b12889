#include "server/advice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "server/telemetry.h"

namespace allot::server {

using json = nlohmann::json;

namespace {

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

int int_of(const json& spec, const char* key, int fallback) {
  if (!spec.is_object()) return fallback;
  auto it = spec.find(key);
  return it != spec.end() && it->is_number_integer() ? it->get<int>() : fallback;
}

double cpus_of(const json& spec) {
  if (!spec.is_object()) return 0;
  auto it = spec.find("cpus");
  return it != spec.end() && it->is_number() ? it->get<double>() : 0;
}

// "8 GPUs", "1 GPU", "0.5 GPU".
std::string gpus_text(double gpus) {
  return fmt(gpus == std::floor(gpus) ? "%.0f" : "%g", gpus) + (gpus > 1 ? " GPUs" : " GPU");
}

// "45 s", "12 min", "3.5 h".
std::string span_text(double seconds) {
  if (seconds < 120) return fmt("%.0f s", seconds);
  if (seconds < 120 * 60) return fmt("%.0f min", seconds / 60);
  return fmt("%.1f h", seconds / 3600);
}

}  // namespace

IntervalClass classify_interval(double gpu_util_pct, double cpu_pct, double io_wait_pct,
                                double cpu_pressure_pct, double io_pressure_pct, double cpus) {
  using R = AdviceRules;
  IntervalClass c;
  const double cpu_limit_pct = (cpus > 0 ? cpus : 1.0) * 100;
  const bool pipeline_busy = std::max(io_wait_pct, io_pressure_pct) >= R::kStarvedIoPct ||
                             cpu_pct >= R::kCpuSaturatedFraction * cpu_limit_pct ||
                             cpu_pressure_pct >= R::kStarvedCpuPressurePct;
  if (gpu_util_pct < R::kStarvedUtilPct && pipeline_busy) {
    c.starved = true;
  } else if (gpu_util_pct < R::kIdleUtilPct) {
    c.idle = true;
  }
  return c;
}

double requested_gpus(const json& spec) {
  const int nodes = std::max(1, int_of(spec, "nodes", 1));
  const int per_node = std::max(1, int_of(spec, "gpus_per_node", 1));
  const int milli = int_of(spec, "gpu_milli", 1000);
  return nodes * per_node * std::clamp(milli, 1, 1000) / 1000.0;
}

std::vector<AdviceItem> job_advice(const store::TelemetryRecord& t, const json& spec,
                                   const core::GpuCatalog& catalog, const AdviceRules& rules) {
  using R = AdviceRules;
  std::vector<AdviceItem> out;
  if (t.samples <= 0 || t.seconds < rules.min_seconds || t.gpu_seconds <= 0) return out;
  if (t.idle_seconds >= R::kIdleShare * t.seconds) {
    out.push_back({"idle",
                   fmt("its GPUs were idle (below %.0f%% use) for ", R::kIdleUtilPct) +
                       span_text(t.idle_seconds) + " of " + span_text(t.seconds) +
                       " measured: if it waits on something, hold or cancel it and free them",
                   ""});
  }
  if (t.starved_seconds >= R::kStarvedShare * t.seconds) {
    const double cpus = cpus_of(spec);
    std::string why = fmt("CPU %.0f%% (100 = one core", t.cpu_mean());
    why += cpus > 0 ? fmt("; limit %g CPUs)", cpus) : std::string("; no CPU limit)");
    why += fmt(", I/O wait %.0f%%", t.io_mean());
    out.push_back(
        {"starved",
         "its GPUs were starved by its data pipeline for " + span_text(t.starved_seconds) + " of " +
             span_text(t.seconds) + fmt(" (GPU use %.0f%% mean; ", t.util_mean()) + why +
             "): more loader workers or CPUs (--cpus), a local copy of the data, faster storage",
         ""});
  }
  if (t.mem_total_mib > 0 && t.mem_peak_mib > 0 &&
      static_cast<double>(t.mem_peak_mib) <=
          R::kMemoryShare * static_cast<double>(t.mem_total_mib)) {
    // The summary's memory is per node (a gang's nodes report apart): so is the suggestion.
    const int per_node = std::max(1, int_of(spec, "gpus_per_node", 1));
    const double peak_gib = static_cast<double>(t.mem_peak_mib) / 1024.0;
    const double total_gib = static_cast<double>(t.mem_total_mib) / 1024.0;
    const double per_gpu_gib = total_gib / per_node;
    const std::string used = fmt("peak GPU memory %.1f GiB of %.0f GiB (%.0f%%)", peak_gib,
                                 total_gib, 100 * peak_gib / total_gib);
    const int fewer =
        static_cast<int>(std::ceil(peak_gib * R::kHeadroom / std::max(per_gpu_gib, 1e-9)));
    if (per_node > 1 && fewer < per_node) {
      const std::string s = gpus_text(std::max(1, fewer));
      out.push_back({"oversized-memory",
                     used + fmt(" on %.0f GPUs a node: ", per_node) + s +
                         " would hold it with 10% headroom (if it does not need their compute)",
                     s});
    } else if (auto fit = smallest_fit(peak_gib / per_node * R::kHeadroom, catalog, per_gpu_gib);
               fit && fit->memory_gib < per_gpu_gib * 0.9) {
      out.push_back({"oversized-memory",
                     used + ": " + fit->name +
                         fmt(" (%.0f GiB) would hold it with 10%% headroom", fit->memory_gib),
                     fit->name});
    }
  }
  return out;
}

json advice_report(const std::vector<MeasuredJob>& jobs, const core::GpuCatalog& catalog,
                   const AdviceRules& rules) {
  struct Totals {
    int measured = 0, named = 0, idle = 0, starved = 0, oversized = 0;
    double gpu_seconds = 0, idle_gpu_seconds = 0, starved_gpu_seconds = 0;
  };
  std::map<std::string, Totals> budgets;
  json list = json::array();
  for (const auto& m : jobs) {
    const auto& t = m.telemetry;
    const json spec = json::parse(m.job.spec_json, nullptr, false);
    auto advice = job_advice(t, spec, catalog, rules);
    Totals& b = budgets[m.job.budget];
    ++b.measured;
    b.gpu_seconds += t.gpu_seconds;
    if (t.seconds > 0) {
      b.idle_gpu_seconds += t.gpu_seconds * std::min(1.0, t.idle_seconds / t.seconds);
      b.starved_gpu_seconds += t.gpu_seconds * std::min(1.0, t.starved_seconds / t.seconds);
    }
    if (advice.empty()) continue;
    ++b.named;
    json items = json::array();
    for (const auto& a : advice) {
      if (a.reason == "idle") ++b.idle;
      if (a.reason == "starved") ++b.starved;
      if (a.reason == "oversized-memory") ++b.oversized;
      json i = {{"reason", a.reason}, {"hint", a.hint}};
      if (!a.suggestion.empty()) i["suggestion"] = a.suggestion;
      items.push_back(std::move(i));
    }
    list.push_back({{"id", m.job.id},
                    {"name", m.job.name},
                    {"owner", m.job.owner},
                    {"budget", m.job.budget},
                    {"state", m.job.state},
                    {"gpus", requested_gpus(spec)},
                    {"telemetry", telemetry_json(t)},
                    {"advice", std::move(items)}});
  }
  json per_budget = json::array();
  for (const auto& [path, b] : budgets) {
    per_budget.push_back({{"budget", path},
                          {"jobs_measured", b.measured},
                          {"jobs_named", b.named},
                          {"idle", b.idle},
                          {"starved", b.starved},
                          {"oversized_memory", b.oversized},
                          {"gpu_hours", b.gpu_seconds / 3600},
                          {"idle_gpu_hours", b.idle_gpu_seconds / 3600},
                          {"starved_gpu_hours", b.starved_gpu_seconds / 3600}});
  }
  return {{"jobs", std::move(list)}, {"budgets", std::move(per_budget)}};
}

std::string submission_hint(const json& spec, const std::vector<MeasuredJob>& recent,
                            const AdviceRules& rules) {
  using R = AdviceRules;
  auto shape = [](const json& s) {
    return std::tuple{int_of(s, "nodes", 1), int_of(s, "gpus_per_node", 1),
                      int_of(s, "gpu_milli", 1000)};
  };
  const auto want = shape(spec);
  int n = 0;
  double worst_share = 0, per_gpu_mib = 0, peak_mib = 0;
  for (const auto& m : recent) {
    const auto& t = m.telemetry;
    if (t.seconds < rules.min_seconds || t.mem_total_mib <= 0) continue;
    const json s = json::parse(m.job.spec_json, nullptr, false);
    if (shape(s) != want) continue;
    const double share = static_cast<double>(t.mem_peak_mib) / static_cast<double>(t.mem_total_mib);
    if (share > R::kMemoryShare) return "";  // one of them used its memory: no hint
    worst_share = std::max(worst_share, share);
    peak_mib = std::max(peak_mib, static_cast<double>(t.mem_peak_mib));
    per_gpu_mib = static_cast<double>(t.mem_total_mib) / std::max(1, std::get<1>(want));
    if (++n == R::kHintJobs) break;
  }
  if (n < R::kHintMinJobs) return "";
  const double asked = requested_gpus(spec);
  const int worth = std::max(1, static_cast<int>(std::ceil(peak_mib / per_gpu_mib)));
  std::string h = fmt("your budget's last %.0f jobs of ", n) + gpus_text(asked) +
                  fmt(" used at most %.0f%% of their GPU memory (peak %.1f GiB", 100 * worst_share,
                      peak_mib / 1024) +
                  (std::get<0>(want) > 1 ? " a node" : "");
  if (asked > 1) h += ", " + std::to_string(worth) + (worth > 1 ? " GPUs'" : " GPU's") + " worth";
  h += ")";
  return h + ": fewer GPUs or a MIG slice may do (allot advise)";
}

}  // namespace allot::server
