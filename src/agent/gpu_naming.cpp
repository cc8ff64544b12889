// Names the scheduler uses for what a driver reports: catalogue models and MIG profiles.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
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

namespace {

// NVIDIA's MIG profile names by model, told apart by the whole GPU's memory as the driver reports
// it (MiB): the GB in each name for a GPU instance of 1, 2, 3, 4 and 7 slices, and the larger
// 1-slice profile (1g.20gb on H100), from NVIDIA's MIG user guide.
struct MigModel {
  std::int64_t min_mib, max_mib;  // the GPU's total memory lies in [min, max)
  int gb1, gb1_large, gb2, gb3, gb4, gb7;
};
constexpr MigModel kMigModels[] = {
    {38000, 42500, 5, 10, 10, 20, 20, 40},      // A100 40GB
    {78000, 84000, 10, 20, 20, 40, 40, 80},     // A100 80GB, H100 80GB
    {90000, 96800, 12, 24, 24, 47, 47, 94},     // H100 NVL 94GB
    {96800, 100000, 12, 24, 24, 48, 48, 96},    // H100 96GB (GH200)
    {140000, 148000, 18, 35, 35, 71, 71, 141},  // H200 141GB
    {175000, 186000, 23, 45, 45, 90, 90, 180},  // B200 180GB
    {186000, 192000, 23, 47, 47, 93, 93, 186},  // GB200 186GB
};

// The GB in NVIDIA's name for an instance of `slices` with `memory_mib`, or 0 when not known.
int table_gb(int slices, std::int64_t memory_mib, std::int64_t gpu_memory_mib) {
  for (const MigModel& m : kMigModels) {
    if (gpu_memory_mib < m.min_mib || gpu_memory_mib >= m.max_mib) continue;
    switch (slices) {
      case 1: {  // the smaller or the larger 1-slice profile, whichever the memory is nearer
        const double gib = static_cast<double>(memory_mib) / 1024;
        return std::abs(gib - m.gb1) <= std::abs(gib - m.gb1_large) ? m.gb1 : m.gb1_large;
      }
      case 2:
        return m.gb2;
      case 3:
        return m.gb3;
      case 4:
        return m.gb4;
      case 7:
        return m.gb7;
      default:
        return 0;
    }
  }
  return 0;
}

}  // namespace

std::string mig_profile_name(int gpu_slices, int compute_slices, std::int64_t memory_mib,
                             std::int64_t gpu_memory_mib) {
  std::int64_t gb = table_gb(gpu_slices, memory_mib, gpu_memory_mib);
  if (gb == 0) gb = (memory_mib + 1023) / 1024;
  std::string name;
  if (compute_slices > 0 && compute_slices != gpu_slices) {
    name = std::to_string(compute_slices) + "c.";
  }
  return name + std::to_string(gpu_slices) + "g." + std::to_string(gb) + "gb";
}

}  // namespace allot::agent
