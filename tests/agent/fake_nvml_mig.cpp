// The fake libnvidia-ml's MIG instances (fake_nvml.cpp says what the fake is): MIG mode, GPU and
// compute instances made and destroyed as the driver does it — only in MIG mode, only by root, at
// the placements NVIDIA allows, never overlapping, a GPU instance only once its compute instance is
// gone — and the profile queries, in both versions (FAKE_NVML_OLD_DRIVER: version 1 only, and no
// lookup of GPU instances by id).
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

#include "fake_nvml.h"

namespace fake_nvml {

constexpr Profile kH100Profiles[] = {
    {0, 19, 1, 1, 0x7F, 9984, "MIG 1g.10gb"},  {1, 14, 2, 2, 0x15, 20096, "MIG 2g.20gb"},
    {2, 9, 3, 4, 0x11, 40448, "MIG 3g.40gb"},  {3, 5, 4, 4, 0x01, 40448, "MIG 4g.40gb"},
    {4, 0, 7, 8, 0x01, 80768, "MIG 7g.80gb"},  {7, 20, 1, 1, 0x7F, 9984, "MIG 1g.10gb+me"},
    {9, 15, 1, 2, 0x55, 20096, "MIG 1g.20gb"},
};
constexpr Profile kH200Profiles[] = {
    {0, 19, 1, 1, 0x7F, 16128, "MIG 1g.18gb"},  {1, 14, 2, 2, 0x15, 32512, "MIG 2g.35gb"},
    {2, 9, 3, 4, 0x11, 71168, "MIG 3g.71gb"},   {3, 5, 4, 4, 0x01, 71168, "MIG 4g.71gb"},
    {4, 0, 7, 8, 0x01, 143488, "MIG 7g.141gb"}, {7, 20, 1, 1, 0x7F, 16128, "MIG 1g.18gb+me"},
    {9, 15, 1, 2, 0x55, 32512, "MIG 1g.35gb"},
};
constexpr unsigned kMediaProfile = 7;  // NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1

const Profile* profile_at(unsigned index) {
  for (const Profile& p : state.h200 ? kH200Profiles : kH100Profiles) {
    if (p.index == index) return &p;
  }
  return nullptr;
}

const Profile* profile_with_id(unsigned id) {
  for (const Profile& p : state.h200 ? kH200Profiles : kH100Profiles) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

unsigned compute_slices(unsigned index) {
  constexpr unsigned kSlices[] = {1, 2, 3, 4, 7};
  return index < 5 ? kSlices[index] : 0;
}

void install_layout(int g) {
  if (g < 0 || g >= kMaxGpus) return;
  state.mig_on[g] = true;
  state.mig_pending[g] = NVML_DEVICE_MIG_ENABLE;
  for (Instance& i : state.slots[g]) i = {};
  state.slots[g][0] = {true, 1, state.media ? kMediaProfile : 0, 0, 0, 0};
  state.slots[g][2] = {true, 3, 2, 4, 2, 0};
}

const Instance* mig_device(int g, int slot) {
  if (g < 0 || g >= kMaxGpus || slot < 0 || slot >= kSlots) return nullptr;
  const Instance& i = state.slots[g][slot];
  return i.alive && i.ci_profile >= 0 ? &i : nullptr;
}

Instance* instance_of(nvmlGpuInstance_t gi) {
  if (!gi || gi->gpu < 0 || gi->gpu >= kMaxGpus || gi->slot < 0 || gi->slot >= kSlots) {
    return nullptr;
  }
  Instance& i = state.slots[gi->gpu][gi->slot];
  return i.alive ? &i : nullptr;
}

namespace {

// Profile information, in version 1 or 2 (with the name): for a GPU in MIG mode only.
nvmlReturn_t gpu_instance_profile(nvmlDevice_t d, unsigned int index,
                                  nvmlGpuInstanceProfileInfo_v2_t* info) {
  FAKE_NVML_CHECK(d);
  if (d->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;  // a parent GPU's call
  if (!state.mig_on[d->gpu]) return NVML_ERROR_NOT_SUPPORTED;
  const Profile* p = profile_at(index);
  if (!p) return index < 10 ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
  *info = {};
  info->version = nvmlGpuInstanceProfileInfo_v2;
  info->id = p->id;
  info->sliceCount = p->slices;
  info->instanceCount = 7 / p->slices;
  info->multiprocessorCount = 16 * p->slices;
  info->memorySizeMB = p->memory_mib;
  std::strncpy(info->name, p->name, sizeof info->name - 1);
  return NVML_SUCCESS;
}

nvmlReturn_t compute_instance_profile(nvmlGpuInstance_t gi, unsigned int index, unsigned int engine,
                                      nvmlComputeInstanceProfileInfo_v2_t* p) {
  const Instance* i = instance_of(gi);
  if (!i || engine != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const unsigned slices = compute_slices(index);
  const unsigned gi_slices = profile_at(i->profile_index)->slices;
  if (slices == 0 || slices > gi_slices) return NVML_ERROR_NOT_SUPPORTED;
  *p = {};
  p->version = nvmlComputeInstanceProfileInfo_v2;
  p->id = index;
  p->sliceCount = slices;
  p->instanceCount = gi_slices / slices;
  p->multiprocessorCount = 16 * slices;
  std::snprintf(p->name, sizeof p->name, "MIG %uc", slices);
  return NVML_SUCCESS;
}

}  // namespace
}  // namespace fake_nvml

using namespace fake_nvml;  // NOLINT(google-build-using-namespace)

extern "C" {

int fake_nvml_mode_changes() {
  return state.mode_changes;
}

// The GPU instances of GPU `g` in slot order, "<profile>@<first memory slice>" separated by
// spaces, with "-" after one without a compute instance.
const char* fake_nvml_layout(int g) {
  static std::string out;
  out.clear();
  for (int slot = 0; g >= 0 && g < kMaxGpus && slot < kSlots; ++slot) {
    const Instance& i = state.slots[g][slot];
    if (!i.alive) continue;
    out += std::string(out.empty() ? "" : " ") + (profile_at(i.profile_index)->name + 4) + "@" +
           std::to_string(i.start) + (i.ci_profile < 0 ? "-" : "");
  }
  return out.c_str();
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t d, unsigned int index,
                                                 nvmlGpuInstanceProfileInfo_t* info) {
  nvmlGpuInstanceProfileInfo_v2_t v2{};
  if (nvmlReturn_t rc = gpu_instance_profile(d, index, &v2); rc != NVML_SUCCESS) return rc;
  *info = {v2.id,
           v2.isP2pSupported,
           v2.sliceCount,
           v2.instanceCount,
           v2.multiprocessorCount,
           v2.copyEngineCount,
           v2.decoderCount,
           v2.encoderCount,
           v2.jpegCount,
           v2.ofaCount,
           v2.memorySizeMB};
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlDeviceGetGpuInstanceProfileInfo),
                             DeviceGetGpuInstanceProfileInfoFn>);

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gi, unsigned int index,
                                                          unsigned int engine,
                                                          nvmlComputeInstanceProfileInfo_t* info) {
  nvmlComputeInstanceProfileInfo_v2_t v2{};
  if (nvmlReturn_t rc = compute_instance_profile(gi, index, engine, &v2); rc != NVML_SUCCESS) {
    return rc;
  }
  *info = {v2.id,
           v2.sliceCount,
           v2.instanceCount,
           v2.multiprocessorCount,
           v2.sharedCopyEngineCount,
           v2.sharedDecoderCount,
           v2.sharedEncoderCount,
           v2.sharedJpegCount,
           v2.sharedOfaCount};
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlGpuInstanceGetComputeInstanceProfileInfo),
                             GpuInstanceGetComputeInstanceProfileInfoFn>);

#ifndef FAKE_NVML_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t d, unsigned int index,
                                                  nvmlGpuInstanceProfileInfo_v2_t* info) {
  if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  return gpu_instance_profile(d, index, info);
}
static_assert(std::is_same_v<decltype(&nvmlDeviceGetGpuInstanceProfileInfoV),
                             DeviceGetGpuInstanceProfileInfoVFn>);

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t gi, unsigned int index, unsigned int engine,
    nvmlComputeInstanceProfileInfo_v2_t* info) {
  if (info->version != nvmlComputeInstanceProfileInfo_v2) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  return compute_instance_profile(gi, index, engine, info);
}
static_assert(std::is_same_v<decltype(&nvmlGpuInstanceGetComputeInstanceProfileInfoV),
                             GpuInstanceGetComputeInstanceProfileInfoVFn>);

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int* id) {
  FAKE_NVML_CHECK(d);
  if (d->mig < 0) return NVML_ERROR_INVALID_ARGUMENT;  // MIG devices only
  const Instance* i = mig_device(d->gpu, d->mig);
  if (!i) return NVML_ERROR_NOT_FOUND;
  *id = i->id;
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlDeviceGetGpuInstanceId), DeviceGetUintFn>);

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned int id, nvmlGpuInstance_t* gi) {
  FAKE_NVML_CHECK(d);
  if (state.nonroot) return NVML_ERROR_NO_PERMISSION;  // as documented: privileged callers only
  if (d->mig >= 0 || !state.mig_on[d->gpu]) return NVML_ERROR_NOT_FOUND;
  for (int slot = 0; slot < kSlots; ++slot) {
    const Instance& i = state.slots[d->gpu][slot];
    if (i.alive && i.id == id) {
      *gi = &gpu_instances[d->gpu][slot];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
static_assert(std::is_same_v<decltype(&nvmlDeviceGetGpuInstanceById), DeviceGetGpuInstanceByIdFn>);

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t* info) {
  const Instance* i = instance_of(gi);
  if (!i) return NVML_ERROR_INVALID_ARGUMENT;
  const Profile* p = profile_at(i->profile_index);
  *info = {&gpus[gi->gpu], i->id, p->id, {i->start, p->memory_slices}};
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlGpuInstanceGetInfo), GpuInstanceGetInfoFn>);
#endif

// Root only. A change the GPU cannot take without a reset stays pending (`mig_reset`); turning
// MIG mode off while instances remain is refused in the activation status (the backend destroys
// them first).
nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t d, unsigned int mode, nvmlReturn_t* activation) {
  FAKE_NVML_CHECK(d);
  if (d->mig >= 0 || mode > NVML_DEVICE_MIG_ENABLE || !activation) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (state.nonroot) return NVML_ERROR_NO_PERMISSION;
  const int g = d->gpu;
  state.mig_pending[g] = mode;
  *activation = NVML_SUCCESS;
  if (g == state.mig_reset) {
    *activation = NVML_ERROR_RESET_REQUIRED;
    return NVML_SUCCESS;
  }
  if (mode == NVML_DEVICE_MIG_DISABLE) {
    for (const Instance& i : state.slots[g]) {
      if (i.alive) {
        *activation = NVML_ERROR_IN_USE;
        state.mig_pending[g] = NVML_DEVICE_MIG_ENABLE;
        return NVML_SUCCESS;
      }
    }
  }
  if (state.mig_on[g] != (mode == NVML_DEVICE_MIG_ENABLE)) ++state.mode_changes;
  state.mig_on[g] = mode == NVML_DEVICE_MIG_ENABLE;
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlDeviceSetMigMode), DeviceSetMigModeFn>);

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t d, unsigned int profile_id,
                                       nvmlGpuInstance_t* out, unsigned int* count) {
  FAKE_NVML_CHECK(d);
  if (d->mig >= 0 || !out || !count || !profile_with_id(profile_id)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (state.nonroot) return NVML_ERROR_NO_PERMISSION;
  if (!state.mig_on[d->gpu]) return NVML_ERROR_NOT_SUPPORTED;
  unsigned n = 0;
  for (int slot = 0; slot < kSlots; ++slot) {
    const Instance& i = state.slots[d->gpu][slot];
    if (i.alive && profile_at(i.profile_index)->id == profile_id) {
      out[n++] = &gpu_instances[d->gpu][slot];
    }
  }
  *count = n;
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlDeviceGetGpuInstances), DeviceGetGpuInstancesFn>);

