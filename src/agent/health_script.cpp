// The operator's health script: /bin/sh -c SCRIPT in a process group of its own, its output read
// through a pipe, killed (group and all) at the timeout.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "agent/health.h"
#include "agent/spawn.h"

namespace allot::agent {
namespace {

std::string seconds_text(std::chrono::milliseconds t) {
  char buf[32];
  if (t.count() % 1000 == 0) {
    std::snprintf(buf, sizeof buf, "%lld s", static_cast<long long>(t.count() / 1000));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(t.count()) / 1000);
  }
  return buf;
}

std::string first_line(const std::string& out) {
  std::size_t start = 0;
  while (start < out.size()) {
    std::size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    std::string line = out.substr(start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) return line;
    start = end + 1;
  }
  return "";
}

}  // namespace

HealthVerdict run_health_script(const std::string& script, std::chrono::milliseconds timeout) {
  HealthVerdict v;
  if (script.empty()) return v;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return {false, std::string("health script: pipe: ") + std::strerror(errno)};
  }
  auto spawned = spawn_process(
      {"/bin/sh", {"/bin/sh", "-c", script}, std::nullopt, out[1], "", /*own_process_group=*/true});
  close(out[1]);
  if (!spawned.ok()) {
    close(out[0]);
    return {false, "health script: " + spawned.error().reason};
  }
  const pid_t pid = spawned.value();

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string output;
  int status = 0;
  bool exited = false, timed_out = false, eof = false;
  while (!exited) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (!eof) {
      // Wake at least every 50 ms: something the script left behind may hold the pipe open.
      pollfd p{out[0], POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 50))) > 0) {
        char buf[4096];
        const ssize_t n = read(out[0], buf, sizeof buf);
        if (n > 0 && output.size() < 65536) output.append(buf, static_cast<std::size_t>(n));
        if (n == 0) eof = true;
      }
    } else {
      usleep(10000);
    }
    exited = waitpid(pid, &status, WNOHANG) == pid;
  }
  ::kill(-pid, SIGKILL);  // the script's group: what it left behind, or all of it at the timeout
  if (!exited) waitpid(pid, &status, 0);
  // What it wrote just before it ended may still be in the pipe.
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  char buf[4096];
  for (ssize_t n; !eof && output.size() < 65536 && (n = read(out[0], buf, sizeof buf)) > 0;) {
    output.append(buf, static_cast<std::size_t>(n));
  }
  close(out[0]);
  if (timed_out) return {false, "health script timed out after " + seconds_text(timeout)};
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return v;
  const std::string line = first_line(output);
  if (!line.empty()) return {false, "health script: " + line};
  if (WIFSIGNALED(status)) {
    return {false, "health script killed by signal " + std::to_string(WTERMSIG(status))};
  }
  return {false, "health script exited with code " + std::to_string(WEXITSTATUS(status))};
}

}  // namespace allot::agent
