// Job arrays, as Slurm's --array writes them: "0-99", "0,3,7", "0-99:2", any of these joined by
// commas, and "%N" at the end to run at most N tasks at once.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace allot::server {

struct ArraySpec {
  std::vector<int> indices;  // ascending, each once
  int limit = 0;             // at most this many tasks queued or running at once (0: no limit)
};

constexpr std::size_t kMaxArrayTasks = 10000;
constexpr int kMaxArrayIndex = 1000000;

// Errors name the field "array".
core::Result<ArraySpec> parse_array(const std::string& text,
                                    std::size_t max_tasks = kMaxArrayTasks);

}  // namespace allot::server
