// A fake libnvidia-ml for the NVML backend's tests: exports the NVML functions the backend
// resolves, with answers scripted by fake_nvml_configure(), so that discovery, sampling and every
// failure path run for real through dlopen()/dlsym() on a machine without a GPU. It answers as the
// driver does where that matters: memory v2 leaves out what the driver reserves (v1 counts it as
// used), a GPU in MIG mode refuses aggregate memory to a non-root caller, GPU-instance lookups are
// privileged, events come only for registered GPUs and a freed set forgets its registrations.
// Built three times: as is, with FAKE_NVML_WITHOUT_COUNT (nvmlDeviceGetCount_v2 missing, as in a
// foreign library) and with FAKE_NVML_OLD_DRIVER (no memory v2, no MIG profile queries).
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <type_traits>
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

namespace {

constexpr int kMaxGpus = 8;
constexpr unsigned long long kMiB = 1024ULL * 1024;
constexpr unsigned long long kReservedMiB = 512;  // what the driver keeps for itself
constexpr int kUnknownRc = 999;                   // NVML_ERROR_UNKNOWN

struct State {
  nvmlReturn_t init_rc = NVML_SUCCESS;
  nvmlReturn_t count_rc = NVML_SUCCESS;
  unsigned count = 2;
  int lost = -1;         // every query of this GPU answers GPU_IS_LOST
  int unreadable = -1;   // its handle cannot be had
  int mig = -1;          // this GPU is in MIG mode with a 1-slice and a 3-slice instance
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
};

State state;
nvmlDevice_st gpus[kMaxGpus];
nvmlDevice_st migs[kMaxGpus][7];
nvmlEventSet_st event_set;

int gpu_of(nvmlDevice_t d) {
  return d ? d->gpu : -1;
}

// The error every query of `d` answers (SUCCESS: none).
nvmlReturn_t broken(nvmlDevice_t d) {
  const int g = gpu_of(d);
  if (g == state.lost) return NVML_ERROR_GPU_IS_LOST;
  if (g == state.needs_reset) return NVML_ERROR_RESET_REQUIRED;
  if (g == state.unknown) return kUnknownRc;
  return NVML_SUCCESS;
}
#define FAKE_NVML_CHECK(d) \
  if (nvmlReturn_t rc_ = broken(d); rc_ != NVML_SUCCESS) return rc_

// GPU-instance profiles as the driver lists them (index = NVML_GPU_INSTANCE_PROFILE_*), for an
// H100 80GB and an H200 141GB; memory in MiB as the driver reports it.
struct Profile {
  unsigned index, id, slices;
  unsigned long long memory_mib;
  const char* name;
};
constexpr Profile kH100Profiles[] = {
    {0, 19, 1, 9984, "MIG 1g.10gb"},  {1, 14, 2, 20096, "MIG 2g.20gb"},
    {2, 9, 3, 40448, "MIG 3g.40gb"},  {3, 5, 4, 40448, "MIG 4g.40gb"},
    {4, 0, 7, 80768, "MIG 7g.80gb"},  {7, 20, 1, 9984, "MIG 1g.10gb+me"},
    {9, 15, 1, 20096, "MIG 1g.20gb"},
};
constexpr Profile kH200Profiles[] = {
    {0, 19, 1, 16128, "MIG 1g.18gb"},  {1, 14, 2, 32512, "MIG 2g.35gb"},
    {2, 9, 3, 71168, "MIG 3g.71gb"},   {3, 5, 4, 71168, "MIG 4g.71gb"},
    {4, 0, 7, 143488, "MIG 7g.141gb"}, {7, 20, 1, 16128, "MIG 1g.18gb+me"},
    {9, 15, 1, 32512, "MIG 1g.35gb"},
};

const Profile* profile_at(unsigned index) {
  for (const Profile& p : state.h200 ? kH200Profiles : kH100Profiles) {
    if (p.index == index) return &p;
  }
  return nullptr;
}

// Slot 0 holds a 1-slice instance (profile index 0, or 7 with media extensions), slot 2 a
// 3-slice one (index 2).
const Profile* slot_profile(int slot) {
  if (slot == 0) return profile_at(state.media ? 7 : 0);
  if (slot == 2) return profile_at(2);
  return nullptr;
}

bool mig_attributes(int slot, nvmlDeviceAttributes_t* a) {
  const Profile* p = slot_profile(slot);
  if (!p) return false;
  *a = {16 * p->slices, p->slices, p->slices, 0, p->slices, 0, p->slices, p->slices, p->memory_mib};
  return true;
}

unsigned long long gpu_total_mib() {
  return state.h200 ? 143771 : 81559;
}

}  // namespace

