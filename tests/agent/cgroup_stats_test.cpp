// A run's cgroup v2 CPU usage and pressure (agent/cgroup_stats.h): the parsers on the kernel's
// formats, the files read from a directory laid out like a cgroup's, and the aggregator's mean
// of the pressure a run's samples carried.
#include "agent/cgroup_stats.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "agent/telemetry.h"

namespace allot::agent {
namespace {

TEST(CgroupStats, ParsesCpuStatAndPressureAndRefusesMalformedLines) {
  EXPECT_EQ(cpu_usage_usec("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"), 2500000);
  EXPECT_FALSE(cpu_usage_usec("user_usec 1\n"));
  EXPECT_FALSE(cpu_usage_usec("usage_usec lots\n"));
  EXPECT_FALSE(cpu_usage_usec(""));
  const std::string psi =
      "some avg10=12.50 avg60=3.00 avg300=1.00 total=123456\n"
      "full avg10=2.00 avg60=1.00 avg300=0.50 total=2345\n";
  EXPECT_DOUBLE_EQ(pressure_some_avg10(psi).value(), 12.5);
  EXPECT_FALSE(pressure_some_avg10("full avg10=2.00 avg60=1.00 avg300=0.50 total=2345\n"));
  EXPECT_FALSE(pressure_some_avg10("some avg10=x avg60=1\n"));
  EXPECT_FALSE(pressure_some_avg10(""));
}

TEST(CgroupStats, ReadsADirectoryAndLeavesWhatIsMissingUnknown) {
  std::random_device rd;
  const auto dir = std::filesystem::temp_directory_path() / ("allot-cg-" + std::to_string(rd()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "cpu.stat") << "usage_usec 3000000\nuser_usec 3000000\n";
  std::ofstream(dir / "io.pressure") << "some avg10=40.00 avg60=0 avg300=0 total=1\n"
                                     << "full avg10=30.00 avg60=0 avg300=0 total=1\n";
  const auto s = read_cgroup_stats(dir.string());
  EXPECT_DOUBLE_EQ(s.cpu_seconds, 3);
  EXPECT_DOUBLE_EQ(s.io_pressure_pct, 40);
  EXPECT_EQ(s.cpu_pressure_pct, -1);  // no cpu.pressure (a kernel without PSI for it)
  std::filesystem::remove_all(dir);
  // No cgroup (not root, no cgroup v2): every figure unknown, nothing fails.
  const auto none = read_cgroup_stats("");
  EXPECT_EQ(none.cpu_seconds, -1);
  EXPECT_EQ(none.io_pressure_pct, -1);
  EXPECT_EQ(read_cgroup_stats("/nonexistent/cgroup").cpu_seconds, -1);
}

TEST(CgroupStats, TheAggregatorReportsTheMeanPressureOfTheSamplesThatHadIt) {
  TelemetryAggregator agg;
  const RunKey a{1, 1}, b{2, 1};
  auto at = [](double cpu, double io_pressure) {
    ProcessTimes t;
    t.cpu_seconds = cpu;
    t.io_pressure_pct = io_pressure;
    return t;
  };
  GpuSample g;
  g.util_pct = 5;
  agg.add(0, {g}, {{a, {0}}}, {{a, at(0, 30)}, {b, at(0, -1)}});
  agg.add(1, {g}, {{a, {0}}}, {{a, at(1, 50)}, {b, at(1, -1)}});
  agg.add(2, {g}, {{a, {0}}}, {{a, at(2, -1)}, {b, at(2, -1)}});
  auto jobs = agg.take_jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_DOUBLE_EQ(jobs[0].io_pressure_pct_mean, 40);  // the two samples that had it
  EXPECT_EQ(jobs[0].cpu_pressure_pct_mean, -1);
  EXPECT_EQ(jobs[1].io_pressure_pct_mean, -1);  // never known: not reported
  EXPECT_DOUBLE_EQ(jobs[0].cpu_pct_mean, 100);
}

}  // namespace
}  // namespace allot::agent
