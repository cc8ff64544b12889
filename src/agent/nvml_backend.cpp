// The NVML backend: libnvidia-ml.so.1 loaded with dlopen() at run time (see nvml_api.h), so every
// build has it and a machine without the driver gets a clear error instead of a link failure.
#include <dlfcn.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "agent/gpu_backend.h"
#include "agent/nvml_api.h"

namespace allot::agent {
namespace {

using namespace nvml;  // NOLINT(google-build-using-namespace): NVML's own names read best here

// A bound on the XID events drained per sample, so that an event storm cannot stall the loop.
constexpr int kMaxEventsPerSample = 256;

template <typename F>
F symbol(void* library, const char* name) {
  return reinterpret_cast<F>(dlsym(library, name));
}

struct Functions {
  InitFn init = nullptr;
  ShutdownFn shutdown = nullptr;
  ErrorStringFn error_string = nullptr;
  DeviceGetCountFn count = nullptr;
  DeviceGetHandleByIndexFn handle_by_index = nullptr;
  DeviceGetStringFn uuid = nullptr;
  DeviceGetStringFn name = nullptr;
  DeviceGetMemoryInfoFn memory = nullptr;
  // Optional: a missing one leaves its fields unknown.
  DeviceGetPciInfoFn pci = nullptr;
  DeviceGetMigModeFn mig_mode = nullptr;
  DeviceGetUintFn max_mig_count = nullptr;
  DeviceGetMigDeviceHandleByIndexFn mig_handle = nullptr;
  DeviceGetAttributesFn attributes = nullptr;
  DeviceGetUtilizationRatesFn utilization = nullptr;
  DeviceGetTemperatureFn temperature = nullptr;
  DeviceGetUintFn power = nullptr;
  DeviceGetTotalEccErrorsFn ecc = nullptr;
  EventSetCreateFn event_set_create = nullptr;
  EventSetFreeFn event_set_free = nullptr;
  DeviceRegisterEventsFn register_events = nullptr;
  EventSetWaitFn event_wait = nullptr;
};

// Resolves every function; returns the name of the first required one missing ("" if none).
std::string resolve(void* lib, Functions& f) {
  struct Required {
    const char* name;
    bool ok;
  };
  f.init = symbol<InitFn>(lib, "nvmlInit_v2");
  f.shutdown = symbol<ShutdownFn>(lib, "nvmlShutdown");
  f.error_string = symbol<ErrorStringFn>(lib, "nvmlErrorString");
  f.count = symbol<DeviceGetCountFn>(lib, "nvmlDeviceGetCount_v2");
  f.handle_by_index = symbol<DeviceGetHandleByIndexFn>(lib, "nvmlDeviceGetHandleByIndex_v2");
  f.uuid = symbol<DeviceGetStringFn>(lib, "nvmlDeviceGetUUID");
  f.name = symbol<DeviceGetStringFn>(lib, "nvmlDeviceGetName");
  f.memory = symbol<DeviceGetMemoryInfoFn>(lib, "nvmlDeviceGetMemoryInfo");
  f.pci = symbol<DeviceGetPciInfoFn>(lib, "nvmlDeviceGetPciInfo_v3");
  f.mig_mode = symbol<DeviceGetMigModeFn>(lib, "nvmlDeviceGetMigMode");
  f.max_mig_count = symbol<DeviceGetUintFn>(lib, "nvmlDeviceGetMaxMigDeviceCount");
  f.mig_handle =
      symbol<DeviceGetMigDeviceHandleByIndexFn>(lib, "nvmlDeviceGetMigDeviceHandleByIndex");
  f.attributes = symbol<DeviceGetAttributesFn>(lib, "nvmlDeviceGetAttributes_v2");
  f.utilization = symbol<DeviceGetUtilizationRatesFn>(lib, "nvmlDeviceGetUtilizationRates");
  f.temperature = symbol<DeviceGetTemperatureFn>(lib, "nvmlDeviceGetTemperature");
  f.power = symbol<DeviceGetUintFn>(lib, "nvmlDeviceGetPowerUsage");
  f.ecc = symbol<DeviceGetTotalEccErrorsFn>(lib, "nvmlDeviceGetTotalEccErrors");
  f.event_set_create = symbol<EventSetCreateFn>(lib, "nvmlEventSetCreate");
  f.event_set_free = symbol<EventSetFreeFn>(lib, "nvmlEventSetFree");
  f.register_events = symbol<DeviceRegisterEventsFn>(lib, "nvmlDeviceRegisterEvents");
  f.event_wait = symbol<EventSetWaitFn>(lib, "nvmlEventSetWait_v2");
  const Required required[] = {
      {"nvmlInit_v2", f.init != nullptr},
      {"nvmlShutdown", f.shutdown != nullptr},
      {"nvmlErrorString", f.error_string != nullptr},
      {"nvmlDeviceGetCount_v2", f.count != nullptr},
      {"nvmlDeviceGetHandleByIndex_v2", f.handle_by_index != nullptr},
      {"nvmlDeviceGetUUID", f.uuid != nullptr},
      {"nvmlDeviceGetName", f.name != nullptr},
      {"nvmlDeviceGetMemoryInfo", f.memory != nullptr},
  };
  for (const Required& r : required) {
    if (!r.ok) return r.name;
  }
  return "";
}

std::string describe(const Functions& f, nvmlReturn_t rc) {
  const char* text = f.error_string ? f.error_string(rc) : nullptr;
  return std::string(text && *text ? text : "unknown error") + " (NVML error " +
         std::to_string(rc) + ")";
}

constexpr std::int64_t kMiB = std::int64_t{1024} * 1024;

class NvmlBackend final : public GpuBackend {
 public:
  NvmlBackend(void* library, Functions f) : library_(library), f_(f) {}
  ~NvmlBackend() override {
    if (events_ && f_.event_set_free) f_.event_set_free(events_);
    f_.shutdown();
    dlclose(library_);
  }
  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  std::string name() const override { return "nvml"; }

