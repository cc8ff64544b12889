#include "agent/proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace allot::agent {

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so fields start after
  // the last ')'.
  char* p = std::strrchr(buf, ')');
  if (!p || p[1] != ' ') return std::nullopt;
  p += 2;
  ProcStat s;
  s.pid = pid;
  s.state = *p++;
  // Fields 4.. of proc(5), as unsigned numbers (cutime and cstime are signed but never negative).
  std::uint64_t f[40] = {};
  int field = 4;
  while (*p && field < 43) {
    while (*p == ' ') ++p;
    char* end = nullptr;
    const std::uint64_t v = std::strtoull(p, &end, 10);
    if (end == p) break;
    if (field - 4 < 40) f[field - 4] = v;
    p = end;
    ++field;
  }
  if (field <= 22) return std::nullopt;  // too short to have a start time
  auto at = [&](int i) { return f[i - 4]; };
  s.ppid = static_cast<pid_t>(at(4));
  s.pgrp = static_cast<pid_t>(at(5));
  s.session = static_cast<pid_t>(at(6));
  s.utime = at(14);
  s.stime = at(15);
  s.cutime = static_cast<std::int64_t>(at(16));
  s.cstime = static_cast<std::int64_t>(at(17));
  s.start_ticks = at(22);
  s.rss_pages = static_cast<std::int64_t>(at(24));
  if (field > 42) s.blkio_ticks = at(42);
  return s;
}

bool process_alive(pid_t pid, std::uint64_t start_ticks) {
  if (pid <= 0) return false;
  auto s = read_proc_stat(pid);
  if (!s || s->state == 'Z' || s->state == 'X') return false;
  return start_ticks == 0 || s->start_ticks == start_ticks;
}

std::map<pid_t, std::vector<pid_t>> session_members(const std::vector<pid_t>& sessions) {
  std::map<pid_t, std::vector<pid_t>> out;
  for (pid_t s : sessions) out[s];
  if (sessions.empty()) return out;
  DIR* proc = opendir("/proc");
  if (!proc) return out;
  while (const dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    auto s = read_proc_stat(pid);
    if (!s || s->state == 'Z') continue;
    if (auto it = out.find(s->session); it != out.end()) it->second.push_back(pid);
  }
  closedir(proc);
  for (auto& [sid, pids] : out) std::sort(pids.begin(), pids.end());
  return out;
}

}  // namespace allot::agent
