// A fake libnvidia-ml for the NVML backend's tests: exports the NVML functions the backend
// resolves, with answers scripted by fake_nvml_configure(), so that discovery, sampling and every
// failure path run for real through dlopen()/dlsym() on a machine without a GPU. It answers as the
// driver does where that matters: memory v2 leaves out what the driver reserves (v1 counts it as
// used), a GPU in MIG mode refuses aggregate memory to a non-root caller, GPU-instance lookups are
// privileged, events come only for registered GPUs and a freed set forgets its registrations.
// MIG instances are made and destroyed as the driver does it (fake_nvml_mig.cpp; the state both
// sources share is in fake_nvml.h), each new MIG device with a UUID of its own.
// Built three times: as is, with FAKE_NVML_WITHOUT_COUNT (nvmlDeviceGetCount_v2 missing, as in a
// foreign library) and with FAKE_NVML_OLD_DRIVER (no memory v2, no versioned MIG profile queries).
#include "fake_nvml.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

namespace fake_nvml {

State state;
nvmlDevice_st gpus[kMaxGpus];
nvmlGpuInstance_st gpu_instances[kMaxGpus][kSlots];
nvmlComputeInstance_st compute_instances[kMaxGpus][kSlots];

nvmlReturn_t broken(nvmlDevice_t d) {
  const int g = d ? d->gpu : -1;
  if (g == state.lost) return NVML_ERROR_GPU_IS_LOST;
  if (g == state.needs_reset) return NVML_ERROR_RESET_REQUIRED;
  if (g == state.unknown) return kUnknownRc;
  return NVML_SUCCESS;
}

}  // namespace fake_nvml

using namespace fake_nvml;  // NOLINT(google-build-using-namespace)

namespace {

nvmlDevice_st migs[kMaxGpus][kSlots];
nvmlEventSet_st event_set;

bool mig_attributes(int g, int slot, nvmlDeviceAttributes_t* a) {
  const Instance* i = mig_device(g, slot);
  const Profile* p = i ? profile_at(i->profile_index) : nullptr;
  if (!p) return false;
  const unsigned ci = compute_slices(static_cast<unsigned>(i->ci_profile));
  *a = {16 * ci, p->slices, p->slices, 0, p->slices, 0, p->slices, ci, p->memory_mib};
  return true;
}

unsigned long long gpu_total_mib() {
  return state.h200 ? 143771 : 81559;
}

}  // namespace

