// The catalogue of GPU models the scheduler knows, with the memory each has, and the MIG profiles
// (docs/policy.md section 7.3, "MIG instances") a GPU of each can be split into.
//
// Thread-safety: none; owned by one Scheduler and used by one thread at a time, like all of
// src/core (which has no threads, I/O or clock).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace allot::core {

struct GpuModel {
  std::string name;  // canonical upper-case name, e.g. "H100"
  int memory_gib = 0;
  bool mig_capable = false;  // can be split into MIG instances
};

// A MIG profile as NVIDIA names it ("1g.18gb", "3g.71gb", "1g.18gb+me", "1c.3g.71gb"): a GPU
// instance of `gpu_slices` of the GPU's 7 slices. Its share of the GPU (`milli`) is its compute
// slices over 7, as the agent counts it (1 of 7 = 142); a 7-slice instance is 1000.
struct MigProfile {
  std::string name;  // lower case, as the driver names it
  Milli milli = 0;
  // Models whose GPUs offer the profile (NVIDIA's MIG user guide); empty for a profile learnt
  // from an agent's report only (intern_mig_profile), which no request can name.
  std::vector<GpuModelId> models;
  // Memory of the GPUs that offer it (GiB, as the catalogue's models state it: 80 for an H100 of
  // 80 GB); one profile name may be offered by GPUs of several sizes (1g.12gb: 94 and 96 GB).
  std::vector<int> gpu_memory_gib;
};

// The memory a MIG profile's name states, in GB ("3g.40gb": 40; "1g.10gb+me": 10); 0 if none.
int mig_profile_memory_gb(std::string_view name);

class GpuCatalog {
 public:
  // A catalogue with the common data-centre models (H100, H200, B200, B300, A100, ...) and the
  // MIG profiles of A100, H100, H200 and B200.
  static GpuCatalog standard();

  // Looks a model up by name, case-insensitively.
  std::optional<GpuModelId> find(std::string_view name) const;
  // Returns the model's id, adding it (with the memory given) if it is not known yet.
  GpuModelId intern(std::string_view name, int memory_gib = 0, bool mig_capable = false);
  const GpuModel& model(GpuModelId id) const { return models_.at(id); }
  std::size_t size() const { return models_.size(); }

  // A MIG profile by name, case-insensitively (ids start at 1).
  std::optional<MigProfileId> find_mig_profile(std::string_view name) const;
  // The profile's id, adding it with `milli` and no models if it is not known (an agent reported
  // an instance of a profile the catalogue does not list).
  MigProfileId intern_mig_profile(std::string_view name, Milli milli);
  const MigProfile& mig_profile(MigProfileId id) const { return mig_profiles_.at(id - 1); }
  std::size_t mig_profile_count() const { return mig_profiles_.size(); }
  // Names of the profiles a request may name (those with models), in catalogue order.
  std::vector<std::string> mig_profile_names() const;

 private:
  void add_mig_profiles(GpuModelId model, int gpu_memory_gib,
                        std::initializer_list<const char*> names);

  std::vector<GpuModel> models_;
  std::vector<MigProfile> mig_profiles_;
};

}  // namespace allot::core
