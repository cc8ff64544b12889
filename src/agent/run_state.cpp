#include "agent/run_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace allot::agent {
namespace {

using Fields = std::map<std::string, std::string>;

bool write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = fsync(fd) == 0 && ok;
  ok = close(fd) == 0 && ok;
  if (ok && rename(tmp.c_str(), path.c_str()) == 0) return true;
  unlink(tmp.c_str());
  return false;
}

std::optional<Fields> read_fields(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[1024];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  close(fd);
  Fields f;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    const std::size_t space = line.find(' ');
    if (space == std::string::npos) {
      f[line] = "";
    } else {
      f[line.substr(0, space)] = line.substr(space + 1);
    }
  }
  return f;
}

std::int64_t number(const Fields& f, const char* key) {
  auto it = f.find(key);
  return it == f.end() ? 0 : std::strtoll(it->second.c_str(), nullptr, 10);
}

std::string text(const Fields& f, const char* key) {
  auto it = f.find(key);
  return it == f.end() ? "" : it->second;
}

// Values are single lines: an error message with a newline keeps its first line only.
std::string one_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

}  // namespace

bool write_pid_record(const RunFiles& run, const PidRecord& r) {
  return write_atomically(run.path("pid"), "job_pid " + std::to_string(r.job_pid) + "\njob_start " +
                                               std::to_string(r.job_start) + "\nshim_pid " +
                                               std::to_string(r.shim_pid) + "\nshim_start " +
                                               std::to_string(r.shim_start) + "\nstarted_ms " +
                                               std::to_string(r.started_ms) + "\ncgroup " +
                                               one_line(r.cgroup) + "\ndevices_cgroup " +
                                               one_line(r.devices_cgroup) + "\n");
}

bool write_exit_record(const RunFiles& run, const ExitRecord& r) {
  return write_atomically(run.path("exit"), "exit_code " + std::to_string(r.exit_code) +
                                                "\nsignal " + std::to_string(r.signal) +
                                                "\nerror " + one_line(r.error) + "\n");
}

bool write_stop_record(const RunFiles& run, const StopRecord& r) {
  return write_atomically(run.path("stop"), "kill_at_ms " + std::to_string(r.kill_at_ms) +
                                                "\nterm_at_ms " + std::to_string(r.term_at_ms) +
                                                "\n");
}

bool write_stop_notice(const RunFiles& run, const StopRecord& r) {
  return write_atomically(run.path("stop_notice"),
                          "term_at " + std::to_string(r.term_at_ms / 1000) + "\nkill_at " +
                              std::to_string(r.kill_at_ms / 1000) + "\n");
}

bool write_notice_signal(const RunFiles& run, int signal) {
  return write_atomically(run.path("notice_signal"), "signal " + std::to_string(signal) + "\n");
}

int read_notice_signal(const RunFiles& run) {
  auto f = read_fields(run.path("notice_signal"));
  if (!f) return 0;
  const auto n = number(*f, "signal");
  return n > 0 && n < 65 ? static_cast<int>(n) : 0;
}

std::optional<PidRecord> read_pid_record(const RunFiles& run) {
  auto f = read_fields(run.path("pid"));
  if (!f) return std::nullopt;
  PidRecord r;
  r.job_pid = static_cast<pid_t>(number(*f, "job_pid"));
  r.job_start = static_cast<std::uint64_t>(number(*f, "job_start"));
  r.shim_pid = static_cast<pid_t>(number(*f, "shim_pid"));
  r.shim_start = static_cast<std::uint64_t>(number(*f, "shim_start"));
  r.started_ms = number(*f, "started_ms");
  r.cgroup = text(*f, "cgroup");
  r.devices_cgroup = text(*f, "devices_cgroup");
  if (r.job_pid <= 0) return std::nullopt;
  return r;
}

std::optional<ExitRecord> read_exit_record(const RunFiles& run) {
  auto f = read_fields(run.path("exit"));
  if (!f) return std::nullopt;
  ExitRecord r;
  r.exit_code = static_cast<int>(number(*f, "exit_code"));
  r.signal = static_cast<int>(number(*f, "signal"));
  r.error = text(*f, "error");
  return r;
}

std::optional<StopRecord> read_stop_record(const RunFiles& run) {
  auto f = read_fields(run.path("stop"));
  if (!f) return std::nullopt;
  return StopRecord{number(*f, "kill_at_ms"), number(*f, "term_at_ms")};
}

std::int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool has_run_records(const RunFiles& run) {
  return access(run.path("pid").c_str(), F_OK) == 0 || access(run.path("exit").c_str(), F_OK) == 0;
}

void remove_run_records(const RunFiles& run) {
  for (const char* f : {"pid", "exit", "stop", "notice_signal"}) unlink(run.path(f).c_str());
}

}  // namespace allot::agent
