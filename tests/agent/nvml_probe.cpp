// nvml_probe: what the NVML backend sees on this machine (scripts/device-check compares it with
// nvidia-smi). Needs nothing but the agent's NVML backend, so it also builds with a bare g++.
//
//   nvml_probe [--library PATH] [--samples N] [--interval-ms MS] [--csv]
//
// Prints discovery and every sample as JSON; with --csv, one line per GPU instead:
//   index,uuid,name,memory_mib,util_min,util_max,mem_used_mib,temp_c,power_w,present,mig,xids
// (util_min/max over the samples, the other readings from the last one; -1 = unknown), then
// "# sample_ms_max=<ms> discover_ms=<ms>".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "agent/gpu_backend.h"

namespace {

using allot::agent::GpuDevice;
using allot::agent::GpuSample;

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string device_json(const GpuDevice& d) {
  std::string mig;
  for (const auto& m : d.mig) {
    mig += std::string(mig.empty() ? "" : ", ") + "{\"uuid\": " + quoted(m.uuid) +
           ", \"profile\": " + quoted(m.profile) + ", \"milli\": " + std::to_string(m.milli) +
           ", \"memory_mib\": " + std::to_string(m.memory_mib) + "}";
  }
  return "{\"index\": " + std::to_string(d.index) + ", \"uuid\": " + quoted(d.uuid) +
         ", \"name\": " + quoted(d.name) + ", \"model\": " + quoted(d.model) +
         ", \"memory_mib\": " + std::to_string(d.memory_mib) +
         ", \"pci_bus_id\": " + quoted(d.pci_bus_id) +
         ", \"mig_enabled\": " + (d.mig_enabled ? "true" : "false") + ", \"mig\": [" + mig + "]}";
}

std::string xids_text(const std::vector<int>& xids, const char* sep) {
  std::string out;
  for (int x : xids) out += std::string(out.empty() ? "" : sep) + std::to_string(x);
  return out;
}

std::string sample_json(const GpuSample& s) {
  std::string mig;
  for (const auto& m : s.mig) {
    mig += std::string(mig.empty() ? "" : ", ") + "{\"uuid\": " + quoted(m.uuid) +
           ", \"mem_used_mib\": " + std::to_string(m.mem_used_mib) +
           ", \"mem_total_mib\": " + std::to_string(m.mem_total_mib) + "}";
  }
  return "{\"index\": " + std::to_string(s.index) +
         ", \"present\": " + (s.present ? "true" : "false") + ", \"util_pct\": " + num(s.util_pct) +
         ", \"mem_used_mib\": " + std::to_string(s.mem_used_mib) +
         ", \"mem_total_mib\": " + std::to_string(s.mem_total_mib) +
         ", \"temp_c\": " + num(s.temp_c) + ", \"power_w\": " + num(s.power_w) +
         ", \"ecc_uncorrected\": " + std::to_string(s.ecc_uncorrected) +
         ", \"ecc_corrected\": " + std::to_string(s.ecc_corrected) + ", \"xids\": [" +
         xids_text(s.xids, ", ") + "], \"mig\": [" + mig + "], \"error\": " + quoted(s.error) + "}";
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string library = "libnvidia-ml.so.1";
  int samples = 3;
  int interval_ms = 1000;
  bool csv = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--library" && i + 1 < argc) {
      library = argv[++i];
    } else if (a == "--samples" && i + 1 < argc) {
      samples = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--interval-ms" && i + 1 < argc) {
      interval_ms = std::atoi(argv[++i]);
    } else if (a == "--csv") {
      csv = true;
    } else {
      std::fprintf(stderr,
                   "usage: nvml_probe [--library PATH] [--samples N] [--interval-ms MS] [--csv]\n");
      return 2;
    }
  }
  auto fail = [&](const std::string& why) {
    if (csv) {
      std::fprintf(stderr, "nvml_probe: %s\n", why.c_str());
    } else {
      std::printf("{\"error\": %s}\n", quoted(why).c_str());
    }
    return 1;
  };
  auto backend = allot::agent::make_nvml_backend(library);
  if (!backend.ok()) return fail(backend.error().message());
  const auto t0 = std::chrono::steady_clock::now();
  auto devices = backend.value()->discover();
  if (!devices.ok()) return fail(devices.error().message());
  const double discover_ms = ms_since(t0);

  std::vector<std::vector<GpuSample>> all;
  std::vector<std::string> errors;
  double sample_ms_max = 0;
  for (int n = 0; n < samples; ++n) {
    if (n > 0) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    const auto s0 = std::chrono::steady_clock::now();
    auto s = backend.value()->sample(n);
    sample_ms_max = std::max(sample_ms_max, ms_since(s0));
    if (!s.ok()) {
      errors.push_back(s.error().message());
      continue;
    }
    all.push_back(s.value());
  }
  if (all.empty()) return fail("no sample could be taken: " + errors.front());

  if (csv) {
    const std::vector<GpuSample>& last = all.back();
    for (const GpuDevice& d : devices.value()) {
      double lo = -1, hi = -1;
      std::vector<int> xids;
      const GpuSample* mine = nullptr;
      for (const auto& one : all) {
        for (const GpuSample& s : one) {
          if (s.index != d.index) continue;
          if (s.util_pct >= 0) {
            lo = lo < 0 ? s.util_pct : std::min(lo, s.util_pct);
            hi = std::max(hi, s.util_pct);
          }
          xids.insert(xids.end(), s.xids.begin(), s.xids.end());
        }
      }
      for (const GpuSample& s : last) {
        if (s.index == d.index) mine = &s;
      }
      if (!mine) continue;
      std::printf("%d,%s,%s,%lld,%s,%s,%lld,%s,%s,%d,%zu,%s\n", d.index, d.uuid.c_str(),
                  d.name.c_str(), static_cast<long long>(d.memory_mib), num(lo).c_str(),
                  num(hi).c_str(), static_cast<long long>(mine->mem_used_mib),
                  num(mine->temp_c).c_str(), num(mine->power_w).c_str(), mine->present ? 1 : 0,
                  d.mig.size(), xids_text(xids, " ").c_str());
    }
    std::printf("# sample_ms_max=%.3f discover_ms=%.3f\n", sample_ms_max, discover_ms);
    return 0;
  }
  std::string out = "{\"backend\": " + quoted(backend.value()->name()) +
                    ", \"discover_ms\": " + num(discover_ms) + ",\n \"devices\": [";
  for (std::size_t i = 0; i < devices.value().size(); ++i) {
    out += std::string(i ? ",\n  " : "\n  ") + device_json(devices.value()[i]);
  }
  out += "],\n \"samples\": [";
  for (std::size_t n = 0; n < all.size(); ++n) {
    out += std::string(n ? ",\n  [" : "\n  [");
    for (std::size_t i = 0; i < all[n].size(); ++i) {
      out += std::string(i ? ",\n   " : "\n   ") + sample_json(all[n][i]);
    }
    out += "]";
  }
  out += "],\n \"sample_errors\": [";
  for (std::size_t i = 0; i < errors.size(); ++i) out += (i ? ", " : "") + quoted(errors[i]);
  out += "],\n \"sample_ms_max\": " + num(sample_ms_max) + "}\n";
  std::fputs(out.c_str(), stdout);
  return 0;
}
