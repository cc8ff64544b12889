#include "sim/progress.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace allot::sim {
namespace {

// "950", "12.3k", "1.2M".
std::string count_text(double v) {
  char b[32];
  if (v >= 1e6) {
    std::snprintf(b, sizeof b, "%.1fM", v / 1e6);
  } else if (v >= 1e3) {
    std::snprintf(b, sizeof b, "%.1fk", v / 1e3);
  } else {
    std::snprintf(b, sizeof b, "%.0f", v);
  }
  return b;
}

// Wall-clock seconds as "m:ss" or "h:mm:ss".
std::string clock_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char b[32];
  if (s >= 3600) {
    std::snprintf(b, sizeof b, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(b, sizeof b, "%ld:%02ld", s / 60, s % 60);
  }
  return b;
}

std::string days_text(core::Duration seconds) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", static_cast<double>(seconds) / 86400.0);
  return b;
}

}  // namespace

std::string progress_line(const ProgressSnapshot& s, std::size_t name_width) {
  std::string line = s.name;
  if (line.size() < name_width) line.append(name_width - line.size(), ' ');
  line += "  ";
  if (!s.started) return line + "waiting for a thread";
  const double rate = s.wall_seconds > 0 ? static_cast<double>(s.events) / s.wall_seconds : 0;
  const std::string events = count_text(rate) + " events/s";
  if (s.done) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1fs", s.wall_seconds);
    return line + "done: day " + days_text(s.elapsed) + ", " +
           count_text(static_cast<double>(s.events)) + " events in " +
           (s.wall_seconds < 60 ? std::string(secs) : clock_text(s.wall_seconds)) + " (" + events +
           ")";
  }
  line += "day " + days_text(s.elapsed);
  if (s.expected <= 0) return line + "  " + events;
  if (s.elapsed > s.expected) {
    return line + " (past the ~" + days_text(s.expected) + "-day estimate: draining)  " + events;
  }
  const double share = static_cast<double>(s.elapsed) / static_cast<double>(s.expected);
  char pct[16];
  std::snprintf(pct, sizeof pct, "%3.0f%%", 100 * std::min(share, 0.99));
  line += " of ~" + days_text(s.expected) + "  " + pct + "  " + events;
  if (share > 0.01 && s.wall_seconds > 0) {
    line += "  ETA " + clock_text(s.wall_seconds * (1 - share) / share);
  }
  return line;
}

std::int64_t progress_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ProgressSnapshot snapshot_of(const RunProgress& p, std::string name, std::int64_t now_ns) {
  ProgressSnapshot s;
  s.name = std::move(name);
  s.started = p.started.load(std::memory_order_relaxed);
  s.done = p.done.load(std::memory_order_acquire);
  s.elapsed = p.elapsed.load(std::memory_order_relaxed);
  s.expected = p.expected.load(std::memory_order_relaxed);
  s.events = p.events.load(std::memory_order_relaxed);
  const std::int64_t start = p.start_ns.load(std::memory_order_relaxed);
  const std::int64_t end = s.done ? p.end_ns.load(std::memory_order_relaxed) : now_ns;
  s.wall_seconds = s.started && end > start ? static_cast<double>(end - start) * 1e-9 : 0;
  return s;
}

}  // namespace allot::sim
