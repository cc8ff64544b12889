#include "agent/nvml_mig.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <utility>

#include "agent/gpu_backend.h"
#include "core/gpu_catalog.h"
#include "core/mig_geometry.h"

namespace allot::agent::nvml {
namespace {

template <typename F>
F symbol(void* library, const char* name) {
  return reinterpret_cast<F>(dlsym(library, name));
}

std::string describe(const MigFunctions& f, nvmlReturn_t rc) {
  const char* text = f.error_string ? f.error_string(rc) : nullptr;
  return std::string(text && *text ? text : "unknown error") + " (NVML error " +
         std::to_string(rc) + ")";
}

// "<call> failed: <the driver's words>", with what an operator can do about the usual causes.
core::Error failed(const MigFunctions& f, const std::string& call, nvmlReturn_t rc) {
  std::string why = call + " failed: " + describe(f, rc);
  if (rc == NVML_ERROR_NO_PERMISSION) why += ": re-partitioning MIG needs root";
  if (rc == NVML_ERROR_IN_USE) why += ": a process still uses the GPU";
  return core::Error{"mig", why};
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// The name of the first function the operation needs that the library lacks ("" if none).
std::string missing_function(const MigFunctions& f, bool creating) {
  const std::pair<const char*, bool> needed[] = {
      {"nvmlDeviceGetMigMode", f.get_mode != nullptr},
      {"nvmlDeviceSetMigMode", f.set_mode != nullptr},
      {"nvmlDeviceGetGpuInstanceProfileInfoV",
       f.gi_profile_v != nullptr || f.gi_profile != nullptr},
      {"nvmlDeviceGetGpuInstances", f.gpu_instances != nullptr},
      {"nvmlGpuInstanceDestroy", f.destroy_gpu_instance != nullptr},
      {"nvmlGpuInstanceGetComputeInstanceProfileInfoV",
       f.ci_profile_v != nullptr || f.ci_profile != nullptr},
      {"nvmlGpuInstanceGetComputeInstances", f.compute_instances != nullptr},
      {"nvmlComputeInstanceDestroy", f.destroy_compute_instance != nullptr},
      {"nvmlDeviceCreateGpuInstanceWithPlacement", !creating || f.create_gpu_instance != nullptr},
      {"nvmlGpuInstanceCreateComputeInstance", !creating || f.create_compute_instance != nullptr},
  };
  for (const auto& [name, ok] : needed) {
    if (!ok) return name;
  }
  return "";
}

struct GpuInstanceProfile {
  unsigned index = 0;  // NVML_GPU_INSTANCE_PROFILE_*
  unsigned id = 0;     // the profile's id on this GPU
  unsigned slices = 0;
  unsigned instances = 0;
  unsigned long long memory_mib = 0;
  std::string name;  // "1g.10gb"; "" from a driver whose profile info has no name
};

// The GPU-instance profiles the driver offers on `device` (it lists them only in MIG mode).
std::vector<GpuInstanceProfile> gpu_instance_profiles(const MigFunctions& f, nvmlDevice_t device) {
  std::vector<GpuInstanceProfile> out;
  for (unsigned index = 0; index < kGpuInstanceProfileIndices; ++index) {
    if (f.gi_profile_v) {
      nvmlGpuInstanceProfileInfo_v2_t p{};
      p.version = nvmlGpuInstanceProfileInfo_v2;
      const nvmlReturn_t rc = f.gi_profile_v(device, index, &p);
      if (rc == NVML_SUCCESS) {
        std::string name(p.name, strnlen(p.name, sizeof p.name));
        if (name.rfind("MIG ", 0) == 0) name.erase(0, 4);
        out.push_back({index, p.id, p.sliceCount, p.instanceCount, p.memorySizeMB, lower(name)});
        continue;
      }
      // A driver that has the call but wants another version of the struct: version 1 then.
      if (rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH) continue;
    }
    if (!f.gi_profile) continue;
    nvmlGpuInstanceProfileInfo_t p{};
    if (f.gi_profile(device, index, &p) == NVML_SUCCESS) {
      out.push_back({index, p.id, p.sliceCount, p.instanceCount, p.memorySizeMB, ""});
    }
  }
  return out;
}

// Whether the driver's profile `p` is the one the scheduler named: by the driver's own name where
// it gives one, else by its slices and memory (named as gpu_naming.cpp names them) and, for the
// media engines, by its profile index.
bool is_profile(const GpuInstanceProfile& p, const std::string& wanted, const core::MigGeometry& g,
                std::int64_t gpu_memory_mib) {
  if (!p.name.empty()) return p.name == lower(wanted);
  const bool media = p.index == NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1;
  if (static_cast<int>(p.slices) != g.compute_slices || media != g.media) return false;
  std::string plain = lower(wanted);
  if (media) plain.erase(plain.size() - 3);  // "+me"
  return mig_profile_name(static_cast<int>(p.slices), static_cast<int>(p.slices),
                          static_cast<std::int64_t>(p.memory_mib), gpu_memory_mib) == plain;
}

struct ComputeInstanceProfile {
  unsigned id = 0;
  unsigned slices = 0;
  unsigned instances = 0;
};

// The compute-instance profiles of a GPU instance (those whose slices fit in it).
std::vector<ComputeInstanceProfile> compute_instance_profiles(const MigFunctions& f,
                                                              nvmlGpuInstance_t gi) {
  std::vector<ComputeInstanceProfile> out;
  for (unsigned index = 0; index < kComputeInstanceProfileIndices; ++index) {
    if (f.ci_profile_v) {
      nvmlComputeInstanceProfileInfo_v2_t p{};
      p.version = nvmlComputeInstanceProfileInfo_v2;
      const nvmlReturn_t rc =
          f.ci_profile_v(gi, index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &p);
      if (rc == NVML_SUCCESS) {
        out.push_back({p.id, p.sliceCount, p.instanceCount});
        continue;
      }
      if (rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH) continue;
    }
    if (!f.ci_profile) continue;
    nvmlComputeInstanceProfileInfo_t p{};
    if (f.ci_profile(gi, index, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &p) == NVML_SUCCESS) {
      out.push_back({p.id, p.sliceCount, p.instanceCount});
    }
  }
  return out;
}

core::Status set_mode(const MigFunctions& f, nvmlDevice_t device, unsigned mode) {
  const std::string to = mode == NVML_DEVICE_MIG_ENABLE ? "on" : "off";
  nvmlReturn_t activation = NVML_SUCCESS;
  if (nvmlReturn_t rc = f.set_mode(device, mode, &activation); rc != NVML_SUCCESS) {
    return failed(f, "nvmlDeviceSetMigMode (" + to + ")", rc);
  }
  if (activation != NVML_SUCCESS) {
    // The mode is pending: the driver could not reset the GPU itself (a VM without reset, a
    // process holding it). Nothing is made on a GPU whose mode is not the one asked for.
    std::string why = "MIG mode set " + to + " but not active: " + describe(f, activation);
    if (activation == NVML_ERROR_RESET_REQUIRED) {
      why += ": the GPU needs a reset (nvidia-smi -r) or the machine a reboot first";
    } else if (activation == NVML_ERROR_IN_USE) {
      why += ": a process still uses the GPU";
    }
    return core::Error{"mig", why};
  }
  unsigned current = 0, pending = 0;
  if (f.get_mode(device, &current, &pending) == NVML_SUCCESS && current != mode) {
    return core::Error{"mig", "MIG mode is still " + std::string(current ? "on" : "off") +
                                  " after nvmlDeviceSetMigMode (" + to + ")"};
  }
  return core::ok_status();
}

// Destroys every compute instance, then every GPU instance, of the GPU.
core::Status destroy_all(const MigFunctions& f, nvmlDevice_t device,
                         const std::vector<GpuInstanceProfile>& profiles) {
  for (const GpuInstanceProfile& p : profiles) {
    // The driver fills as many as the profile allows on this GPU (its instance count).
    std::vector<nvmlGpuInstance_t> gis(std::max(p.instances, 8U));
    unsigned n = 0;
    nvmlReturn_t rc = f.gpu_instances(device, p.id, gis.data(), &n);
    if (rc == NVML_ERROR_NOT_FOUND) continue;
    if (rc != NVML_SUCCESS) return failed(f, "nvmlDeviceGetGpuInstances", rc);
    gis.resize(std::min<std::size_t>(n, gis.size()));
    for (nvmlGpuInstance_t gi : gis) {
      for (const ComputeInstanceProfile& c : compute_instance_profiles(f, gi)) {
        std::vector<nvmlComputeInstance_t> cis(std::max(c.instances, 8U));
        unsigned m = 0;
        rc = f.compute_instances(gi, c.id, cis.data(), &m);
        if (rc == NVML_ERROR_NOT_FOUND) continue;
        if (rc != NVML_SUCCESS) return failed(f, "nvmlGpuInstanceGetComputeInstances", rc);
        cis.resize(std::min<std::size_t>(m, cis.size()));
        for (nvmlComputeInstance_t ci : cis) {
          if (rc = f.destroy_compute_instance(ci); rc != NVML_SUCCESS) {
            return failed(f, "nvmlComputeInstanceDestroy", rc);
          }
        }
      }
      if (rc = f.destroy_gpu_instance(gi); rc != NVML_SUCCESS) {
        return failed(f, "nvmlGpuInstanceDestroy", rc);
      }
    }
  }
  return core::ok_status();
}

}  // namespace

void resolve_mig(void* library, MigFunctions& f) {
  f.error_string = symbol<ErrorStringFn>(library, "nvmlErrorString");
  f.get_mode = symbol<DeviceGetMigModeFn>(library, "nvmlDeviceGetMigMode");
  f.set_mode = symbol<DeviceSetMigModeFn>(library, "nvmlDeviceSetMigMode");
  f.gi_profile_v =
      symbol<DeviceGetGpuInstanceProfileInfoVFn>(library, "nvmlDeviceGetGpuInstanceProfileInfoV");
  f.gi_profile =
      symbol<DeviceGetGpuInstanceProfileInfoFn>(library, "nvmlDeviceGetGpuInstanceProfileInfo");
  f.gpu_instances = symbol<DeviceGetGpuInstancesFn>(library, "nvmlDeviceGetGpuInstances");
  f.create_gpu_instance = symbol<DeviceCreateGpuInstanceWithPlacementFn>(
      library, "nvmlDeviceCreateGpuInstanceWithPlacement");
  f.destroy_gpu_instance = symbol<GpuInstanceDestroyFn>(library, "nvmlGpuInstanceDestroy");
  f.ci_profile_v = symbol<GpuInstanceGetComputeInstanceProfileInfoVFn>(
      library, "nvmlGpuInstanceGetComputeInstanceProfileInfoV");
  f.ci_profile = symbol<GpuInstanceGetComputeInstanceProfileInfoFn>(
      library, "nvmlGpuInstanceGetComputeInstanceProfileInfo");
  f.compute_instances =
      symbol<GpuInstanceGetComputeInstancesFn>(library, "nvmlGpuInstanceGetComputeInstances");
  f.create_compute_instance =
      symbol<GpuInstanceCreateComputeInstanceFn>(library, "nvmlGpuInstanceCreateComputeInstance");
  f.destroy_compute_instance =
      symbol<ComputeInstanceDestroyFn>(library, "nvmlComputeInstanceDestroy");
}

core::Status reconfigure_mig(const MigFunctions& f, const MigTarget& gpu,
                             const std::vector<std::string>& profiles) {
  // The geometry first: a layout the scheduler's rules refuse never reaches the driver.
  const core::GpuCatalog catalog = core::GpuCatalog::standard();
  const auto model = catalog.find(gpu.model);
  if (!model || !catalog.model(*model).mig_capable) {
    return core::Error{"mig", gpu.model + " GPUs cannot be split into MIG instances"};
  }
  const int memory_gib = catalog.model(*model).memory_gib;
  std::vector<core::MigGeometry> geometry;
  for (const std::string& p : profiles) {
    auto g = core::mig_geometry(p, memory_gib);
    if (!g) {
      return core::Error{"mig", "'" + p + "' is not a MIG profile of a " + gpu.model + " (" +
                                    std::to_string(memory_gib) + " GB)"};
    }
    geometry.push_back(std::move(*g));
  }
  const auto starts = core::mig_layout_starts(profiles, memory_gib);
  if (!starts) {
    return core::Error{"mig", "[" + join(profiles) + "] cannot share one " + gpu.model +
                                  ": they overlap, need more than 7 compute slices, or break "
                                  "NVIDIA's placement rules"};
  }
  if (std::string missing = missing_function(f, !profiles.empty()); !missing.empty()) {
    return core::Error{"mig", "libnvidia-ml has no " + missing +
                                  ": this driver cannot re-partition MIG instances"};
  }

  unsigned current = 0, pending = 0;
  if (nvmlReturn_t rc = f.get_mode(gpu.device, &current, &pending); rc != NVML_SUCCESS) {
    return failed(f, "nvmlDeviceGetMigMode", rc);
  }
  bool enabled_here = false;
  if (current != NVML_DEVICE_MIG_ENABLE) {
    if (profiles.empty()) return core::ok_status();  // whole already: no instance exists
    if (auto st = set_mode(f, gpu.device, NVML_DEVICE_MIG_ENABLE); !st.ok()) return st;
    enabled_here = true;
  }
  const std::vector<GpuInstanceProfile> offered = gpu_instance_profiles(f, gpu.device);
  // Every profile is found before anything is destroyed: an order this driver cannot make leaves
  // the GPU as it was (MIG mode off again if it was off).
  std::vector<const GpuInstanceProfile*> chosen;
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    const GpuInstanceProfile* found = nullptr;
    for (const GpuInstanceProfile& p : offered) {
      if (!found && is_profile(p, profiles[i], geometry[i], gpu.memory_mib)) found = &p;
    }
    if (!found) {
      std::vector<std::string> names;
      names.reserve(offered.size());
      for (const GpuInstanceProfile& p : offered) {
        names.push_back(!p.name.empty() ? p.name : std::to_string(p.slices) + "g");
      }
      if (enabled_here) (void)set_mode(f, gpu.device, NVML_DEVICE_MIG_DISABLE);
      return core::Error{"mig", "the driver offers no GPU-instance profile " + profiles[i] +
                                    " on GPU " + std::to_string(gpu.index) + " (it offers " +
                                    (names.empty() ? "none" : join(names)) + ")"};
    }
    chosen.push_back(found);
  }
  if (auto st = destroy_all(f, gpu.device, offered); !st.ok()) return st;
  if (profiles.empty()) return set_mode(f, gpu.device, NVML_DEVICE_MIG_DISABLE);

