#include "server/telemetry.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace allot::server {

using json = nlohmann::json;

namespace {

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

}  // namespace

std::optional<GpuFit> smallest_fit(double need_gib, const core::GpuCatalog& catalog) {
  std::vector<GpuFit> options;
  // MIG profiles of an 80 GB GPU (H100, A100 80GB), smallest first; 4g.40gb has more compute
  // than 3g.40gb for the same memory, so it never is the smallest fit.
  for (const auto& [profile, gib] : std::vector<std::pair<const char*, double>>{
           {"1g.10gb", 10}, {"2g.20gb", 20}, {"3g.40gb", 40}, {"4g.40gb", 40}, {"7g.80gb", 80}}) {
    options.push_back({std::string("MIG ") + profile, gib});
  }
  for (std::size_t i = 0; i < catalog.size(); ++i) {
    const auto& m = catalog.model(static_cast<core::GpuModelId>(i));
    if (m.memory_gib > 0) options.push_back({m.name, static_cast<double>(m.memory_gib)});
  }
  // Smallest memory first; at equal memory a whole GPU model before a MIG slice, then the order
  // above (so 3g.40gb before 4g.40gb, H100 before 7g.80gb).
  std::stable_sort(options.begin(), options.end(), [](const GpuFit& a, const GpuFit& b) {
    if (a.memory_gib != b.memory_gib) return a.memory_gib < b.memory_gib;
    const bool am = a.name.rfind("MIG ", 0) == 0, bm = b.name.rfind("MIG ", 0) == 0;
    return !am && bm;
  });
  for (const auto& o : options) {
    if (o.memory_gib >= need_gib) return o;
  }
  return std::nullopt;
}

std::vector<TelemetryFlag> telemetry_flags(const store::TelemetryRecord& t, const json& spec,
                                           const core::GpuCatalog& catalog,
                                           const FlagRules& rules) {
  std::vector<TelemetryFlag> out;
  if (t.samples <= 0) return out;
  const double util = t.util_mean();
  if (t.seconds >= rules.idle_seconds && util < rules.idle_util_pct) {
    out.push_back({"idle", fmt("mean GPU use %.1f%% over %.0f minutes: if it waits on something, "
                               "cancel it and free the GPUs",
                               util, t.seconds / 60)});
  }
  if (t.seconds < rules.min_seconds) return out;
  const int per_node = spec.is_object() ? spec.value("gpus_per_node", 1) : 1;
  const double gpus = std::max(1, per_node);
  if (t.mem_total_mib > 0 && t.mem_peak_mib > 0) {
    const double peak_gib = static_cast<double>(t.mem_peak_mib) / gpus / 1024.0;
    const double have_gib = static_cast<double>(t.mem_total_mib) / gpus / 1024.0;
    auto fit = smallest_fit(peak_gib * rules.headroom, catalog);
    if (fit && fit->memory_gib < have_gib * 0.9) {
      out.push_back({"oversized-memory",
                     fmt("peak memory %.1f GiB of %.0f GiB per GPU: ", peak_gib, have_gib) +
                         fit->name +
                         fmt(" (%.0f GiB) would hold it with 10%% headroom", fit->memory_gib)});
    }
  }
  if (util < rules.input_util_pct) {
    const double cpus = spec.is_object() && spec.contains("cpus") && spec["cpus"].is_number()
                            ? spec["cpus"].get<double>()
                            : 0;
    if (t.io_mean() >= rules.input_io_wait_pct) {
      out.push_back(
          {"input-bound", fmt("GPU use %.1f%% while %.1f%% of its CPU time waits on I/O: the input "
                              "pipeline starves the GPUs (faster storage, a local cache, more "
                              "loader workers)",
                              util, t.io_mean())});
    } else if (cpus > 0 && t.cpu_mean() >= rules.cpu_pinned_fraction * cpus * 100) {
      out.push_back(
          {"input-bound", fmt("GPU use %.1f%% while its CPU use (%.0f%%) is pinned at its limit of "
                              "%g CPUs: ask for more CPUs (--cpus)",
                              util, t.cpu_mean(), cpus)});
    }
  }
  return out;
}

json telemetry_json(const store::TelemetryRecord& t) {
  return {{"run", t.run},
          {"samples", t.samples},
          {"seconds", t.seconds},
          {"gpu_seconds", t.gpu_seconds},
          {"used_gpu_seconds", t.used_gpu_seconds},
          {"utilization", t.gpu_seconds > 0 ? json(t.used_gpu_seconds / t.gpu_seconds) : json()},
          {"gpu_util_mean", t.util_mean()},
          {"gpu_util_peak", t.util_peak},
          {"mem_used_peak_mib", t.mem_peak_mib},
          {"mem_total_mib", t.mem_total_mib},
          {"cpu_pct_mean", t.cpu_mean()},
          {"io_wait_pct_mean", t.io_mean()},
          {"first_time", t.first_time},
          {"last_time", t.last_time}};
}

}  // namespace allot::server
