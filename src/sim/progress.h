// Progress of simulation runs, for the bar on stderr: each run's thread stores its simulated time
// and event count with relaxed atomic stores (nothing else in the event loop), and a reader turns
// a snapshot of them into one line of text per run.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/types.h"

namespace allot::sim {

// Written by one run's thread, read by the progress bar's.
struct RunProgress {
  // Simulated seconds since the first submission.
  std::atomic<core::Duration> elapsed{0};
  // The run's expected span in simulated seconds (set once at the start): the period asked for
  // (--until, a lab workload's --days), else a lower bound of when the last job can end (the
  // latest submission + duration, and all the work at full capacity).
  std::atomic<core::Duration> expected{0};
  std::atomic<std::uint64_t> events{0};
  std::atomic<bool> started{false}, done{false};
  // Wall-clock start and end (steady_clock nanoseconds), stored once each.
  std::atomic<std::int64_t> start_ns{0}, end_ns{0};
};

// steady_clock now, in nanoseconds (RunProgress's clock).
std::int64_t progress_clock_ns();

// What the bar shows of one run at one moment.
struct ProgressSnapshot {
  std::string name;  // the policy (and sweep label)
  bool started = false, done = false;
  core::Duration elapsed = 0, expected = 0;  // simulated seconds
  std::uint64_t events = 0;
  double wall_seconds = 0;  // since the run started (its whole run once done)
};

// One line, no newline: "fifo      day 12.4 of ~40.0  31%  1.2M events/s  ETA 0:42". Past the
// expected span (a backlog draining) it shows the simulated time still moving and no share, and
// no ETA: the share is of simulated time, so it never stalls while the time moves.
std::string progress_line(const ProgressSnapshot& s, std::size_t name_width = 0);

// Reads a RunProgress into a snapshot at `now_ns` (progress_clock_ns()).
ProgressSnapshot snapshot_of(const RunProgress& p, std::string name, std::int64_t now_ns);

}  // namespace allot::sim
