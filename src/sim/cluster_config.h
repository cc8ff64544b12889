// A simulated cluster as a YAML file of node pools:
//
//   name: h100-88
//   pools:
//     - name: h100          # node names are <pool>-<index>
//       nodes: 11
//       gpu_model: H100     # a model of the core's catalogue, or a new name (added to it)
//       gpus_per_node: 8
//       nodes_per_block: 4  # optional topology blocks of this many nodes (default: one block)
//       mig_gpus_per_node: 2                  # optional: the first 2 GPUs of each node split
//       mig_profiles: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]   # into these MIG instances
#pragma once

#include <string>
#include <vector>

#include "core/scheduler.h"
#include "core/status.h"

namespace allot::sim {

struct NodePool {
  std::string name;
  int nodes = 0;
  std::string gpu_model;
  int gpus_per_node = 8;
  int nodes_per_block = 0;  // 0: the whole pool is one block
  // A static MIG layout (docs/policy.md section 7.3): the first mig_gpus GPUs of each node hold
  // these instances (a layout NVIDIA's geometry allows, of profiles the model offers).
  int mig_gpus = 0;
  std::vector<std::string> mig_profiles;
};

struct ClusterConfig {
  std::string name = "sim";
  std::vector<NodePool> pools;
  int total_gpus() const;
  int largest_node_gpus() const;
};

core::Result<ClusterConfig> load_cluster_config(const std::string& path);
core::Result<ClusterConfig> parse_cluster_config(const std::string& yaml_text,
                                                 const std::string& file_name);

// Adds every model of the cluster to the catalogue (known models keep their entry).
void intern_models(const ClusterConfig& cluster, core::GpuCatalog& catalog);
// Adds the cluster and its nodes to the scheduler; returns the cluster's id.
core::Result<core::ClusterId> build_cluster(const ClusterConfig& cluster, core::Scheduler& s);

}  // namespace allot::sim
