#include "server/telemetry.h"

#include <algorithm>
#include <cmath>
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

std::optional<GpuFit> smallest_fit(double need_gib, const core::GpuCatalog& catalog,
                                   double gpu_gib) {
  std::vector<GpuFit> options;
  // The MIG profiles of the GPU the job ran on: those of the catalogue's GPU size nearest to its
  // memory, within 10% (an H100 of 80 GB reports 79.6 GiB; one in MIG mode reports an instance's
  // memory, which no size matches: it is already split).
  int family = 0;
  for (std::size_t i = 1; i <= catalog.mig_profile_count(); ++i) {
    for (int size : catalog.mig_profile(static_cast<core::MigProfileId>(i)).gpu_memory_gib) {
      if (std::abs(size - gpu_gib) <= 0.1 * size &&
          (family == 0 || std::abs(size - gpu_gib) < std::abs(family - gpu_gib))) {
        family = size;
      }
    }
  }
  for (std::size_t i = 1; family > 0 && i <= catalog.mig_profile_count(); ++i) {
    const auto& p = catalog.mig_profile(static_cast<core::MigProfileId>(i));
    const auto& sizes = p.gpu_memory_gib;
    // Media extensions (+me) hold the same memory as the plain profile: never the advice.
    if (p.name.find('+') != std::string::npos ||
        std::find(sizes.begin(), sizes.end(), family) == sizes.end()) {
      continue;
    }
    options.push_back(
        {"MIG " + p.name, static_cast<double>(core::mig_profile_memory_gb(p.name)), p.milli});
  }
  for (std::size_t i = 0; i < catalog.size(); ++i) {
    const auto& m = catalog.model(static_cast<core::GpuModelId>(i));
    if (m.memory_gib > 0) options.push_back({m.name, static_cast<double>(m.memory_gib)});
  }
  // Smallest memory first; at equal memory a whole GPU model before a MIG slice, and the slice
  // with less compute first (3g.40gb before 4g.40gb, 1g.20gb before 2g.20gb).
  std::stable_sort(options.begin(), options.end(), [](const GpuFit& a, const GpuFit& b) {
    if (a.memory_gib != b.memory_gib) return a.memory_gib < b.memory_gib;
    const bool am = a.milli > 0, bm = b.milli > 0;
    if (am != bm) return !am;
    return a.milli < b.milli;
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
    auto fit = smallest_fit(peak_gib * rules.headroom, catalog, have_gib);
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