  core::Result<std::vector<GpuDevice>> discover() override {
    unsigned int count = 0;
    if (nvmlReturn_t rc = f_.count(&count); rc != NVML_SUCCESS) {
      return core::Error{"nvml", "nvmlDeviceGetCount_v2 failed: " + describe(f_, rc)};
    }
    gpus_.clear();
    std::vector<GpuDevice> devices;
    for (unsigned int i = 0; i < count; ++i) {
      Gpu gpu;
      gpu.index = static_cast<int>(i);
      GpuDevice d;
      d.index = gpu.index;
      if (std::string why = read_device(i, gpu, d); !why.empty()) {
        // An unreadable GPU is not offered, but every sample reports it as not present, so the
        // health check names it.
        gpu.handle = nullptr;
        gpu.unreadable = "GPU " + std::to_string(i) + " unreadable at discovery: " + why;
      } else {
        devices.push_back(std::move(d));
      }
      gpus_.push_back(std::move(gpu));
    }
    discovered_ = true;
    watch_xids();
    return devices;
  }

  core::Result<std::vector<GpuSample>> sample(double /*now*/) override {
    if (!discovered_) {
      auto d = discover();
      if (!d.ok()) return d.error();
    }
    std::vector<GpuSample> out(gpus_.size());
    for (std::size_t i = 0; i < gpus_.size(); ++i) read_sample(gpus_[i], out[i]);
    drain_xids(out);
    return out;
  }

 private:
  struct Gpu {
    int index = 0;
    nvmlDevice_t handle = nullptr;
    std::string unreadable;  // why discovery could not read it
  };

  // Fills `d` for GPU `i`; returns why it cannot be read ("" when it can).
  std::string read_device(unsigned int i, Gpu& gpu, GpuDevice& d) {
    if (nvmlReturn_t rc = f_.handle_by_index(i, &gpu.handle); rc != NVML_SUCCESS) {
      return describe(f_, rc);
    }
    if (std::string why = read_string(f_.uuid, gpu.handle, d.uuid); !why.empty()) {
      return "UUID: " + why;
    }
    if (std::string why = read_string(f_.name, gpu.handle, d.name); !why.empty()) {
      return "name: " + why;
    }
    d.model = catalog_model_name(d.name);
    nvmlMemory_t mem{};
    if (nvmlReturn_t rc = f_.memory(gpu.handle, &mem); rc != NVML_SUCCESS) {
      return "memory: " + describe(f_, rc);
    }
    d.memory_mib = static_cast<std::int64_t>(mem.total / kMiB);
    if (f_.pci) {
      nvmlPciInfo_t pci{};
      if (f_.pci(gpu.handle, &pci) == NVML_SUCCESS) {
        d.pci_bus_id.assign(pci.busId, strnlen(pci.busId, sizeof pci.busId));
      }
    }
    read_mig(gpu.handle, d);
    return "";
  }