extern "C" {

// "key=value,key=value": init, count, count_rc, lost, unreadable, mig (a GPU in MIG mode with
// a 1-slice and a 3-slice instance), h200, nonroot, media, needs_reset, unknown, events, v2_rc,
// wait_rc, register=<gpu>:<rc>, util, ecc=<gpu>:<n>, xid=<gpu>:<xid> (queued), mig_reset (a MIG
// mode change of this GPU needs a reset), in_use (its compute instances are in use), reset.
void fake_nvml_configure(const char* spec) {
  std::string s = spec;
  std::size_t at = 0;
  int layout = -1;  // set up once every key is read: `media` may come after `mig`
  while (at < s.size()) {
    std::size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(at, end - at);
    at = end + 1;
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    const int n = std::atoi(value.c_str());
    const std::size_t colon = value.find(':');
    const int second = colon == std::string::npos ? 0 : std::atoi(value.c_str() + colon + 1);
    if (key == "reset") {
      const int inits = state.inits, shutdowns = state.shutdowns;
      state = State{};
      state.inits = inits;
      state.shutdowns = shutdowns;
    } else if (key == "init") {
      state.init_rc = n;
    } else if (key == "count") {
      state.count = static_cast<unsigned>(n);
    } else if (key == "count_rc") {
      state.count_rc = n;
    } else if (key == "lost") {
      state.lost = n;
    } else if (key == "unreadable") {
      state.unreadable = n;
    } else if (key == "mig") {
      layout = n;
    } else if (key == "mig_reset") {
      state.mig_reset = n;
    } else if (key == "in_use") {
      state.in_use = n;
    } else if (key == "h200") {
      state.h200 = n != 0;
    } else if (key == "nonroot") {
      state.nonroot = n != 0;
    } else if (key == "media") {
      state.media = n != 0;
    } else if (key == "needs_reset") {
      state.needs_reset = n;
    } else if (key == "unknown") {
      state.unknown = n;
    } else if (key == "v2_rc") {
      state.v2_rc = n;
    } else if (key == "wait_rc") {
      state.wait_rc = n;
    } else if (key == "register") {
      state.register_gpu = n;
      state.register_rc = second;
    } else if (key == "events") {
      state.events = n != 0;
    } else if (key == "util") {
      state.util = static_cast<unsigned>(n);
    } else if (key == "ecc" && n >= 0 && n < kMaxGpus) {
      state.ecc[n] = static_cast<unsigned long long>(second);
    } else if (key == "xid") {
      state.pending.emplace_back(n, second);
    }
  }
  install_layout(layout);
}

int fake_nvml_inits() {
  return state.inits;
}
int fake_nvml_shutdowns() {
  return state.shutdowns;
}
int fake_nvml_event_sets() {
  return state.event_sets;
}
nvmlReturn_t nvmlInit_v2() {
  if (state.init_rc != NVML_SUCCESS) return state.init_rc;
  ++state.inits;
  for (int i = 0; i < kMaxGpus; ++i) {
    gpus[i].gpu = i;
    for (int j = 0; j < kSlots; ++j) {
      migs[i][j] = {i, j};
      gpu_instances[i][j] = {i, j};
      compute_instances[i][j] = {i, j};
    }
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown() {
  ++state.shutdowns;
  return NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED:
      return "GPU requires reset";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_IN_USE:
      return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Insufficient Resources";
    default:
      return "Unknown Error";
  }
}

#ifndef FAKE_NVML_WITHOUT_COUNT
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (state.count_rc != NVML_SUCCESS) return state.count_rc;
  *count = state.count;
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlDeviceGetCount_v2), DeviceGetCountFn>);
#endif

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  if (index >= state.count || index >= kMaxGpus) return NVML_ERROR_INVALID_ARGUMENT;
  if (static_cast<int>(index) == state.unreadable) return NVML_ERROR_GPU_IS_LOST;
  *device = &gpus[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* out, unsigned int length) {
  FAKE_NVML_CHECK(d);
  std::string uuid = "GPU-5e1f0000-0000-0000-0000-00000000000" + std::to_string(d->gpu);
  if (d->mig >= 0) {
    const Instance* i = mig_device(d->gpu, d->mig);
    if (!i) return NVML_ERROR_NOT_FOUND;
    // A device of a later layout has a UUID no earlier one had, as with the driver.
    char generation[8];
    std::snprintf(generation, sizeof generation, "%04d", i->generation % 10000);
    uuid = "MIG-5e1f0000-0000-0000-" + std::string(generation) + "-0000000000" +
           std::to_string(d->gpu) + std::to_string(d->mig);
  }
  if (uuid.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, uuid.c_str(), uuid.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* out, unsigned int length) {
  FAKE_NVML_CHECK(d);
  const char* name = state.h200 ? "NVIDIA H200" : "NVIDIA H100 80GB HBM3";
  if (std::strlen(name) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::strcpy(out, name);
  return NVML_SUCCESS;
}

// What the driver reports for `d` (v2: `used` without the reserved part); MIG devices report
// their own memory, with 300 MiB used on the device in slot 0 (`mig=N`: the 1-slice one) and 5000
// MiB on the others.
nvmlReturn_t memory(nvmlDevice_t d, nvmlMemory_v2_t* m) {
  FAKE_NVML_CHECK(d);
  if (d->mig < 0 && state.mig_on[d->gpu] && state.nonroot) {
    return NVML_ERROR_NO_PERMISSION;  // aggregate memory of a GPU in MIG mode: root only
  }
  unsigned long long total = 0, used = 0, reserved = 0;
  if (d->mig < 0) {
    total = gpu_total_mib() * kMiB;
    used = (1024 + 100ULL * static_cast<unsigned>(d->gpu)) * kMiB;
    reserved = kReservedMiB * kMiB;
  } else {
    const Instance* i = mig_device(d->gpu, d->mig);
    const Profile* p = i ? profile_at(i->profile_index) : nullptr;
    if (!p) return NVML_ERROR_NOT_FOUND;
    total = p->memory_mib * kMiB;
    used = (d->mig == 0 ? 300 : 5000) * kMiB;
  }
  *m = {nvmlMemory_v2, total, reserved, total - reserved - used, used};
  return NVML_SUCCESS;
}

// Version 1 counts the reserved memory as used.
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  nvmlMemory_v2_t v2{};
  if (nvmlReturn_t rc = memory(d, &v2); rc != NVML_SUCCESS) return rc;
  *m = {v2.total, v2.free, v2.used + v2.reserved};
  return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OLD_DRIVER
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t* m) {
  if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  if (state.v2_rc != NVML_SUCCESS) return state.v2_rc;
  return memory(d, m);
}
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMemoryInfo_v2), DeviceGetMemoryInfoV2Fn>);

