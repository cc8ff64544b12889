// The progress bar's text: a pure function of a snapshot (simulated time, expected span, events,
// wall time).
#include "sim/progress.h"

#include <gtest/gtest.h>

namespace allot::sim {
namespace {

ProgressSnapshot at(core::Duration elapsed, core::Duration expected, double wall,
                    std::uint64_t events) {
  ProgressSnapshot s;
  s.name = "fifo";
  s.started = true;
  s.elapsed = elapsed;
  s.expected = expected;
  s.wall_seconds = wall;
  s.events = events;
  return s;
}

TEST(ProgressLine, SharesSimulatedTimeWithRateAndEta) {
  // A quarter of 40 days in 10 s: 30 s to go at that pace.
  EXPECT_EQ(progress_line(at(10 * core::kDay, 40 * core::kDay, 10, 250000)),
            "fifo  day 10.0 of ~40.0   25%  25.0k events/s  ETA 0:30");
}

TEST(ProgressLine, PadsNamesSoPoliciesLineUp) {
  EXPECT_EQ(progress_line(at(core::kDay, 4 * core::kDay, 2, 500), 9),
            "fifo       day 1.0 of ~4.0   25%  250 events/s  ETA 0:06");
}

TEST(ProgressLine, LongEtaInHours) {
  EXPECT_EQ(progress_line(at(2 * core::kDay, 100 * core::kDay, 150, 3000000)),
            "fifo  day 2.0 of ~100.0    2%  20.0k events/s  ETA 2:02:30");
}

TEST(ProgressLine, PastTheEstimateTheDayStillMovesAndNoShareStalls) {
  // A backlog draining beyond the lower bound: no percentage stuck at 99, no made-up ETA.
  const std::string a = progress_line(at(41 * core::kDay, 40 * core::kDay, 30, 3000000));
  const std::string b = progress_line(at(45 * core::kDay, 40 * core::kDay, 35, 3500000));
  EXPECT_EQ(a, "fifo  day 41.0 (past the ~40.0-day estimate: draining)  100.0k events/s");
  EXPECT_EQ(b, "fifo  day 45.0 (past the ~40.0-day estimate: draining)  100.0k events/s");
  EXPECT_EQ(a.find('%'), std::string::npos);
  EXPECT_EQ(a.find("ETA"), std::string::npos);
}

TEST(ProgressLine, NeverShowsAHundredPercentBeforeTheEnd) {
  EXPECT_EQ(progress_line(at(40 * core::kDay, 40 * core::kDay, 20, 2000000)),
            "fifo  day 40.0 of ~40.0   99%  100.0k events/s  ETA 0:00");
}

TEST(ProgressLine, NoEtaAtTheVeryStart) {
  EXPECT_EQ(progress_line(at(0, 40 * core::kDay, 0.1, 0)),
            "fifo  day 0.0 of ~40.0    0%  0 events/s");
}

TEST(ProgressLine, WaitingAndDone) {
  ProgressSnapshot s;
  s.name = "fairshare";
  EXPECT_EQ(progress_line(s), "fairshare  waiting for a thread");
  s = at(3 * core::kDay, 40 * core::kDay, 0.25, 1500000);
  s.done = true;
  EXPECT_EQ(progress_line(s), "fifo  done: day 3.0, 1.5M events in 0.2s (6.0M events/s)");
  s.wall_seconds = 75;
  EXPECT_EQ(progress_line(s), "fifo  done: day 3.0, 1.5M events in 1:15 (20.0k events/s)");
}

TEST(ProgressSnapshot, ReadsTheRunsAtomics) {
  RunProgress p;
  EXPECT_FALSE(snapshot_of(p, "x", 0).started);
  p.start_ns = 1'000'000'000;
  p.started = true;
  p.elapsed = 7200;
  p.expected = 86400;
  p.events = 42;
  ProgressSnapshot s = snapshot_of(p, "x", 3'000'000'000);
  EXPECT_TRUE(s.started);
  EXPECT_FALSE(s.done);
  EXPECT_EQ(s.elapsed, 7200);
  EXPECT_EQ(s.expected, 86400);
  EXPECT_EQ(s.events, 42u);
  EXPECT_DOUBLE_EQ(s.wall_seconds, 2.0);
  p.end_ns = 1'500'000'000;
  p.done = true;
  EXPECT_DOUBLE_EQ(snapshot_of(p, "x", 9'000'000'000).wall_seconds, 0.5);  // its whole run
}

}  // namespace
}  // namespace allot::sim