  for (std::size_t i = 0; i < profiles.size(); ++i) {
    const std::string what = profiles[i] + " at memory slice " + std::to_string((*starts)[i]) +
                             " (instance " + std::to_string(i + 1) + " of " +
                             std::to_string(profiles.size()) + ")";
    const nvmlGpuInstancePlacement_t placement{static_cast<unsigned>((*starts)[i]),
                                               static_cast<unsigned>(geometry[i].memory_slices)};
    nvmlGpuInstance_t gi = nullptr;
    if (nvmlReturn_t rc = f.create_gpu_instance(gpu.device, chosen[i]->id, &placement, &gi);
        rc != NVML_SUCCESS) {
      core::Error e = failed(f, "nvmlDeviceCreateGpuInstanceWithPlacement", rc);
      e.reason = what + ": " + e.reason;
      return e;
    }
    // One compute instance over the whole GPU instance: the MIG device a job is given.
    const ComputeInstanceProfile* spanning = nullptr;
    const auto cps = compute_instance_profiles(f, gi);
    for (const ComputeInstanceProfile& c : cps) {
      if (!spanning && c.slices == chosen[i]->slices) spanning = &c;
    }
    if (!spanning) {
      return core::Error{"mig", what + ": the driver offers no compute instance spanning it"};
    }
    nvmlComputeInstance_t ci = nullptr;
    if (nvmlReturn_t rc = f.create_compute_instance(gi, spanning->id, &ci); rc != NVML_SUCCESS) {
      core::Error e = failed(f, "nvmlGpuInstanceCreateComputeInstance", rc);
      e.reason = what + ": " + e.reason;
      return e;
    }
  }
  return core::ok_status();
}

}  // namespace allot::agent::nvml
