// The running jobs' recent telemetry points (server/telemetry_series.h): bounded per job and in
// jobs, one point per second however many nodes report, a new run starting afresh.

#include "server/telemetry_series.h"

#include <gtest/gtest.h>

namespace allot::server {
namespace {

TEST(TelemetrySeries, KeepsTheLastPointsOfTheCurrentRun) {
  TelemetrySeries s;
  for (int i = 0; i < 200; ++i) s.add(7, 1, "n1", 1000 + i, i % 100, 100 + i, 1000);
  auto pts = s.points(7, 1);
  ASSERT_EQ(pts.size(), TelemetrySeries::kPoints);
  EXPECT_EQ(pts.front().time, 1000 + 200 - static_cast<core::Time>(TelemetrySeries::kPoints));
  EXPECT_EQ(pts.back().time, 1199);
  EXPECT_EQ(pts.back().mem_used_mib, 299);
  EXPECT_TRUE(s.points(7, 2).empty());
  EXPECT_TRUE(s.points(8, 1).empty());
  // A second run replaces the first; a late report of the first is dropped.
  s.add(7, 2, "n1", 2000, 50, 10, 1000);
  s.add(7, 1, "n1", 2001, 99, 10, 1000);
  EXPECT_TRUE(s.points(7, 1).empty());
  ASSERT_EQ(s.points(7, 2).size(), 1u);
  EXPECT_EQ(s.points(7, 2)[0].gpu_util_pct, 50);
}

TEST(TelemetrySeries, NodesReportingTheSameSecondMakeOnePoint) {
  TelemetrySeries s;
  s.add(1, 1, "n1", 10, 40, 100, 800);
  s.add(1, 1, "n2", 10, 80, 300, 800);
  s.add(1, 1, "n3", 10, 60, 200, 800);
  s.add(1, 1, "n1", 9, 10, 1, 1);  // out of order: dropped
  auto pts = s.points(1, 1);
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_DOUBLE_EQ(pts[0].gpu_util_pct, 60);
  EXPECT_EQ(pts[0].mem_used_mib, 600);
  EXPECT_EQ(pts[0].mem_total_mib, 2400);
  EXPECT_EQ(pts[0].reports, 3);
}

// An agent that reports twice within one second (a short --telemetry-ms) is counted once: its
// newer report replaces its older one instead of doubling the job's memory.
TEST(TelemetrySeries, ANodesSecondReportInOneSecondReplacesItsFirst) {
  TelemetrySeries s;
  s.add(1, 1, "n1", 10, 40, 100, 800);
  s.add(1, 1, "n2", 10, 80, 300, 800);
  s.add(1, 1, "n1", 10, 60, 150, 800);
  auto pts = s.points(1, 1);
  ASSERT_EQ(pts.size(), 1u);
  EXPECT_DOUBLE_EQ(pts[0].gpu_util_pct, 70);
  EXPECT_EQ(pts[0].mem_used_mib, 450);
  EXPECT_EQ(pts[0].mem_total_mib, 1600);
  EXPECT_EQ(pts[0].reports, 2);
  // The next second starts a point of its own.
  s.add(1, 1, "n1", 11, 10, 5, 800);
  pts = s.points(1, 1);
  ASSERT_EQ(pts.size(), 2u);
  EXPECT_EQ(pts[1].mem_used_mib, 5);
  EXPECT_EQ(pts[1].reports, 1);
}

TEST(TelemetrySeries, DropsTheJobReportedLeastRecentlyBeyondItsBound) {
  TelemetrySeries s;
  for (core::JobId j = 1; j <= TelemetrySeries::kJobs; ++j) s.add(j, 1, "n", 1, 1, 1, 1);
  s.add(1, 1, "n", 2, 1, 1, 1);  // job 1 reported again: now the most recent
  s.add(TelemetrySeries::kJobs + 1, 1, "n", 3, 1, 1, 1);  // one too many: job 2 goes
  EXPECT_EQ(s.points(1, 1).size(), 2u);
  EXPECT_TRUE(s.points(2, 1).empty());
  EXPECT_EQ(s.points(3, 1).size(), 1u);
  EXPECT_EQ(s.points(TelemetrySeries::kJobs + 1, 1).size(), 1u);
}

}  // namespace
}  // namespace allot::server
