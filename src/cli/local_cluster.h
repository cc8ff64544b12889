// The local cluster of `allot up`: node agents in this process, each talking to the server over
// real HTTP on loopback with its own agent token, each running its jobs as real processes. With
// an NVIDIA GPU on this machine (NVML loads and finds one), one agent offers this machine's GPUs;
// without, fake nodes (default 11 x 8 H100, Ai2's smallest cluster) stand in for GPUs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "store/store.h"

namespace allot::cli {

struct LocalClusterOptions {
  std::string server_url;
  std::string data_dir;          // agents' state directories and tokens go below it
  std::string backend = "auto";  // auto: NVML when it finds a GPU, else fake nodes; nvml; fake
  int fake_nodes = 11;
  int gpus_per_node = 8;
  std::string model = "H100";
  std::string cluster = "local";
  int telemetry_ms = 0;  // the agents' telemetry report interval; 0: the agent's default
};

class LocalCluster {
 public:
  static core::Result<std::unique_ptr<LocalCluster>> start(store::Store& store,
                                                           const LocalClusterOptions& options,
                                                           core::Time now);
  ~LocalCluster();  // stops the agents and their jobs
  std::string describe() const;

 private:
  LocalCluster() = default;
  std::vector<std::unique_ptr<agent::Agent>> agents_;
  std::string description_;
};

}  // namespace allot::cli
