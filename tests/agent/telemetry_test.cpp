// The telemetry aggregator, with numbers checkable by hand, and process times from /proc.
#include "agent/telemetry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <ctime>

namespace allot::agent {
namespace {

GpuSample gpu(int index, double util, std::int64_t mem_used) {
  GpuSample s;
  s.index = index;
  s.util_pct = util;
  s.mem_used_mib = mem_used;
  s.mem_total_mib = 81559;
  return s;
}

ProcessTimes times(double cpu, double io) {
  ProcessTimes t;
  t.cpu_seconds = cpu;
  t.io_wait_seconds = io;
  return t;
}

const RunKey kA{12, 1};
const RunKey kB{13, 2};

TEST(Telemetry, MeansPeaksAndCpuOverAnInterval) {
  TelemetryAggregator agg;
  const GpuHolders holders = {{kA, {0, 1}}, {kB, {2}}};
  // Run A's mean use over its two GPUs per sample: 70, 100, 30, 60; run B's: 10, 30, 20, 40.
  agg.add(0, {gpu(0, 80, 1000), gpu(1, 60, 2000), gpu(2, 10, 500)}, holders,
          {{kA, times(10, 0)}, {kB, times(1, 0)}});
  agg.add(1, {gpu(0, 100, 5000), gpu(1, 100, 5000), gpu(2, 30, 500)}, holders,
          {{kA, times(12, 1)}, {kB, times(1.5, 0)}});
  agg.add(2, {gpu(0, 40, 1000), gpu(1, 20, 2000), gpu(2, 20, 700)}, holders,
          {{kA, times(14, 1)}, {kB, times(2, 0)}});
  agg.add(3, {gpu(0, 60, 2000), gpu(1, 60, 2000), gpu(2, 40, 600)}, holders,
          {{kA, times(16, 2)}, {kB, times(2.5, 0)}});
  EXPECT_EQ(agg.last_gpus().size(), 3u);
  EXPECT_EQ(agg.last_gpus()[2].util_pct, 40);

  const std::vector<JobTelemetry> jobs = agg.take_jobs();
  ASSERT_EQ(jobs.size(), 2u);
  const JobTelemetry& a = jobs[0];
  EXPECT_EQ(a.key, kA);
  EXPECT_EQ(a.samples, 4);
  EXPECT_DOUBLE_EQ(a.seconds, 3);
  EXPECT_DOUBLE_EQ(a.gpu_util_mean, 65);  // (70 + 100 + 30 + 60) / 4
  EXPECT_DOUBLE_EQ(a.gpu_util_peak, 100);
  EXPECT_EQ(a.mem_used_peak_mib, 10000);     // 5000 + 5000 at t = 1
  EXPECT_EQ(a.mem_total_mib, 163118);        // two GPUs of 81559
  EXPECT_DOUBLE_EQ(a.cpu_pct_mean, 200);     // 6 CPU-seconds over 3 s
  EXPECT_DOUBLE_EQ(a.io_wait_pct_mean, 25);  // 2 s waiting of 6 + 2
  const JobTelemetry& b = jobs[1];
  EXPECT_EQ(b.key, kB);
  EXPECT_DOUBLE_EQ(b.gpu_util_mean, 25);
  EXPECT_DOUBLE_EQ(b.gpu_util_peak, 40);
  EXPECT_EQ(b.mem_used_peak_mib, 700);
  EXPECT_EQ(b.mem_total_mib, 81559);
  EXPECT_DOUBLE_EQ(b.cpu_pct_mean, 50);  // 1.5 s over 3 s
  EXPECT_DOUBLE_EQ(b.io_wait_pct_mean, 0);
}

TEST(Telemetry, NextIntervalStartsAtThePreviousLastSample) {
  TelemetryAggregator agg;
  const GpuHolders both = {{kA, {0}}, {kB, {1}}};
  agg.add(0, {gpu(0, 10, 1), gpu(1, 10, 1)}, both, {{kA, times(100, 5)}});
  agg.add(1, {gpu(0, 10, 1), gpu(1, 10, 1)}, both, {{kA, times(101, 5)}});
  agg.take_jobs();
  // Only A goes on; B has ended.
  agg.add(2, {gpu(0, 50, 1), gpu(1, 0, 0)}, {{kA, {0}}}, {{kA, times(102.5, 5.5)}});
  agg.add(3, {gpu(0, 30, 1), gpu(1, 0, 0)}, {{kA, {0}}}, {{kA, times(104, 6)}});
  const std::vector<JobTelemetry> jobs = agg.take_jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].key, kA);
  EXPECT_EQ(jobs[0].samples, 2);
  EXPECT_DOUBLE_EQ(jobs[0].seconds, 2);            // from t = 1 to t = 3
  EXPECT_DOUBLE_EQ(jobs[0].gpu_util_mean, 40);     // (50 + 30) / 2, not the first interval's 10s
  EXPECT_DOUBLE_EQ(jobs[0].cpu_pct_mean, 150);     // 3 CPU-seconds over 2 s
  EXPECT_DOUBLE_EQ(jobs[0].io_wait_pct_mean, 25);  // 1 of 3 + 1
  EXPECT_TRUE(agg.take_jobs().empty()) << "nothing sampled since: nothing to report";
}

