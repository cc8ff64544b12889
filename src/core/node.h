// Clusters and their nodes, in the terms operators use: GPU model, GPU count, topology block,
// health.
//
// Thread-safety: plain values; copies may be read from several threads while none writes.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/types.h"

namespace allot::core {

enum class NodeHealth : std::uint8_t {
  Healthy,    // takes new work
  Unhealthy,  // failed a health check: no new work, its jobs stop as they reach minimum runtime
  Draining,   // an operator asked for a drain: same treatment as Unhealthy
  Down,       // gone: its jobs are lost and stopped at once
};
const char* to_string(NodeHealth h);

// One MIG instance of a GPU in MIG mode (docs/policy.md section 7.3, "MIG instances").
struct MigInstance {
  MigProfileId profile = 0;
  Milli milli = 0;  // its share of the GPU (the profile's compute slices over 7)
  bool operator==(const MigInstance&) const = default;
};

struct NodeSpec {
  std::string name;
  ClusterId cluster = 0;
  GpuModelId model = 0;
  int gpus = 8;
  // Topology block (NVLink domain, rack or network block): gang jobs prefer nodes of one block.
  std::string block;
  std::map<std::string, std::string> labels;
  // The MIG instances of each GPU, by GPU index: empty when no GPU is in MIG mode, else one entry
  // per GPU (an empty entry: that GPU is whole). A GPU in MIG mode takes only fractional work,
  // a whole instance per job.
  std::vector<std::vector<MigInstance>> mig;
};

struct Node {
  NodeId id = 0;
  NodeSpec spec;
  BlockId block = 0;  // interned spec.block
  NodeHealth health = NodeHealth::Healthy;
  std::string health_reason;
  bool cordoned = false;  // no new work, running jobs unaffected
  bool schedulable() const { return health == NodeHealth::Healthy && !cordoned; }
  bool draining() const {
    return health == NodeHealth::Unhealthy || health == NodeHealth::Draining;
  }
};

struct Cluster {
  ClusterId id = 0;
  std::string name;
};

}  // namespace allot::core