  std::string read_string(DeviceGetStringFn fn, nvmlDevice_t device, std::string& out) const {
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    static_assert(NVML_DEVICE_UUID_V2_BUFFER_SIZE >= NVML_DEVICE_NAME_V2_BUFFER_SIZE);
    if (nvmlReturn_t rc = fn(device, buf, sizeof buf); rc != NVML_SUCCESS) return describe(f_, rc);
    out.assign(buf, strnlen(buf, sizeof buf));
    return "";
  }

  // MIG instances of a GPU in MIG mode: each compute instance is one MIG device, named after its
  // GPU-instance slices, compute slices and memory; its share of the GPU is its compute slices
  // over the GPU's maximum number of MIG devices (1 of 7 = 142 milli on A100/H100/H200/B200).
  void read_mig(nvmlDevice_t parent, GpuDevice& d) {
    if (!f_.mig_mode || !f_.max_mig_count || !f_.mig_handle) return;
    unsigned int current = 0, pending = 0;
    if (f_.mig_mode(parent, &current, &pending) != NVML_SUCCESS) return;  // not MIG-capable
    d.mig_enabled = current == NVML_DEVICE_MIG_ENABLE;
    if (!d.mig_enabled) return;
    unsigned int max_count = 0;
    if (f_.max_mig_count(parent, &max_count) != NVML_SUCCESS) return;
    for (unsigned int j = 0; j < max_count; ++j) {
      nvmlDevice_t mig = nullptr;
      if (f_.mig_handle(parent, j, &mig) != NVML_SUCCESS) continue;  // NOT_FOUND: empty slot
      MigDevice m;
      if (!read_string(f_.uuid, mig, m.uuid).empty()) continue;
      nvmlDeviceAttributes_t attr{};
      if (f_.attributes && f_.attributes(mig, &attr) == NVML_SUCCESS) {
        m.memory_mib = static_cast<std::int64_t>(attr.memorySizeMB);
        m.profile =
            mig_profile_name(static_cast<int>(attr.gpuInstanceSliceCount),
                             static_cast<int>(attr.computeInstanceSliceCount), m.memory_mib);
        m.milli = static_cast<int>(1000 * attr.computeInstanceSliceCount / max_count);
      } else {
        nvmlMemory_t mem{};
        if (f_.memory(mig, &mem) == NVML_SUCCESS) {
          m.memory_mib = static_cast<std::int64_t>(mem.total / kMiB);
        }
        m.profile = "unknown";
      }
      d.mig.push_back(std::move(m));
    }
  }

  static void note(GpuSample& s, const std::string& what) {
    if (!s.error.empty()) s.error += "; ";
    s.error += what;
  }

  // Records a failed read; returns true when the GPU is lost (the sample is then not present).
  bool failed(GpuSample& s, const char* field, nvmlReturn_t rc) const {
    if (rc == NVML_ERROR_GPU_IS_LOST) {
      s.present = false;
      note(s, std::string(field) + ": " + describe(f_, rc));
      return true;
    }
    // "Not supported" is normal (no ECC on this board, no utilisation in MIG mode): unknown.
    if (rc != NVML_ERROR_NOT_SUPPORTED) note(s, std::string(field) + ": " + describe(f_, rc));
    return false;
  }

