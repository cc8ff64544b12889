// nvml_probe: what the NVML backend sees on this machine, as JSON (scripts/device-check compares
// it with nvidia-smi). Usage: nvml_probe [--library PATH] [--samples N] [--interval-ms MS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "agent/gpu_backend.h"

namespace {

nlohmann::json device_json(const allot::agent::GpuDevice& d) {
  nlohmann::json mig = nlohmann::json::array();
  for (const auto& m : d.mig) {
    mig.push_back({{"uuid", m.uuid},
                   {"profile", m.profile},
                   {"milli", m.milli},
                   {"memory_mib", m.memory_mib}});
  }
  return {{"index", d.index},
          {"uuid", d.uuid},
          {"name", d.name},
          {"model", d.model},
          {"memory_mib", d.memory_mib},
          {"pci_bus_id", d.pci_bus_id},
          {"mig_enabled", d.mig_enabled},
          {"mig", mig}};
}

nlohmann::json sample_json(const allot::agent::GpuSample& s) {
  return {{"index", s.index},
          {"present", s.present},
          {"util_pct", s.util_pct},
          {"mem_used_mib", s.mem_used_mib},
          {"mem_total_mib", s.mem_total_mib},
          {"temp_c", s.temp_c},
          {"power_w", s.power_w},
          {"ecc_uncorrected", s.ecc_uncorrected},
          {"ecc_corrected", s.ecc_corrected},
          {"xids", s.xids},
          {"error", s.error}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string library = "libnvidia-ml.so.1";
  int samples = 3;
  int interval_ms = 1000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--library" && i + 1 < argc) {
      library = argv[++i];
    } else if (a == "--samples" && i + 1 < argc) {
      samples = std::atoi(argv[++i]);
    } else if (a == "--interval-ms" && i + 1 < argc) {
      interval_ms = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: nvml_probe [--library PATH] [--samples N] [--interval-ms MS]\n");
      return 2;
    }
  }
  auto backend = allot::agent::make_nvml_backend(library);
  if (!backend.ok()) {
    std::cout << nlohmann::json{{"error", backend.error().message()}}.dump() << "\n";
    return 1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto devices = backend.value()->discover();
  if (!devices.ok()) {
    std::cout << nlohmann::json{{"error", devices.error().message()}}.dump() << "\n";
    return 1;
  }
  const double discover_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json out{{"backend", backend.value()->name()},
                     {"discover_ms", discover_ms},
                     {"devices", nlohmann::json::array()},
                     {"samples", nlohmann::json::array()}};
  for (const auto& d : devices.value()) out["devices"].push_back(device_json(d));
  double sample_ms_max = 0;
  for (int n = 0; n < samples; ++n) {
    if (n > 0) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    const auto s0 = std::chrono::steady_clock::now();
    auto s = backend.value()->sample(n);
    sample_ms_max = std::max(
        sample_ms_max,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count());
    if (!s.ok()) {
      out["samples"].push_back({{"error", s.error().message()}});
      continue;
    }
    nlohmann::json one = nlohmann::json::array();
    for (const auto& g : s.value()) one.push_back(sample_json(g));
    out["samples"].push_back(one);
  }
  out["sample_ms_max"] = sample_ms_max;
  std::cout << out.dump(2) << "\n";
  return 0;
}
