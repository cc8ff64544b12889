// GPU backends behind one interface: what GPUs a node has (discovery) and how they are doing
// (samples). NVML (nvml_backend.cpp) loads libnvidia-ml.so.1 at run time with dlopen, so every
// build has it and a machine without NVIDIA drivers still runs the agent; the fake backend
// (fake_backend.cpp) reads a YAML description of a node with scripted telemetry and faults, so
// that everything above the backend is tested without a GPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace allot::agent {

struct MigDevice {
  std::string uuid;     // "MIG-..."
  std::string profile;  // "1g.10gb", "3g.40gb", ...
  int milli = 0;        // its share of the GPU's compute in thousandths (1g of 7 = 142)
  std::int64_t memory_mib = 0;
};

struct GpuDevice {
  int index = 0;
  std::string uuid;   // "GPU-..."
  std::string name;   // as the driver says: "NVIDIA H100 80GB HBM3"
  std::string model;  // the scheduler's catalogue name derived from `name`: "H100"
  std::int64_t memory_mib = 0;
  std::string pci_bus_id;
  bool mig_enabled = false;
  std::vector<MigDevice> mig;  // empty unless MIG mode is on
};

// One reading of one MIG device (NVML: memory only; the driver has no per-instance utilisation
// through nvmlDeviceGetUtilizationRates, see docs/agent.md).
struct MigSample {
  std::string uuid;  // "MIG-..."
  std::int64_t mem_used_mib = -1;
  std::int64_t mem_total_mib = -1;
};

// One reading of one GPU. Fields a backend cannot read stay at their defaults (-1 for "unknown").
struct GpuSample {
  int index = 0;
  bool present = true;  // false: the GPU fell off the bus, needs a reset, or the backend lost it
  double util_pct = -1;
  std::int64_t mem_used_mib = -1;
  std::int64_t mem_total_mib = -1;
  double temp_c = -1;
  double power_w = -1;
  std::int64_t ecc_uncorrected = -1;  // volatile (since boot) uncorrected ECC errors
  std::int64_t ecc_corrected = -1;
  std::vector<int> xids;       // XID / critical events seen since the previous sample
  std::vector<MigSample> mig;  // one per MIG device, when the GPU is in MIG mode
  std::string error;           // why a field or the whole GPU could not be read
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  virtual std::string name() const = 0;  // "nvml", "fake"
  virtual core::Result<std::vector<GpuDevice>> discover() = 0;
  // One sample per discovered GPU, in index order. `now` is seconds since the agent started
  // (the fake backend's scripts run on it; NVML ignores it).
  virtual core::Result<std::vector<GpuSample>> sample(double now) = 0;
  // Makes GPU `gpu` hold exactly these GPU instances ("1g.18gb", "3g.71gb"; each with one compute
  // instance spanning it), placed where core::mig_layout_starts says; `profiles` empty: no
  // instance, MIG mode off (the GPU whole). Blocks until done (NVML's calls are synchronous). The
  // caller makes sure no job runs on the GPU, and discovers again afterwards: what it finds is the
  // layout achieved, also after a failure part way. A backend that cannot re-partition says so.
  virtual core::Status reconfigure_mig(int gpu, const std::vector<std::string>& profiles) {
    (void)profiles;
    return core::Error{"mig", name() + " backend cannot re-partition GPU " + std::to_string(gpu) +
                                  " into MIG instances"};
  }
};

// Fails with a clear reason when libnvidia-ml.so.1 cannot be loaded or initialised.
// `library` overrides the file dlopen()ed (tests point it at missing or broken libraries).
core::Result<std::unique_ptr<GpuBackend>> make_nvml_backend(
    const std::string& library = "libnvidia-ml.so.1");

// A YAML node description (see docs/agent.md "The fake backend"). `node` names the node in the
// fake UUIDs ("GPU-fake-<node>-<i>") and in a control_dir with "{node}", unless the file sets
// uuid_seed; so one file can describe many nodes of a local cluster.
core::Result<std::unique_ptr<GpuBackend>> make_fake_backend(const std::string& yaml_path,
                                                            const std::string& node = "");
// The same from YAML text (tests); a relative control_dir is then relative to the working
// directory (from a file: to the file's directory).
core::Result<std::unique_ptr<GpuBackend>> make_fake_backend_from_text(const std::string& yaml,
                                                                      const std::string& node = "");

// "NVIDIA H100 80GB HBM3" -> "H100"; "NVIDIA B200" -> "B200"; unknown names pass through
// upper-cased with spaces replaced by '-'.
std::string catalog_model_name(const std::string& driver_name);

// A MIG profile's name from its GPU-instance slices, compute slices and memory, in NVIDIA's form,
// for drivers that cannot name it (the NVML backend asks the driver first): (1, 1, 9984) ->
// "1g.10gb"; a compute instance smaller than its GPU instance, (3, 1, 40192) -> "1c.3g.40gb".
// `gpu_memory_mib` (the whole GPU's) picks NVIDIA's names from a per-model table (A100 40/80 GB,
// H100 80/94/96 GB, H200, B200, GB200), since NVIDIA's names are not the memory in GiB (H200's
// 1-slice profile is 1g.18gb with 15.75 GiB); a GPU not in the table gets the memory rounded up to
// whole GiB.
std::string mig_profile_name(int gpu_slices, int compute_slices, std::int64_t memory_mib,
                             std::int64_t gpu_memory_mib = 0);

}  // namespace allot::agent
