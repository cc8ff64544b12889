#include "core/gpu_catalog.h"

#include <algorithm>
#include <cctype>

namespace allot::core {
namespace {
std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}
std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A profile's compute share from its name: "Ng.*" is N of 7 slices, "Cc.Ng.*" C of them.
Milli milli_of_name(std::string_view name) {
  auto number_before = [&](char unit) -> int {
    const auto at = name.find(unit);
    if (at == std::string_view::npos || at == 0) return 0;
    std::size_t from = at;
    while (from > 0 && std::isdigit(static_cast<unsigned char>(name[from - 1]))) --from;
    return from == at ? 0 : std::stoi(std::string(name.substr(from, at - from)));
  };
  const int compute = name.find('c') < name.find('g') ? number_before('c') : number_before('g');
  return compute >= 7 ? kWholeGpu : compute * kWholeGpu / 7;
}
}  // namespace

GpuCatalog GpuCatalog::standard() {
  GpuCatalog c;
  const auto h100 = c.intern("H100", 80, true);
  const auto h200 = c.intern("H200", 141, true);
  const auto b200 = c.intern("B200", 180, true);
  c.intern("B300", 288, true);  // its MIG profiles are not in the catalogue yet
  const auto a100 = c.intern("A100", 80, true);
  c.intern("L40S", 48, false);
  c.intern("V100", 32, false);
  c.intern("P100", 16, false);
  c.intern("T4", 16, false);
  // NVIDIA's MIG user guide, "Supported MIG Profiles": the GPU-instance profiles of each model.
  c.add_mig_profiles(
      h100, 80, {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"});
  // H100 NVL (94 GB) and the 96 GB H100 are the catalogue's H100 too.
  c.add_mig_profiles(
      h100, 94, {"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"});
  c.add_mig_profiles(
      h100, 96, {"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb"});
  c.add_mig_profiles(
      h200, 141, {"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"});
  c.add_mig_profiles(
      b200, 180, {"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"});
  // A100 80 GB, then the 40 GB one, whose 1g.10gb shares the name but not the size: 2 of its 8
  // memory slices.
  c.add_mig_profiles(
      a100, 80, {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"});
  c.add_mig_profiles(
      a100, 40, {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"});
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

std::optional<MigProfileId> GpuCatalog::find_mig_profile(std::string_view name) const {
  const std::string key = lower(name);
  for (std::size_t i = 0; i < mig_profiles_.size(); ++i) {
    if (mig_profiles_[i].name == key) return static_cast<MigProfileId>(i + 1);
  }
  return std::nullopt;
}

MigProfileId GpuCatalog::intern_mig_profile(std::string_view name, Milli milli) {
  if (auto id = find_mig_profile(name)) return *id;
  mig_profiles_.push_back(MigProfile{lower(name), milli, {}, {}});
  return static_cast<MigProfileId>(mig_profiles_.size());
}

std::vector<std::string> GpuCatalog::mig_profile_names() const {
  std::vector<std::string> out;
  for (const auto& p : mig_profiles_) {
    if (!p.models.empty()) out.push_back(p.name);
  }
  return out;
}

void GpuCatalog::add_mig_profiles(GpuModelId model, int gpu_memory_gib,
                                  std::initializer_list<const char*> names) {
  for (const char* n : names) {
    const MigProfileId id = intern_mig_profile(n, milli_of_name(n));
    MigProfile& p = mig_profiles_[id - 1];
    if (std::find(p.models.begin(), p.models.end(), model) == p.models.end()) {
      p.models.push_back(model);
    }
    auto& sizes = p.gpu_memory_gib;
    if (std::find(sizes.begin(), sizes.end(), gpu_memory_gib) == sizes.end()) {
      sizes.push_back(gpu_memory_gib);
    }
  }
}

int mig_profile_memory_gb(std::string_view name) {
  const auto unit = name.find("gb");
  const auto dot = name.rfind('.', unit);
  if (unit == std::string_view::npos || dot == std::string_view::npos || dot + 1 >= unit) return 0;
  int gb = 0;
  for (std::size_t i = dot + 1; i < unit; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i])) || gb > 100000) return 0;
    gb = gb * 10 + (name[i] - '0');
  }
  return gb;
}

}  // namespace allot::core
