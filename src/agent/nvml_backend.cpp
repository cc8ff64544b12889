// The NVML backend: libnvidia-ml.so.1 loaded with dlopen() at run time (see nvml_api.h), so every
// build has it and a machine without the driver gets a clear error instead of a link failure.
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "agent/gpu_backend.h"
#include "agent/nvml_api.h"
#include "agent/nvml_mig.h"

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
  // Optional: a missing one leaves its fields unknown (or falls back, as said).
  DeviceGetMemoryInfoV2Fn memory_v2 = nullptr;  // else v1, which counts reserved memory as used
  DeviceGetPciInfoFn pci = nullptr;
  DeviceGetMigModeFn mig_mode = nullptr;
  DeviceGetUintFn max_mig_count = nullptr;
  DeviceGetMigDeviceHandleByIndexFn mig_handle = nullptr;
  DeviceGetAttributesFn attributes = nullptr;
  DeviceGetUtilizationRatesFn utilization = nullptr;
  DeviceGetTemperatureFn temperature = nullptr;
  DeviceGetUintFn power = nullptr;
  DeviceGetTotalEccErrorsFn ecc = nullptr;
  DeviceGetGpuInstanceProfileInfoVFn profile_info = nullptr;  // else the per-model name table
  DeviceGetUintFn gpu_instance_id = nullptr;
  DeviceGetGpuInstanceByIdFn gpu_instance_by_id = nullptr;
  GpuInstanceGetInfoFn gpu_instance_info = nullptr;
  EventSetCreateFn event_set_create = nullptr;
  EventSetFreeFn event_set_free = nullptr;
  DeviceRegisterEventsFn register_events = nullptr;
  EventSetWaitFn event_wait = nullptr;
  MigFunctions mig;  // re-partitioning (nvml_mig.h): all optional
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
  f.memory_v2 = symbol<DeviceGetMemoryInfoV2Fn>(lib, "nvmlDeviceGetMemoryInfo_v2");
  f.profile_info =
      symbol<DeviceGetGpuInstanceProfileInfoVFn>(lib, "nvmlDeviceGetGpuInstanceProfileInfoV");
  f.gpu_instance_id = symbol<DeviceGetUintFn>(lib, "nvmlDeviceGetGpuInstanceId");
  f.gpu_instance_by_id = symbol<DeviceGetGpuInstanceByIdFn>(lib, "nvmlDeviceGetGpuInstanceById");
  f.gpu_instance_info = symbol<GpuInstanceGetInfoFn>(lib, "nvmlGpuInstanceGetInfo");
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
  resolve_mig(lib, f.mig);
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
// Samples in a row in which a GPU answered "Unknown Error" before it is taken for one that needs a
// reset (NVIDIA: an unknown error that persists is cleared only by resetting the GPU).
constexpr int kUnknownErrorsBeforeReset = 3;

