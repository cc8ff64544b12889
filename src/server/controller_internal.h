// What the controller's files (controller*.cpp) share besides controller.h. Not for use outside
// them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/gpu_catalog.h"
#include "core/node.h"
#include "store/store.h"

namespace allot::server {

using core::Error;
using json = nlohmann::json;
using store::WriteBatch;
namespace op = store::op;

// A node's health as the store words it ("healthy", "unhealthy", "draining", "down"), for the core.
core::NodeHealth parse_health(const std::string& h);

// The MIG instances a node's agent reported (its record's devices_json), per GPU index, as the
// core counts them (NodeSpec::mig): none when no GPU is in MIG mode. Profiles the catalogue does
// not list are added to it with the share the agent gave.
std::vector<std::vector<core::MigInstance>> mig_layout(const std::string& devices_json, int gpus,
                                                       core::GpuCatalog& catalog);

}  // namespace allot::server
