// Starting a fresh process from the multi-threaded agent: posix_spawn (no code of ours runs
// between fork and exec), stdin from /dev/null, every signal at its default and none blocked
// (whatever the agent's threads ignore or block), output to a descriptor or a log file.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace allot::agent {

struct SpawnSpec {
  std::string path;                             // the program, not searched in PATH
  std::vector<std::string> argv;                // argv[0] included
  std::optional<std::vector<std::string>> env;  // "NAME=value"; none: this process's environment
  int output_fd = -1;                           // stdout and stderr to this descriptor, or else
  std::string output_file;                      // appended to this file (else they are inherited)
  bool own_process_group = false;
};

core::Result<pid_t> spawn_process(const SpawnSpec& spec);

}  // namespace allot::agent
