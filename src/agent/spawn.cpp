#include "agent/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>

#include <cstring>

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it to us

namespace allot::agent {

core::Result<pid_t> spawn_process(const SpawnSpec& spec) {
  std::vector<char*> argv, env;
  for (const std::string& s : spec.argv) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  if (spec.env) {
    for (const std::string& s : *spec.env) env.push_back(const_cast<char*>(s.c_str()));
    env.push_back(nullptr);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (spec.output_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, spec.output_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, spec.output_fd, 2);
  } else if (!spec.output_file.empty()) {
    posix_spawn_file_actions_addopen(&fa, 1, spec.output_file.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (spec.own_process_group) {
    posix_spawnattr_setpgroup(&attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  posix_spawnattr_setflags(&attr, flags);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, spec.path.c_str(), &fa, &attr, argv.data(),
                             spec.env ? env.data() : environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return core::Error{"spawn", "cannot start " + spec.path + ": " + std::strerror(rc)};
  return pid;
}

}  // namespace allot::agent
