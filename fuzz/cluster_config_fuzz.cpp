// The simulator's cluster reader (src/sim/cluster_config.cpp) on any YAML. Contract:
// - no exception escapes; a refusal names the file, line and field;
// - an accepted cluster is within the documented bounds, written back as YAML it reads the same,
//   and (when small enough to build quickly) builds into a scheduler or says why not.
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "check.h"
#include "core/scheduler.h"
#include "sim/cluster_config.h"

namespace {

using allot::sim::ClusterConfig;

std::string to_yaml(const ClusterConfig& c) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << c.name;
  out << YAML::Key << "pools" << YAML::Value << YAML::BeginSeq;
  for (const auto& p : c.pools) {
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << p.name << YAML::Key << "nodes"
        << YAML::Value << p.nodes << YAML::Key << "gpu_model" << YAML::Value << p.gpu_model
        << YAML::Key << "gpus_per_node" << YAML::Value << p.gpus_per_node << YAML::Key
        << "nodes_per_block" << YAML::Value << p.nodes_per_block << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return out.c_str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = allot::sim::parse_cluster_config(text, "cluster.yaml");
  if (!r.ok()) {
    allot::fuzz::check_error(r.error());
    FUZZ_CHECK(r.error().field.rfind("cluster.yaml", 0) == 0, "error without the file: %s",
               r.error().message().c_str());
    return 0;
  }
  const ClusterConfig& c = r.value();
  FUZZ_CHECK(!c.pools.empty() && c.total_gpus() > 0, "accepted a cluster without GPUs");
  long long nodes = 0;
  for (const auto& p : c.pools) {
    FUZZ_CHECK(p.nodes >= 0 && p.nodes <= 100000, "pool %s: %d nodes", p.name.c_str(), p.nodes);
    FUZZ_CHECK(p.gpus_per_node >= 1 && p.gpus_per_node <= 64, "pool %s: %d GPUs per node",
               p.name.c_str(), p.gpus_per_node);
    FUZZ_CHECK(p.nodes_per_block >= 0, "pool %s: %d nodes per block", p.name.c_str(),
               p.nodes_per_block);
    nodes += p.nodes;
  }

  const std::string yaml = to_yaml(c);
  auto again = allot::sim::parse_cluster_config(yaml, "again.yaml");
  FUZZ_CHECK(again.ok(), "written back, refused (%s):\n%s",
             again.ok() ? "" : again.error().message().c_str(), yaml.c_str());
  FUZZ_CHECK(again.value().name == c.name && again.value().pools.size() == c.pools.size(),
             "written back, reads otherwise:\n%s", yaml.c_str());
  for (std::size_t i = 0; i < c.pools.size(); ++i) {
    const auto& a = c.pools[i];
    const auto& b = again.value().pools[i];
    FUZZ_CHECK(a.name == b.name && a.nodes == b.nodes && a.gpu_model == b.gpu_model &&
                   a.gpus_per_node == b.gpus_per_node && a.nodes_per_block == b.nodes_per_block,
               "pool %zu written back reads otherwise:\n%s", i, yaml.c_str());
  }

  if (nodes <= 256) {
    allot::core::Scheduler s;
    allot::sim::intern_models(c, s.catalog());
    auto built = allot::sim::build_cluster(c, s);
    if (!built.ok()) allot::fuzz::check_error(built.error());
  }
  return 0;
}