#endif

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t* pci) {
  FAKE_NVML_CHECK(d);
  *pci = {};
  pci->domain = 0;
  pci->bus = 0x18 + static_cast<unsigned>(d->gpu);
  std::string id = "00000000:" + std::to_string(18 + d->gpu) + ":00.0";
  std::memcpy(pci->busId, id.c_str(), id.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int* current, unsigned int* pending) {
  FAKE_NVML_CHECK(d);
  *current = state.mig_on[d->gpu] ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
  *pending = state.mig_pending[d->gpu];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int* count) {
  FAKE_NVML_CHECK(d);
  *count = kSlots;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index,
                                                 nvmlDevice_t* mig) {
  FAKE_NVML_CHECK(d);
  if (!state.mig_on[d->gpu] || !mig_device(d->gpu, static_cast<int>(index))) {
    return NVML_ERROR_NOT_FOUND;
  }
  *mig = &migs[d->gpu][index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t* a) {
  if (d->mig < 0) return NVML_ERROR_NOT_SUPPORTED;  // as documented: MIG handles only
  return mig_attributes(d->gpu, d->mig, a) ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* u) {
  FAKE_NVML_CHECK(d);
  if (state.mig_on[d->gpu]) return NVML_ERROR_NOT_SUPPORTED;  // as in MIG mode
  *u = {state.util, 20};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int* t) {
  FAKE_NVML_CHECK(d);
  if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *t = 40 + static_cast<unsigned>(d->gpu);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int* mw) {
  FAKE_NVML_CHECK(d);
  *mw = 350500 + 1000 * static_cast<unsigned>(d->gpu);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter,
                                         unsigned long long* n) {
  FAKE_NVML_CHECK(d);
  if (counter != NVML_VOLATILE_ECC) return NVML_ERROR_INVALID_ARGUMENT;
  *n = type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? state.ecc[d->gpu] : 2;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (!state.events) return NVML_ERROR_NOT_SUPPORTED;
  ++state.event_sets;
  *set = &event_set;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t) {
  for (bool& r : state.registered) r = false;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t) {
  FAKE_NVML_CHECK(d);
  if (d->gpu == state.register_gpu) return state.register_rc;
  if (types != nvmlEventTypeXidCriticalError) return NVML_ERROR_NOT_SUPPORTED;
  state.registered[d->gpu] = true;
  return NVML_SUCCESS;
}

// Events of GPUs not registered in the set are never delivered, as with the driver.
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t, nvmlEventData_t* e, unsigned int timeout_ms) {
  if (timeout_ms != 0) return NVML_ERROR_INVALID_ARGUMENT;  // the agent never blocks
  if (state.wait_rc != NVML_SUCCESS) return std::exchange(state.wait_rc, NVML_SUCCESS);
  while (!state.pending.empty() && !state.registered[state.pending.front().first]) {
    state.pending.pop_front();
  }
  if (state.pending.empty()) return NVML_ERROR_TIMEOUT;
  auto [gpu, xid] = state.pending.front();
  state.pending.pop_front();
  *e = {&gpus[gpu], nvmlEventTypeXidCriticalError, static_cast<unsigned long long>(xid), 0, 0};
  return NVML_SUCCESS;
}

}  // extern "C"

static_assert(std::is_same_v<decltype(&nvmlInit_v2), InitFn>);
static_assert(std::is_same_v<decltype(&nvmlShutdown), ShutdownFn>);
static_assert(std::is_same_v<decltype(&nvmlErrorString), ErrorStringFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetHandleByIndex_v2), DeviceGetHandleByIndexFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetUUID), DeviceGetStringFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMemoryInfo), DeviceGetMemoryInfoFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPciInfo_v3), DeviceGetPciInfoFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMigMode), DeviceGetMigModeFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMigDeviceHandleByIndex),
                             DeviceGetMigDeviceHandleByIndexFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetAttributes_v2), DeviceGetAttributesFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetUtilizationRates), DeviceGetUtilizationRatesFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetTemperature), DeviceGetTemperatureFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPowerUsage), DeviceGetUintFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetTotalEccErrors), DeviceGetTotalEccErrorsFn>);
static_assert(std::is_same_v<decltype(&nvmlEventSetWait_v2), EventSetWaitFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceRegisterEvents), DeviceRegisterEventsFn>);
