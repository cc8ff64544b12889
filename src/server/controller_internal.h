// What the controller's files (controller*.cpp) share besides controller.h. Not for use outside
// them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/node.h"
#include "store/store.h"

namespace allot::server {

using core::Error;
using json = nlohmann::json;
using store::WriteBatch;
namespace op = store::op;

// A node's health as the store words it ("healthy", "unhealthy", "draining", "down"), for the core.
core::NodeHealth parse_health(const std::string& h);

}  // namespace allot::server
