// What a job sees (docs/agent-protocol.md "What a job sees"): which GPU or MIG devices it gets,
// and the environment that tells it so. Pure.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/gpu_backend.h"
#include "agent/protocol.h"

namespace allot::agent {

struct DeviceChoice {
  std::vector<std::string> uuids;  // GPU-... or MIG-..., in the order of the assignment's GPUs
  std::vector<int> gpus;           // the GPU indices they are on
  bool shared = false;             // a fraction of a GPU without MIG: shared with other runs
};

// Whole GPUs: their UUIDs. A fraction (gpu_milli < 1000) on a GPU with MIG instances: the
// smallest free instance of at least that size (`mig_in_use`: instances other runs hold); on a
// GPU without MIG: the GPU itself, shared.
core::Result<DeviceChoice> choose_devices(const Assignment& a,
                                          const std::vector<GpuDevice>& devices,
                                          const std::set<std::string>& mig_in_use);

// The job's environment: its own `env` plus CUDA_VISIBLE_DEVICES, ALLOT_*, MASTER_ADDR/PORT.
std::map<std::string, std::string> job_environment(const Assignment& a, const DeviceChoice& d,
                                                   const std::string& node);

// Device files of GPUs on this machine (/dev/nvidiaN for GPU index N, where they exist), split
// into those the run may open and those it may not.
void gpu_device_files(const DeviceChoice& d, const std::vector<GpuDevice>& devices,
                      const std::string& dev_dir, std::vector<std::string>& allowed,
                      std::vector<std::string>& denied);

}  // namespace allot::agent
