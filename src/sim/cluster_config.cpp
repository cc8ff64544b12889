#include "sim/cluster_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "core/mig_geometry.h"
#include "sim/text_file.h"

namespace allot::sim {

int ClusterConfig::total_gpus() const {
  int n = 0;
  for (const NodePool& p : pools) n += p.nodes * p.gpus_per_node;
  return n;
}

int ClusterConfig::largest_node_gpus() const {
  int n = 0;
  for (const NodePool& p : pools) n = std::max(n, p.nodes > 0 ? p.gpus_per_node : 0);
  return n;
}

namespace {
// Names end up in node names, reports (JSON, HTML) and the terminal: printable ASCII only, so that
// no control character or broken UTF-8 sequence reaches them (found by fuzz_cluster_config).
bool printable_name(const std::string& s) {
  return !s.empty() && s.size() <= 128 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}
}  // namespace

core::Result<ClusterConfig> parse_cluster_config(const std::string& text, const std::string& file) {
  auto error = [&](const std::string& field, const std::string& reason, int line = -1) {
    std::string where = file;
    if (line >= 0) where += ":" + std::to_string(line + 1);
    return core::Error{where + ": " + field, reason};
  };
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return error("yaml", e.what(), e.mark.line);
  }
  if (!root.IsMap()) return error("cluster", "expected a mapping with 'pools'");
  ClusterConfig c;
  constexpr long long kMaxGpus = 10'000'000;
  long long gpus = 0;
  try {
    if (root["name"]) c.name = root["name"].as<std::string>();
    if (!printable_name(c.name)) {
      return error("name", "must be 1-128 printable ASCII characters", root["name"].Mark().line);
    }
    const YAML::Node pools = root["pools"];
    if (!pools || !pools.IsSequence() || pools.size() == 0) {
      return error("pools", "expected a non-empty list of node pools");
    }
    for (std::size_t i = 0; i < pools.size(); ++i) {
      const YAML::Node p = pools[i];
      const int line = p.Mark().line;
      NodePool pool;
      pool.name = p["name"] ? p["name"].as<std::string>() : "pool" + std::to_string(i);
      if (!p["nodes"]) return error("pools[" + std::to_string(i) + "].nodes", "missing", line);
      pool.nodes = p["nodes"].as<int>();
      if (!p["gpu_model"]) {
        return error("pools[" + std::to_string(i) + "].gpu_model", "missing", line);
      }
      pool.gpu_model = p["gpu_model"].as<std::string>();
      if (p["gpus_per_node"]) pool.gpus_per_node = p["gpus_per_node"].as<int>();
      if (p["nodes_per_block"]) pool.nodes_per_block = p["nodes_per_block"].as<int>();
      if (p["mig_gpus_per_node"]) pool.mig_gpus = p["mig_gpus_per_node"].as<int>();
      if (p["mig_profiles"]) pool.mig_profiles = p["mig_profiles"].as<std::vector<std::string>>();
      if ((pool.mig_gpus > 0) != !pool.mig_profiles.empty() || pool.mig_gpus < 0 ||
          pool.mig_gpus > pool.gpus_per_node || pool.mig_profiles.size() > 7) {
        return error("pools[" + std::to_string(i) + "].mig_profiles",
                     "mig_gpus_per_node (1 to gpus_per_node) and mig_profiles (1 to 7 MIG "
                     "profiles) go together",
                     line);
      }
      if (!printable_name(pool.name)) {
        return error("pools[" + std::to_string(i) + "].name",
                     "must be 1-128 printable ASCII characters", line);
      }
      if (!printable_name(pool.gpu_model)) {
        return error("pools[" + std::to_string(i) + "].gpu_model",
                     "must be 1-128 printable ASCII characters", line);
      }
      if (pool.nodes < 0 || pool.nodes > 100000) {
        return error("pools[" + std::to_string(i) + "].nodes", "must be between 0 and 100000",
                     line);
      }
      if (pool.gpus_per_node < 1 || pool.gpus_per_node > 64) {
        return error("pools[" + std::to_string(i) + "].gpus_per_node", "must be between 1 and 64",
                     line);
      }
      if (pool.nodes_per_block < 0) {
        return error("pools[" + std::to_string(i) + "].nodes_per_block", "must not be negative",
                     line);
      }
      // Bounded in all, so that total_gpus() fits an int (YAML aliases repeat a pool cheaply).
      gpus += static_cast<long long>(pool.nodes) * pool.gpus_per_node;
      if (gpus > kMaxGpus) {
        return error("pools[" + std::to_string(i) + "]",
                     "the cluster has more than " + std::to_string(kMaxGpus) + " GPUs", line);
      }
      c.pools.push_back(std::move(pool));
    }
  } catch (const YAML::Exception& e) {
    return error("yaml", e.what(), e.mark.line);
  }
  if (c.total_gpus() == 0) return error("pools", "the cluster has no GPUs");
  return c;
}

core::Result<ClusterConfig> load_cluster_config(const std::string& path) {
  auto text = read_text_file(path, "cluster file");
  if (!text.ok()) return text.error();
  return parse_cluster_config(text.value(), path);
}

void intern_models(const ClusterConfig& cluster, core::GpuCatalog& catalog) {
  for (const NodePool& p : cluster.pools) {
    if (!catalog.find(p.gpu_model)) catalog.intern(p.gpu_model);
  }
}

core::Result<core::ClusterId> build_cluster(const ClusterConfig& cluster, core::Scheduler& s) {
  const core::ClusterId id = s.add_cluster(cluster.name);
  for (const NodePool& p : cluster.pools) {
    const auto model = s.catalog().find(p.gpu_model);
    if (!model) return core::Error{"gpu_model", "'" + p.gpu_model + "' is not in the catalogue"};
    for (int i = 0; i < p.nodes; ++i) {
      core::NodeSpec spec;
      char name[32];
      std::snprintf(name, sizeof name, "-%04d", i);
      spec.name = p.name + name;
      spec.cluster = id;
      spec.model = *model;
      spec.gpus = p.gpus_per_node;
      spec.block =
          p.nodes_per_block > 0 ? p.name + "-b" + std::to_string(i / p.nodes_per_block) : p.name;
      if (p.mig_gpus > 0) {
        const int memory = s.catalog().model(*model).memory_gib;
        if (!core::mig_layout_starts(p.mig_profiles, memory)) {
          return core::Error{"pool " + p.name + ": mig_profiles",
                             "not a layout one " + p.gpu_model + " GPU can hold"};
        }
        std::vector<core::MigInstance> gpu;
        for (const std::string& name : p.mig_profiles) {
          const auto prof = s.catalog().find_mig_profile(name);
          if (!prof) {
            return core::Error{"pool " + p.name + ": mig_profiles",
                               "'" + name + "' is not a MIG profile of the catalogue"};
          }
          gpu.push_back({*prof, s.catalog().mig_profile(*prof).milli});
        }
        spec.mig.assign(static_cast<std::size_t>(p.gpus_per_node), {});
        for (int g = 0; g < p.mig_gpus; ++g) spec.mig[static_cast<std::size_t>(g)] = gpu;
      }
      auto r = s.add_node(std::move(spec));
      if (!r.ok()) return core::Error{"pool " + p.name + ": " + r.error().field, r.error().reason};
    }
  }
  return id;
}

}  // namespace allot::sim
