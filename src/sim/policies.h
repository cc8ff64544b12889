// The policies a simulation compares, each a preset of the core's PolicyConfig: a small named
// piece on the one core, not a fork of it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/policy_config.h"
#include "sim/workload.h"

namespace allot::sim {

struct PolicyPreset {
  std::string name;
  std::string description;
  core::PolicyConfig config;
  GangShape gang_shape = GangShape::Even;
  // Jobs declare their true duration as expected_duration (SJF orders by it; the Helios
  // simulator knows every duration).
  bool oracle_durations = false;
  // The published simulator this preset reproduces, if any (docs/simulator.md, "Baselines").
  std::string reproduces;
};

// "fairshare", "fifo", "priority", "fairtree", "fifo-strict", "sjf-strict".
std::vector<PolicyPreset> policy_presets();
std::optional<PolicyPreset> find_policy(std::string_view name);
// "fairshare, fifo, ...": the names policy_presets() knows, for messages.
std::string policy_names();

}  // namespace allot::sim