  void read_sample(const Gpu& gpu, GpuSample& s) const {
    s.index = gpu.index;
    if (!gpu.handle) {
      s.present = false;
      s.error = gpu.unreadable;
      return;
    }
    nvmlMemory_t mem{};
    if (nvmlReturn_t rc = f_.memory(gpu.handle, &mem); rc == NVML_SUCCESS) {
      s.mem_used_mib = static_cast<std::int64_t>(mem.used / kMiB);
      s.mem_total_mib = static_cast<std::int64_t>(mem.total / kMiB);
    } else if (failed(s, "memory", rc)) {
      return;
    }
    if (f_.utilization) {
      nvmlUtilization_t u{};
      if (nvmlReturn_t rc = f_.utilization(gpu.handle, &u); rc == NVML_SUCCESS) {
        s.util_pct = u.gpu;
      } else if (failed(s, "utilization", rc)) {
        return;
      }
    }
    if (f_.temperature) {
      unsigned int t = 0;
      if (nvmlReturn_t rc = f_.temperature(gpu.handle, NVML_TEMPERATURE_GPU, &t);
          rc == NVML_SUCCESS) {
        s.temp_c = t;
      } else if (failed(s, "temperature", rc)) {
        return;
      }
    }
    if (f_.power) {
      unsigned int mw = 0;
      if (nvmlReturn_t rc = f_.power(gpu.handle, &mw); rc == NVML_SUCCESS) {
        s.power_w = mw / 1000.0;
      } else if (failed(s, "power", rc)) {
        return;
      }
    }
    if (f_.ecc) {
      unsigned long long n = 0;
      nvmlReturn_t rc =
          f_.ecc(gpu.handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &n);
      if (rc == NVML_SUCCESS) {
        s.ecc_uncorrected = static_cast<std::int64_t>(n);
        if (f_.ecc(gpu.handle, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &n) ==
            NVML_SUCCESS) {
          s.ecc_corrected = static_cast<std::int64_t>(n);
        }
      } else if (failed(s, "ecc", rc)) {
        return;
      }
    }
  }

  // Registers every readable GPU for critical XID events, once. A GPU (or driver) that cannot
  // deliver them is still sampled; its XIDs are just not seen.
  void watch_xids() {
    if (events_ || !f_.event_set_create || !f_.register_events || !f_.event_wait) return;
    if (f_.event_set_create(&events_) != NVML_SUCCESS) {
      events_ = nullptr;
      return;
    }
    for (const Gpu& g : gpus_) {
      if (g.handle) f_.register_events(g.handle, nvmlEventTypeXidCriticalError, events_);
    }
  }

  void drain_xids(std::vector<GpuSample>& out) const {
    if (!events_) return;
    for (int n = 0; n < kMaxEventsPerSample; ++n) {
      nvmlEventData_t e{};
      if (f_.event_wait(events_, &e, 0) != NVML_SUCCESS) return;  // TIMEOUT: none pending
      if (!(e.eventType & nvmlEventTypeXidCriticalError)) continue;
      for (std::size_t i = 0; i < gpus_.size(); ++i) {
        if (gpus_[i].handle == e.device) out[i].xids.push_back(static_cast<int>(e.eventData));
      }
    }
  }

  void* library_;
  Functions f_;
  std::vector<Gpu> gpus_;
  bool discovered_ = false;
  nvmlEventSet_t events_ = nullptr;
};

}  // namespace

core::Result<std::unique_ptr<GpuBackend>> make_nvml_backend(const std::string& library) {
  dlerror();
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    const std::string why = err ? err : "unknown dlopen error";
    if (why.find("No such file or directory") != std::string::npos) {
      return core::Error{"nvml", library + " not found: no NVIDIA driver on this machine"};
    }
    return core::Error{"nvml", library + " cannot be loaded: " + why};
  }
  Functions f;
  if (std::string missing = resolve(lib, f); !missing.empty()) {
    dlclose(lib);
    return core::Error{
        "nvml", library + " has no " + missing + ": not NVML, or a driver too old for this agent"};
  }
  if (nvmlReturn_t rc = f.init(); rc != NVML_SUCCESS) {
    std::string why = "nvmlInit_v2 failed: " + describe(f, rc);
    if (rc == NVML_ERROR_DRIVER_NOT_LOADED) why += ": the NVIDIA kernel driver is not loaded";
    if (rc == NVML_ERROR_NO_PERMISSION) why += ": no permission to open the GPU devices";
    dlclose(lib);
    return core::Error{"nvml", why};
  }
  return std::unique_ptr<GpuBackend>(new NvmlBackend(lib, f));
}

}  // namespace allot::agent
