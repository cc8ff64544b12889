// Re-partitioning one GPU into MIG instances through NVML (the NVML backend's
// GpuBackend::reconfigure_mig): the functions it needs, resolved from the library the backend
// loaded (all optional: a driver without them cannot re-partition, and says so), and the calls in
// order: MIG mode on, every compute and GPU instance destroyed, each GPU instance created at the
// placement core::mig_layout_starts gives with one compute instance spanning it; or, for an empty
// layout, everything destroyed and MIG mode off.
//
// Thread-safety: none; called on the agent's loop thread, like the rest of the backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/nvml_api.h"
#include "core/status.h"

namespace allot::agent::nvml {

struct MigFunctions {
  ErrorStringFn error_string = nullptr;
  DeviceGetMigModeFn get_mode = nullptr;
  DeviceSetMigModeFn set_mode = nullptr;
  DeviceGetGpuInstanceProfileInfoVFn gi_profile_v = nullptr;  // with the profile's name
  DeviceGetGpuInstanceProfileInfoFn gi_profile = nullptr;     // older: by slices and memory
  DeviceGetGpuInstancesFn gpu_instances = nullptr;
  DeviceCreateGpuInstanceWithPlacementFn create_gpu_instance = nullptr;
  GpuInstanceDestroyFn destroy_gpu_instance = nullptr;
  GpuInstanceGetComputeInstanceProfileInfoVFn ci_profile_v = nullptr;
  GpuInstanceGetComputeInstanceProfileInfoFn ci_profile = nullptr;
  GpuInstanceGetComputeInstancesFn compute_instances = nullptr;
  GpuInstanceCreateComputeInstanceFn create_compute_instance = nullptr;
  ComputeInstanceDestroyFn destroy_compute_instance = nullptr;
};

// Looks every function up in `library` (a dlopen() handle); a missing one stays null.
void resolve_mig(void* library, MigFunctions& f);

// The GPU to re-partition, as discovery read it.
struct MigTarget {
  nvmlDevice_t device = nullptr;
  int index = 0;
  std::string model;            // the catalogue's name ("H100"): its memory sets the geometry
  std::int64_t memory_mib = 0;  // the whole GPU's, as the driver reports it (to name profiles)
};

// Makes `gpu` hold exactly `profiles` (GPU-instance profiles, one compute instance spanning each)
// or, with none, no instance and MIG mode off. A layout the catalogue's geometry refuses, or one
// naming a profile the driver does not offer, changes nothing; a failure once instances are being
// destroyed or made leaves what was done (the caller discovers it).
core::Status reconfigure_mig(const MigFunctions& f, const MigTarget& gpu,
                             const std::vector<std::string>& profiles);

}  // namespace allot::agent::nvml
