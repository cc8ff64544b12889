// The policies a simulation compares, each a preset of the core's PolicyConfig: a small named
// piece on the one core, not a fork of it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/policy_config.h"

namespace allot::sim {

struct PolicyPreset {
  std::string name;
  std::string description;
  core::PolicyConfig config;
};

// "fairshare", "fifo", "priority", "fairtree".
std::vector<PolicyPreset> policy_presets();
std::optional<PolicyPreset> find_policy(std::string_view name);

}  // namespace allot::sim
