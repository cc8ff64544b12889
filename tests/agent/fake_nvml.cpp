// A fake libnvidia-ml for the NVML backend's tests: exports the NVML functions the backend
// resolves, with answers scripted by fake_nvml_configure(), so that discovery, sampling and every
// failure path run for real through dlopen()/dlsym() on a machine without a GPU. Built twice: as
// is, and with FAKE_NVML_WITHOUT_COUNT (nvmlDeviceGetCount_v2 missing, as in a foreign library).
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

namespace {

constexpr int kMaxGpus = 8;
constexpr unsigned long long kMiB = 1024ULL * 1024;

struct State {
  nvmlReturn_t init_rc = NVML_SUCCESS;
  nvmlReturn_t count_rc = NVML_SUCCESS;
  unsigned count = 2;
  int lost = -1;        // every query of this GPU answers GPU_IS_LOST
  int unreadable = -1;  // its handle cannot be had
  int mig = -1;         // this GPU is in MIG mode with a 1g.10gb and a 3g.40gb instance
  bool events = true;
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

bool lost(nvmlDevice_t d) {
  return gpu_of(d) == state.lost;
}

// The attributes of the two MIG instances the fake offers, as an H100 80GB reports them.
bool mig_attributes(int slot, nvmlDeviceAttributes_t* a) {
  if (slot == 0) {
    *a = {16, 1, 1, 0, 1, 0, 1, 1, 9984};
    return true;
  }
  if (slot == 2) {
    *a = {60, 3, 3, 0, 3, 0, 3, 3, 40448};
    return true;
  }
  return false;
}

}  // namespace

extern "C" {

// "key=value,key=value": init, count, count_rc, lost, unreadable, mig, events, util, ecc=<gpu>:<n>,
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
  if (lost(d)) return NVML_ERROR_GPU_IS_LOST;
  std::string uuid = d->mig < 0 ? "GPU-5e1f0000-0000-0000-0000-00000000000" + std::to_string(d->gpu)
                                : "MIG-5e1f0000-0000-0000-0000-0000000000" +
                                      std::to_string(d->gpu) + std::to_string(d->mig);
  if (uuid.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, uuid.c_str(), uuid.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* out, unsigned int length) {
  if (lost(d)) return NVML_ERROR_GPU_IS_LOST;
  const char* name = "NVIDIA H100 80GB HBM3";
  if (std::strlen(name) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::strcpy(out, name);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  if (lost(d)) return NVML_ERROR_GPU_IS_LOST;
  const unsigned long long total = d->mig < 0 ? 81559 * kMiB : 9984 * kMiB;
  const unsigned long long used = (1024 + 100ULL * static_cast<unsigned>(d->gpu)) * kMiB;
  *m = {total, total - used, used};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t* pci) {
  if (lost(d)) return NVML_ERROR_GPU_IS_LOST;
  *pci = {};
  pci->domain = 0;
  pci->bus = 0x18 + static_cast<unsigned>(d->gpu);
  std::string id = "00000000:" + std::to_string(18 + d->gpu) + ":00.0";
  std::memcpy(pci->busId, id.c_str(), id.size() + 1);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int* current, unsigned int* pending) {
  if (lost(d)) return NVML_ERROR_GPU_IS_LOST;
  *current = *pending = d->gpu == state.mig ? NVML_DEVICE_MIG_ENABLE : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int* count) {
  if (lost(d)) return NVML_ERROR_GPU_IS_LOST;
  *count = 7;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int index,
                                                 nvmlDevice_t* mig) {
  if (lost(d)) return NVML_ERROR_GPU_IS_LOST;
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
  if (lost(d)) return NVML_ERROR_GPU_IS_LOST;
  if (d->gpu == state.mig) return NVML_ERROR_NOT_SUPPORTED;  // as in MIG mode
  *u = {state.util, 20};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int* t) {
  if (lost(d)) return NVML_ERROR_GPU_IS_LOST;
  if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  *t = 40 + static_cast<unsigned>(d->gpu);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int* mw) {
  if (lost(d)) return NVML_ERROR_GPU_IS_LOST;
  *mw = 350500 + 1000 * static_cast<unsigned>(d->gpu);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter,
                                         unsigned long long* n) {
  if (lost(d)) return NVML_ERROR_GPU_IS_LOST;
  if (counter != NVML_VOLATILE_ECC) return NVML_ERROR_INVALID_ARGUMENT;
  *n = type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? state.ecc[d->gpu] : 2;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  if (!state.events) return NVML_ERROR_NOT_SUPPORTED;
  *set = &event_set;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t) {
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, nvmlEventSet_t) {
  if (lost(d)) return NVML_ERROR_GPU_IS_LOST;
  return types == nvmlEventTypeXidCriticalError ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t, nvmlEventData_t* e, unsigned int timeout_ms) {
  if (state.pending.empty()) return NVML_ERROR_TIMEOUT;
  if (timeout_ms != 0) return NVML_ERROR_INVALID_ARGUMENT;  // the agent never blocks
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