extern "C" {

// "key=value,key=value": init, count, count_rc, lost, unreadable, mig, h200, nonroot, media,
// needs_reset, unknown, events, v2_rc, wait_rc, register=<gpu>:<rc>, util, ecc=<gpu>:<n>,
// xid=<gpu>:<xid> (queued), reset.
void fake_nvml_configure(const char* spec) {
  std::string s = spec;
  std::size_t at = 0;
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
      state.mig = n;
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
    for (int j = 0; j < 7; ++j) migs[i][j] = {i, j};
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
  std::string uuid = d->mig < 0 ? "GPU-5e1f0000-0000-0000-0000-00000000000" + std::to_string(d->gpu)
                                : "MIG-5e1f0000-0000-0000-0000-0000000000" +
                                      std::to_string(d->gpu) + std::to_string(d->mig);
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
// their own memory, with 300 MiB used on the 1-slice one and 5000 MiB on the 3-slice one.
nvmlReturn_t memory(nvmlDevice_t d, nvmlMemory_v2_t* m) {
  FAKE_NVML_CHECK(d);
  if (d->mig < 0 && d->gpu == state.mig && state.nonroot) {
    return NVML_ERROR_NO_PERMISSION;  // aggregate memory of a GPU in MIG mode: root only
  }
  unsigned long long total = 0, used = 0, reserved = 0;
  if (d->mig < 0) {
    total = gpu_total_mib() * kMiB;
    used = (1024 + 100ULL * static_cast<unsigned>(d->gpu)) * kMiB;
    reserved = kReservedMiB * kMiB;
  } else {
    const Profile* p = slot_profile(d->mig);
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

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t d, unsigned int index,
                                                  nvmlGpuInstanceProfileInfo_v2_t* info) {
  FAKE_NVML_CHECK(d);
  if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  if (d->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;  // a parent GPU's call
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
static_assert(std::is_same_v<decltype(&nvmlDeviceGetGpuInstanceProfileInfoV),
                             DeviceGetGpuInstanceProfileInfoVFn>);

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int* id) {
  FAKE_NVML_CHECK(d);
  if (d->mig < 0) return NVML_ERROR_INVALID_ARGUMENT;  // MIG devices only
  *id = static_cast<unsigned>(d->mig) + 1;
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlDeviceGetGpuInstanceId), DeviceGetUintFn>);

nvmlGpuInstance_st instances[kMaxGpus][7];

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t d, unsigned int id, nvmlGpuInstance_t* gi) {
  FAKE_NVML_CHECK(d);
  if (state.nonroot) return NVML_ERROR_NO_PERMISSION;  // as documented: privileged callers only
  if (d->mig >= 0 || d->gpu != state.mig || id < 1 || id > 7 ||
      !slot_profile(static_cast<int>(id) - 1)) {
    return NVML_ERROR_NOT_FOUND;
  }
  instances[d->gpu][id - 1] = {d->gpu, static_cast<int>(id) - 1};
  *gi = &instances[d->gpu][id - 1];
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlDeviceGetGpuInstanceById), DeviceGetGpuInstanceByIdFn>);

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gi, nvmlGpuInstanceInfo_t* info) {
  const Profile* p = slot_profile(gi->slot);
  if (!p) return NVML_ERROR_INVALID_ARGUMENT;
  *info = {&gpus[gi->gpu],
           static_cast<unsigned>(gi->slot) + 1,
           p->id,
           {static_cast<unsigned>(gi->slot), p->slices}};
  return NVML_SUCCESS;
}
static_assert(std::is_same_v<decltype(&nvmlGpuInstanceGetInfo), GpuInstanceGetInfoFn>);
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
  *current = *pending = d->gpu == state.mig ? NVML_DEVICE_MIG_ENABLE : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int* count) {
  FAKE_NVML_CHECK(d);
  *count = 7;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index,
                                                 nvmlDevice_t* mig) {
  FAKE_NVML_CHECK(d);
  nvmlDeviceAttributes_t a{};
  if (d->gpu != state.mig || index >= 7 || !mig_attributes(static_cast<int>(index), &a)) {
    return NVML_ERROR_NOT_FOUND;
  }
  *mig = &migs[d->gpu][index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t* a) {
  if (d->mig < 0) return NVML_ERROR_NOT_SUPPORTED;  // as documented: MIG handles only
  return mig_attributes(d->mig, a) ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t* u) {
  FAKE_NVML_CHECK(d);
  if (d->gpu == state.mig) return NVML_ERROR_NOT_SUPPORTED;  // as in MIG mode
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
