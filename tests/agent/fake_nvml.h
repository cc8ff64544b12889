// The fake libnvidia-ml's state (fake_nvml.cpp says what the fake is), shared by its two sources:
// fake_nvml.cpp (devices, memory, telemetry, events, the MIG devices discovery reads) and
// fake_nvml_mig.cpp (MIG mode, GPU and compute instances made and destroyed). Tests reach the
// library only through the NVML functions and the fake_nvml_* controls.
#pragma once

#include <deque>
#include <utility>

#include "agent/nvml_api.h"

using namespace allot::agent::nvml;  // NOLINT(google-build-using-namespace)

struct allot::agent::nvml::nvmlDevice_st {
  int gpu = 0;
  int mig = -1;  // -1: the whole GPU
};
struct allot::agent::nvml::nvmlEventSet_st {
  int unused = 0;
};
struct allot::agent::nvml::nvmlGpuInstance_st {
  int gpu = 0;
  int slot = 0;
};
struct allot::agent::nvml::nvmlComputeInstance_st {
  int gpu = 0;
  int slot = 0;
};

namespace fake_nvml {

constexpr int kMaxGpus = 8;
constexpr unsigned long long kMiB = 1024ULL * 1024;
constexpr unsigned long long kReservedMiB = 512;  // what the driver keeps for itself
constexpr int kUnknownRc = 999;                   // NVML_ERROR_UNKNOWN
constexpr int kSlots = 7;                         // MIG devices of one GPU at most

// A GPU instance and the compute instance in it (this fake makes one at most): a MIG device once
// it has its compute instance, at the index of its slot.
struct Instance {
  bool alive = false;
  unsigned id = 0;             // the GPU instance's id on its GPU
  unsigned profile_index = 0;  // NVML_GPU_INSTANCE_PROFILE_*
  unsigned start = 0;          // placement, in memory slices
  int ci_profile = -1;         // NVML_COMPUTE_INSTANCE_PROFILE_* of its compute instance; -1: none
  int generation = 0;          // in its MIG device's UUID: 0 for the layout that `mig=N` sets up
};

struct State {
  nvmlReturn_t init_rc = NVML_SUCCESS;
  nvmlReturn_t count_rc = NVML_SUCCESS;
  unsigned count = 2;
  int lost = -1;         // every query of this GPU answers GPU_IS_LOST
  int unreadable = -1;   // its handle cannot be had
  bool h200 = false;     // NVIDIA H200 (141 GB) rather than H100 80GB
  bool nonroot = false;  // the caller is not root
  bool media = false;    // the 1-slice instance is the media-extension profile (1g.*+me)
  int needs_reset = -1;  // every query of this GPU answers RESET_REQUIRED
  int unknown = -1;      // every query of this GPU answers UNKNOWN
  bool events = true;
  nvmlReturn_t wait_rc = NVML_SUCCESS;  // the next event wait fails with this, once
  nvmlReturn_t v2_rc = NVML_SUCCESS;    // nvmlDeviceGetMemoryInfo_v2 answers this instead
  int register_gpu = -1;                // registering this GPU for events fails with register_rc
  nvmlReturn_t register_rc = NVML_SUCCESS;
  bool registered[kMaxGpus] = {};
  int event_sets = 0;
  unsigned util = 37;
  unsigned long long ecc[kMaxGpus] = {};
  std::deque<std::pair<int, int>> pending;  // (gpu, xid)
  int inits = 0, shutdowns = 0;
  bool mig_on[kMaxGpus] = {};  // MIG mode, current
  unsigned mig_pending[kMaxGpus] = {};
  Instance slots[kMaxGpus][kSlots];
  int mig_reset = -1;    // a MIG mode change of this GPU stays pending: it needs a reset
  int in_use = -1;       // a process runs on this GPU's compute instances: they cannot go
  int generation = 0;    // compute instances made so far
  int mode_changes = 0;  // MIG modes changed by nvmlDeviceSetMigMode
};

extern State state;
extern nvmlDevice_st gpus[kMaxGpus];
extern nvmlGpuInstance_st gpu_instances[kMaxGpus][kSlots];
extern nvmlComputeInstance_st compute_instances[kMaxGpus][kSlots];

// The error every query of `d` answers (SUCCESS: none).
nvmlReturn_t broken(nvmlDevice_t d);
#define FAKE_NVML_CHECK(d) \
  if (nvmlReturn_t rc_ = fake_nvml::broken(d); rc_ != NVML_SUCCESS) return rc_

// GPU-instance profiles as the driver lists them (index = NVML_GPU_INSTANCE_PROFILE_*), for an
// H100 80GB and an H200 141GB; memory in MiB as the driver reports it; the memory slices each
// occupies and the first slices it may start at (a bit per slice: nvidia-smi mig -lgipp).
struct Profile {
  unsigned index, id, slices, memory_slices, starts;
  unsigned long long memory_mib;
  const char* name;
};
const Profile* profile_at(unsigned index);  // of the GPUs' model (H100 or H200)
const Profile* profile_with_id(unsigned id);
// Compute-instance profiles (index = NVML_COMPUTE_INSTANCE_PROFILE_*, also their id here): their
// compute slices; 0 for none.
unsigned compute_slices(unsigned index);
// The layout `mig=N` sets up: a 1-slice instance in slot 0 (profile index 0, or 7 with media
// extensions) at memory slice 0, and a 3-slice one in slot 2 at memory slice 4, each with a
// compute instance spanning it.
void install_layout(int g);
// The MIG device in slot `slot` of GPU `g`: an instance with its compute instance; null if none.
const Instance* mig_device(int g, int slot);
Instance* instance_of(nvmlGpuInstance_t gi);  // null for a handle of no live instance

}  // namespace fake_nvml
