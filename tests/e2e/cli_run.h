// Running the `allot` binary from an end-to-end test, as a person would from a shell.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace allot::e2e {

struct CliRun {
  int code = -1;    // exit status (-1: it did not exit normally, or could not be started)
  std::string out;  // stdout and stderr together
};

// Runs `allot ARGS` through the shell, with `env` (e.g. "ALLOT_ADDR=... ALLOT_TOKEN=...") in
// front of it. Needs ALLOT_BIN, the binary's path, defined by the test's target.
inline CliRun run_allot(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + (env.empty() ? "" : " ") + ALLOT_BIN + " " + args + " 2>&1";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace allot::e2e