// At one of the profile's own starts (else an invalid argument), and where the GPU has room: its
// memory slices free, at most 7 compute slices in all, one instance with the media engines, no
// 4-slice instance beside a 3-slice one (else insufficient resources), as the driver answers.
nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t d, unsigned int profile_id,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gi) {
  FAKE_NVML_CHECK(d);
  if (d->mig >= 0 || !placement || !gi) return NVML_ERROR_INVALID_ARGUMENT;
  if (state.nonroot) return NVML_ERROR_NO_PERMISSION;
  const int g = d->gpu;
  if (!state.mig_on[g]) return NVML_ERROR_NOT_SUPPORTED;
  const Profile* p = profile_with_id(profile_id);
  if (!p || placement->size != p->memory_slices || placement->start >= 8 ||
      ((p->starts >> placement->start) & 1U) == 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  unsigned used = 0, compute = p->slices;
  int media = p->index == kMediaProfile ? 1 : 0, free_slot = -1;
  bool three = p->slices == 3, four = p->slices == 4;
  for (int slot = 0; slot < kSlots; ++slot) {
    const Instance& i = state.slots[g][slot];
    if (!i.alive) {
      if (free_slot < 0) free_slot = slot;
      continue;
    }
    const Profile* q = profile_at(i.profile_index);
    used |= ((1U << q->memory_slices) - 1U) << i.start;
    compute += q->slices;
    media += q->index == kMediaProfile ? 1 : 0;
    three = three || q->slices == 3;
    four = four || q->slices == 4;
  }
  const unsigned mask = ((1U << p->memory_slices) - 1U) << placement->start;
  if ((used & mask) != 0 || compute > 7 || media > 1 || (three && four) || free_slot < 0) {
    return NVML_ERROR_INSUFFICIENT_RESOURCES;
  }
  state.slots[g][free_slot] = {
      true, static_cast<unsigned>(free_slot) + 1, p->index, placement->start, -1, 0};
  *gi = &gpu_instances[g][free_slot];
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlDeviceCreateGpuInstanceWithPlacement),
                             DeviceCreateGpuInstanceWithPlacementFn>);

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gi) {
  Instance* i = instance_of(gi);
  if (!i) return NVML_ERROR_INVALID_ARGUMENT;
  if (state.nonroot) return NVML_ERROR_NO_PERMISSION;
  if (i->ci_profile >= 0) return NVML_ERROR_IN_USE;  // its compute instance is still there
  *i = {};
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlGpuInstanceDestroy), GpuInstanceDestroyFn>);

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gi, unsigned int profile_id,
                                                nvmlComputeInstance_t* out, unsigned int* count) {
  const Instance* i = instance_of(gi);
  if (!i || !out || !count) return NVML_ERROR_INVALID_ARGUMENT;
  if (state.nonroot) return NVML_ERROR_NO_PERMISSION;
  if (compute_slices(profile_id) == 0) return NVML_ERROR_NOT_SUPPORTED;
  *count = 0;
  if (i->ci_profile == static_cast<int>(profile_id)) {
    out[0] = &compute_instances[gi->gpu][gi->slot];
    *count = 1;
  }
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlGpuInstanceGetComputeInstances),
                             GpuInstanceGetComputeInstancesFn>);

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gi, unsigned int profile_id,
                                                  nvmlComputeInstance_t* ci) {
  Instance* i = instance_of(gi);
  if (!i || !ci) return NVML_ERROR_INVALID_ARGUMENT;
  if (state.nonroot) return NVML_ERROR_NO_PERMISSION;
  const unsigned slices = compute_slices(profile_id);
  if (slices == 0 || slices > profile_at(i->profile_index)->slices) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  if (i->ci_profile >= 0) return NVML_ERROR_INSUFFICIENT_RESOURCES;  // one per instance here
  i->ci_profile = static_cast<int>(profile_id);
  i->generation = ++state.generation;
  *ci = &compute_instances[gi->gpu][gi->slot];
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlGpuInstanceCreateComputeInstance),
                             GpuInstanceCreateComputeInstanceFn>);

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t ci) {
  if (!ci || ci->gpu < 0 || ci->gpu >= kMaxGpus || ci->slot < 0 || ci->slot >= kSlots) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  Instance& i = state.slots[ci->gpu][ci->slot];
  if (!i.alive || i.ci_profile < 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (state.nonroot) return NVML_ERROR_NO_PERMISSION;
  if (ci->gpu == state.in_use) return NVML_ERROR_IN_USE;
  i.ci_profile = -1;
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlComputeInstanceDestroy), ComputeInstanceDestroyFn>);

}  // extern "C"