// Memory in bytes: total and used, v2 (used without the driver's reserve) when the driver has it.
nvmlReturn_t read_memory(const Functions& f, nvmlDevice_t d, std::uint64_t& total,
                         std::uint64_t& used) {
  if (f.memory_v2) {
    nvmlMemory_v2_t m{};
    m.version = nvmlMemory_v2;
    nvmlReturn_t rc = f.memory_v2(d, &m);
    if (rc == NVML_SUCCESS) {
      total = m.total;
      used = m.used;
    }
    // A driver that exports v2 but does not take this struct version: v1, as without it.
    if (rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH && rc != NVML_ERROR_NOT_SUPPORTED) return rc;
  }
  nvmlMemory_t m{};
  nvmlReturn_t rc = f.memory(d, &m);
  if (rc == NVML_SUCCESS) {
    total = m.total;
    used = m.used;
  }
  return rc;
}

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
    if (!events_) watch_xids();  // again after a failed wait (or a set that could not be made)
    std::vector<GpuSample> out(gpus_.size());
    for (std::size_t i = 0; i < gpus_.size(); ++i) read_sample(gpus_[i], out[i]);
    drain_xids(out);
    for (std::size_t i = 0; i < gpus_.size(); ++i) {
      if (!gpus_[i].handle) continue;
      if (!xid_error_.empty()) note(out[i], xid_error_);
      if (!gpus_[i].xid_error.empty()) note(out[i], gpus_[i].xid_error);
    }
    return out;
  }

  core::Status reconfigure_mig(int index, const std::vector<std::string>& profiles) override {
    if (!discovered_) {
      if (auto d = discover(); !d.ok()) return d.error();
    }
    Gpu* gpu = nullptr;
    for (Gpu& g : gpus_) {
      if (g.index == index) gpu = &g;
    }
    if (!gpu) {
      return core::Error{"gpu", "no GPU " + std::to_string(index) + " on this node (it has " +
                                    std::to_string(gpus_.size()) + ")"};
    }
    if (!gpu->handle) return core::Error{"gpu", gpu->unreadable};
    core::Status done =
        nvml::reconfigure_mig(f_.mig, {gpu->handle, index, gpu->model, gpu->memory_mib}, profiles);
    // The old instances' handles are gone, whatever was made: read the GPU's MIG devices again
    // (samples go on from them until the agent discovers again).
    gpu->migs.clear();
    GpuDevice d;
    d.memory_mib = gpu->memory_mib;
    read_mig(*gpu, d);
    return done;
  }

 private:
  struct Mig {
    nvmlDevice_t handle = nullptr;
    std::string uuid;
  };
  struct Gpu {
    int index = 0;
    nvmlDevice_t handle = nullptr;
    std::string unreadable;  // why discovery could not read it
    bool mig_mode = false;
    std::string model;            // the catalogue's name, as discovered
    std::int64_t memory_mib = 0;  // as discovered (the whole GPU's, also when not readable later)
    std::vector<Mig> migs;
    std::string xid_error;   // why its XIDs are not watched ("" when they are, or not supported)
    int unknown_streak = 0;  // samples in a row whose memory read answered "unknown error"
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
    std::uint64_t total = 0, used = 0;
    const nvmlReturn_t mem_rc = read_memory(f_, gpu.handle, total, used);
    if (mem_rc == NVML_SUCCESS) d.memory_mib = static_cast<std::int64_t>(total / kMiB);
    if (f_.pci) {
      nvmlPciInfo_t pci{};
      if (f_.pci(gpu.handle, &pci) == NVML_SUCCESS) {
        d.pci_bus_id.assign(pci.busId, strnlen(pci.busId, sizeof pci.busId));
      }
    }
    read_mig(gpu, d);
    if (mem_rc != NVML_SUCCESS) {
      // A GPU in MIG mode tells a caller that is not root only its instances' memory
      // (NO_PERMISSION for the whole GPU): keep it, with the memory its full-GPU profile has.
      if (!(mem_rc == NVML_ERROR_NO_PERMISSION && d.mig_enabled)) {
        return "memory: " + describe(f_, mem_rc);
      }
      d.memory_mib = full_gpu_memory_mib(gpu.handle, d);
    }
    gpu.memory_mib = d.memory_mib;
    gpu.model = d.model;
    return "";
  }

  // The memory of the 7-slice profile (what MIG can use of the whole GPU), else the sum of the
  // instances'.
  std::int64_t full_gpu_memory_mib(nvmlDevice_t parent, const GpuDevice& d) const {
    std::int64_t best = 0;
    for (const nvmlGpuInstanceProfileInfo_v2_t& p : profiles(parent)) {
      best = std::max(best, static_cast<std::int64_t>(p.memorySizeMB));
    }
    if (best > 0) return best;
    for (const MigDevice& m : d.mig) best += m.memory_mib;
    return best;
  }

  std::string read_string(DeviceGetStringFn fn, nvmlDevice_t device, std::string& out) const {
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    static_assert(NVML_DEVICE_UUID_V2_BUFFER_SIZE >= NVML_DEVICE_NAME_V2_BUFFER_SIZE);
    if (nvmlReturn_t rc = fn(device, buf, sizeof buf); rc != NVML_SUCCESS) return describe(f_, rc);
    out.assign(buf, strnlen(buf, sizeof buf));
    return "";
  }

  // The GPU-instance profiles the driver offers on `parent` (none without the call).
  std::vector<nvmlGpuInstanceProfileInfo_v2_t> profiles(nvmlDevice_t parent) const {
    std::vector<nvmlGpuInstanceProfileInfo_v2_t> out;
    if (!f_.profile_info) return out;
    for (unsigned int index = 0; index < kGpuInstanceProfileIndices; ++index) {
      nvmlGpuInstanceProfileInfo_v2_t p{};
      p.version = nvmlGpuInstanceProfileInfo_v2;
      if (f_.profile_info(parent, index, &p) == NVML_SUCCESS) out.push_back(p);
    }
    return out;
  }

  // The driver's own name of a MIG device's GPU-instance profile ("" when it cannot say): by the
  // instance's profile id where the caller may look the instance up (root), else the first profile
  // with its slices and memory (which cannot tell 1g.18gb from 1g.18gb+me).
  std::string driver_profile_name(nvmlDevice_t parent, nvmlDevice_t mig,
                                  const nvmlDeviceAttributes_t& attr,
                                  const std::vector<nvmlGpuInstanceProfileInfo_v2_t>& all) const {
    const nvmlGpuInstanceProfileInfo_v2_t* found = nullptr;
    unsigned int gi_id = 0;
    nvmlGpuInstance_t gi = nullptr;
    nvmlGpuInstanceInfo_t info{};
    if (f_.gpu_instance_id && f_.gpu_instance_by_id && f_.gpu_instance_info &&
        f_.gpu_instance_id(mig, &gi_id) == NVML_SUCCESS &&
        f_.gpu_instance_by_id(parent, gi_id, &gi) == NVML_SUCCESS &&
        f_.gpu_instance_info(gi, &info) == NVML_SUCCESS) {
      for (const auto& p : all) {
        if (p.id == info.profileId) found = &p;
      }
    }
    for (const auto& p : all) {
      if (!found && p.sliceCount == attr.gpuInstanceSliceCount &&
          p.memorySizeMB == attr.memorySizeMB) {
        found = &p;
      }
    }
    if (!found) return "";
    std::string name(found->name, strnlen(found->name, sizeof found->name));
    if (name.rfind("MIG ", 0) == 0) name.erase(0, 4);
    return name;
  }

  // MIG instances of a GPU in MIG mode: each compute instance is one MIG device, named as the
  // driver names its GPU-instance profile (with "Nc." for a compute instance smaller than its GPU
  // instance); its share of the GPU is its compute slices over the GPU's maximum number of MIG
  // devices (1 of 7 = 142 milli on A100/H100/H200/B200). A MIG device that cannot be read (a
  // caller without permission) is left out; the GPU stays.
  void read_mig(Gpu& gpu, GpuDevice& d) {
    if (!f_.mig_mode || !f_.max_mig_count || !f_.mig_handle) return;
    unsigned int current = 0, pending = 0;
    if (f_.mig_mode(gpu.handle, &current, &pending) != NVML_SUCCESS) return;  // not MIG-capable
    d.mig_enabled = current == NVML_DEVICE_MIG_ENABLE;
    gpu.mig_mode = d.mig_enabled;
    if (!d.mig_enabled) return;
    unsigned int max_count = 0;
    if (f_.max_mig_count(gpu.handle, &max_count) != NVML_SUCCESS || max_count == 0) return;
    const auto all = profiles(gpu.handle);
    for (unsigned int j = 0; j < max_count; ++j) {
      nvmlDevice_t mig = nullptr;
      if (f_.mig_handle(gpu.handle, j, &mig) != NVML_SUCCESS) continue;  // NOT_FOUND: empty slot
      MigDevice m;
      if (!read_string(f_.uuid, mig, m.uuid).empty()) continue;
      nvmlDeviceAttributes_t attr{};
      if (f_.attributes && f_.attributes(mig, &attr) == NVML_SUCCESS) {
        m.memory_mib = static_cast<std::int64_t>(attr.memorySizeMB);
        std::string name = driver_profile_name(gpu.handle, mig, attr, all);
        const int gi_slices = static_cast<int>(attr.gpuInstanceSliceCount);
        const int ci_slices = static_cast<int>(attr.computeInstanceSliceCount);
        if (name.empty()) {
          name = mig_profile_name(gi_slices, ci_slices, m.memory_mib, d.memory_mib);
        } else if (ci_slices > 0 && ci_slices != gi_slices) {
          name = std::to_string(ci_slices) + "c." + name;
        }
        m.profile = name;
        m.milli = static_cast<int>(1000 * attr.computeInstanceSliceCount / max_count);
      } else {
        std::uint64_t total = 0, used = 0;
        if (read_memory(f_, mig, total, used) == NVML_SUCCESS) {
          m.memory_mib = static_cast<std::int64_t>(total / kMiB);
        }
        m.profile = "unknown";
      }
      gpu.migs.push_back({mig, m.uuid});
      d.mig.push_back(std::move(m));
    }
  }

  static void note(GpuSample& s, const std::string& what) {
    if (!s.error.empty()) s.error += "; ";
    s.error += what;
  }

  // Records a failed read; returns true when the GPU is lost or needs a reset (the sample is then
  // not present, which makes the node unhealthy).
  bool failed(GpuSample& s, const char* field, nvmlReturn_t rc) const {
    if (rc == NVML_ERROR_GPU_IS_LOST || rc == NVML_ERROR_RESET_REQUIRED) {
      s.present = false;
      note(s, std::string(field) + ": " + describe(f_, rc));
      return true;
    }
    // "Not supported" is normal (no ECC on this board, no utilisation in MIG mode): unknown.
    if (rc != NVML_ERROR_NOT_SUPPORTED) note(s, std::string(field) + ": " + describe(f_, rc));
    return false;
  }

  void read_sample(Gpu& gpu, GpuSample& s) {
    s.index = gpu.index;
    if (!gpu.handle) {
      s.present = false;
      s.error = gpu.unreadable;
      return;
    }
    bool unknown = false;
    read_fields(gpu, s, unknown);
    gpu.unknown_streak = unknown && s.present ? gpu.unknown_streak + 1 : 0;
    if (gpu.unknown_streak >= kUnknownErrorsBeforeReset) {
      s.present = false;
      note(s, std::to_string(gpu.unknown_streak) +
                  " samples in a row with unknown errors: the GPU needs a reset");
    }
  }

  void read_fields(Gpu& gpu, GpuSample& s, bool& unknown) const {
    std::uint64_t total = 0, used = 0;
    if (nvmlReturn_t rc = read_memory(f_, gpu.handle, total, used); rc == NVML_SUCCESS) {
      s.mem_used_mib = static_cast<std::int64_t>(used / kMiB);
      s.mem_total_mib = static_cast<std::int64_t>(total / kMiB);
    } else if (rc == NVML_ERROR_NO_PERMISSION && gpu.mig_mode) {
      // Not root, MIG mode: the whole GPU's memory is the sum over its MIG devices (below).
    } else {
      // Counted only for memory, which every GPU answers: a sensor that always answers "unknown"
      // must not take a working GPU away.
      unknown = rc == NVML_ERROR_UNKNOWN;
      if (failed(s, "memory", rc)) return;
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
    read_mig_samples(gpu, s);
  }

  // Each MIG device's own memory (the driver answers memory for MIG handles, also to a caller
  // that is not root); where the whole GPU's could not be read, it is their sum.
  void read_mig_samples(const Gpu& gpu, GpuSample& s) const {
    if (gpu.migs.empty()) return;
    std::int64_t used_sum = 0;
    bool all_read = true;
    for (const Mig& m : gpu.migs) {
      MigSample ms;
      ms.uuid = m.uuid;
      std::uint64_t total = 0, used = 0;
      if (read_memory(f_, m.handle, total, used) == NVML_SUCCESS) {
        ms.mem_used_mib = static_cast<std::int64_t>(used / kMiB);
        ms.mem_total_mib = static_cast<std::int64_t>(total / kMiB);
        used_sum += ms.mem_used_mib;
      } else {
        all_read = false;
      }
      s.mig.push_back(std::move(ms));
    }
    if (s.mem_used_mib < 0 && all_read) {
      s.mem_used_mib = used_sum;
      s.mem_total_mib = gpu.memory_mib;
    }
  }

  // Registers every readable GPU not yet in the event set for critical XID events: at each
  // discovery (a GPU readable only later is added then) and after a failed wait (a new set).
  // Failures are kept and noted in every sample: XIDs that cannot be seen are said so.
  void watch_xids() {
    if (!f_.event_set_create || !f_.register_events || !f_.event_wait) return;
    if (!events_) {
      registered_.clear();
      if (nvmlReturn_t rc = f_.event_set_create(&events_); rc != NVML_SUCCESS) {
        events_ = nullptr;
        // No events on this platform is not an error; anything else is said.
        xid_error_ = rc == NVML_ERROR_NOT_SUPPORTED
                         ? ""
                         : "XID events: nvmlEventSetCreate failed: " + describe(f_, rc);
        return;
      }
      xid_error_.clear();
    }
    for (Gpu& g : gpus_) {
      if (!g.handle) continue;
      if (std::find(registered_.begin(), registered_.end(), g.handle) != registered_.end()) {
        continue;
      }
      nvmlReturn_t rc = f_.register_events(g.handle, nvmlEventTypeXidCriticalError, events_);
      if (rc == NVML_SUCCESS) {
        registered_.push_back(g.handle);
        g.xid_error.clear();
      } else {
        g.xid_error =
            "XID events not watched: nvmlDeviceRegisterEvents failed: " + describe(f_, rc);
      }
    }
  }

  // Gives each pending XID to its GPU; a failed wait (other than "none pending") is said in the
  // samples and the set is made again, rather than XIDs going unseen without a word.
  void drain_xids(std::vector<GpuSample>& out) {
    if (!events_) return;
    for (int n = 0; n < kMaxEventsPerSample; ++n) {
      nvmlEventData_t e{};
      nvmlReturn_t rc = f_.event_wait(events_, &e, 0);
      if (rc == NVML_ERROR_TIMEOUT) return;  // none pending
      if (rc != NVML_SUCCESS) {
        // The set may be unusable: free it, and make and register a new one next sample.
        xid_error_ =
            "XID events: nvmlEventSetWait_v2 failed: " + describe(f_, rc) + "; registering again";
        if (f_.event_set_free) f_.event_set_free(events_);
        events_ = nullptr;
        registered_.clear();
        return;
      }
      xid_error_.clear();
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
  std::vector<nvmlDevice_t> registered_;  // GPUs in events_
  std::string xid_error_;                 // why no XIDs are seen at all ("" when they are)
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
