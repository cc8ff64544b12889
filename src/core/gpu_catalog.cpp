#include "core/gpu_catalog.h"

#include <cctype>

namespace allot::core {
namespace {
std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}
}  // namespace

GpuCatalog GpuCatalog::standard() {
  GpuCatalog c;
  c.intern("H100", 80, true);
  c.intern("H200", 141, true);
  c.intern("B200", 180, true);
  c.intern("B300", 288, true);
  c.intern("A100", 80, true);
  c.intern("L40S", 48, false);
  c.intern("V100", 32, false);
  c.intern("P100", 16, false);
  c.intern("T4", 16, false);
  return c;
}

std::optional<GpuModelId> GpuCatalog::find(std::string_view name) const {
  const std::string key = upper(name);
  for (std::size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].name == key) return static_cast<GpuModelId>(i);
  }
  return std::nullopt;
}

GpuModelId GpuCatalog::intern(std::string_view name, int memory_gib, bool mig_capable) {
  if (auto id = find(name)) return *id;
  models_.push_back(GpuModel{upper(name), memory_gib, mig_capable});
  return static_cast<GpuModelId>(models_.size() - 1);
}

}  // namespace allot::core