TEST(Telemetry, MigRunsCountTheirOwnInstancesMemory) {
  TelemetryAggregator agg;
  GpuSample parent = gpu(0, -1, 20000);  // in MIG mode: no utilisation, memory of every instance
  parent.mig = {{"MIG-a", 3000, 9984}, {"MIG-b", 12000, 40448}, {"MIG-c", 5000, 9984}};
  const GpuHolders holders = {{kA, {0}}, {kB, {0}}};
  const MigHolders migs = {{kA, {"MIG-a"}}, {kB, {"MIG-b", "MIG-c"}}};
  agg.add(0, {parent}, holders, {}, migs);
  parent.mig[0].mem_used_mib = 4000;
  agg.add(1, {parent}, holders, {}, migs);
  const auto jobs = agg.take_jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].mem_used_peak_mib, 4000) << "its instance's, not the GPU's 20000";
  EXPECT_EQ(jobs[0].mem_total_mib, 9984);
  EXPECT_EQ(jobs[0].gpu_util_mean, 0) << "no per-instance utilisation from NVML";
  EXPECT_EQ(jobs[1].mem_used_peak_mib, 17000);
  EXPECT_EQ(jobs[1].mem_total_mib, 50432);
  // A backend that samples no MIG device (the fake one): the parent GPU's figures stand.
  parent.mig.clear();
  agg.add(2, {parent}, holders, {}, migs);
  EXPECT_EQ(agg.take_jobs()[0].mem_used_peak_mib, 20000);
}

TEST(Telemetry, UnknownAndLostGpusAreLeftOut) {
  TelemetryAggregator agg;
  GpuSample lost = gpu(1, 99, 9999);
  lost.present = false;
  GpuSample unknown = gpu(2, -1, -1);
  agg.add(0, {gpu(0, 60, 100), lost, unknown}, {{kA, {0, 1, 2}}}, {});
  agg.add(1, {gpu(0, 80, 300), lost, unknown}, {{kA, {0, 1, 2}}}, {});
  const auto jobs = agg.take_jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_DOUBLE_EQ(jobs[0].gpu_util_mean, 70);
  EXPECT_EQ(jobs[0].mem_used_peak_mib, 300);
  EXPECT_DOUBLE_EQ(jobs[0].cpu_pct_mean, 0) << "no process times given";
}

TEST(Telemetry, CpuOnlyRunAndFallingTotals) {
  TelemetryAggregator agg;
  agg.add(0, {}, {}, {{kB, times(50, 0)}});
  agg.add(2, {}, {}, {{kB, times(49, 0)}});  // a process ended with its time: never negative
  const auto jobs = agg.take_jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].samples, 2);
  EXPECT_DOUBLE_EQ(jobs[0].cpu_pct_mean, 0);
  EXPECT_DOUBLE_EQ(jobs[0].gpu_util_mean, 0);
}

TEST(ProcessTimes, ReadsThisProcess) {
  // Spin for 60 ms of CPU time (not wall time: on a loaded machine that could be no CPU at all),
  // several clock ticks' worth.
  const std::clock_t until = std::clock() + CLOCKS_PER_SEC * 6 / 100;
  volatile unsigned long spin = 0;
  while (std::clock() < until) spin = spin + 1;
  const ProcessTimes t = process_times({getpid()});
  EXPECT_GT(t.cpu_seconds, 0);
  EXPECT_GE(t.io_wait_seconds, 0);
  EXPECT_GT(t.rss_mib, 0);
  const ProcessTimes none = process_times({999999999});
  EXPECT_EQ(none.cpu_seconds, 0);
  EXPECT_EQ(none.rss_mib, 0);
}

}  // namespace
}  // namespace allot::agent
