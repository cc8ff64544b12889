// What /proc says about processes: one process's stat line (state, session, CPU and I/O-wait
// ticks, resident pages, start time), liveness guarded against pid reuse by the start time, and
// the members of a session.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace allot::agent {

struct ProcStat {
  pid_t pid = 0;
  char state = '?';  // R, S, D, Z, T, ...
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  std::uint64_t utime = 0, stime = 0;   // clock ticks
  std::int64_t cutime = 0, cstime = 0;  // of children it waited for
  std::uint64_t start_ticks = 0;        // since boot: with the pid, names a process for good
  std::int64_t rss_pages = 0;
  std::uint64_t blkio_ticks = 0;  // delayacct_blkio_ticks (0 where the kernel does not account)
};

std::optional<ProcStat> read_proc_stat(pid_t pid);

// The process exists, is not a zombie, and (when start_ticks != 0) started at that time: the
// pid has not been reused by another process since.
bool process_alive(pid_t pid, std::uint64_t start_ticks);

// Every process of the given sessions (one scan of /proc), by session id.
std::map<pid_t, std::vector<pid_t>> session_members(const std::vector<pid_t>& sessions);

}  // namespace allot::agent
