// Names the scheduler uses for what a driver reports: catalogue models and MIG profiles.
#include <cctype>
#include <string>

#include "agent/gpu_backend.h"
#include "core/gpu_catalog.h"

namespace allot::agent {

std::string catalog_model_name(const std::string& driver_name) {
  static const core::GpuCatalog catalog = core::GpuCatalog::standard();
  // The model is one word of the driver's name: "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB".
  std::string word;
  auto known = [&]() -> bool {
    if (word.empty()) return false;
    if (auto id = catalog.find(word)) {
      word = catalog.model(*id).name;
      return true;
    }
    word.clear();
    return false;
  };
  for (char c : driver_name) {
    if (c == ' ' || c == '-') {
      if (known()) return word;
    } else {
      word += c;
    }
  }
  if (known()) return word;
  std::string out;
  for (char c : driver_name) {
    out += c == ' ' ? '-' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string mig_profile_name(int gpu_slices, int compute_slices, std::int64_t memory_mib) {
  const std::int64_t gib = (memory_mib + 1023) / 1024;
  std::string name;
  if (compute_slices > 0 && compute_slices != gpu_slices) {
    name = std::to_string(compute_slices) + "c.";
  }
  return name + std::to_string(gpu_slices) + "g." + std::to_string(gib) + "gb";
}

}  // namespace allot::agent
