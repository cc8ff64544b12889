// Every health rule, the XID memory between verdicts, and the health script with its timeout.
#include "agent/health.h"

#include <gtest/gtest.h>

#include <chrono>

namespace allot::agent {
namespace {

std::vector<GpuDevice> devices(int n) {
  std::vector<GpuDevice> out;
  for (int i = 0; i < n; ++i) {
    GpuDevice d;
    d.index = i;
    d.uuid = "GPU-fake-n01-" + std::to_string(i);
    out.push_back(d);
  }
  return out;
}

std::vector<GpuSample> healthy_samples(int n) {
  std::vector<GpuSample> out;
  for (int i = 0; i < n; ++i) {
    GpuSample s;
    s.index = i;
    s.util_pct = 50;
    s.temp_c = 60;
    s.ecc_uncorrected = 0;
    out.push_back(s);
  }
  return out;
}

HealthVerdict check(const std::vector<GpuSample>& samples, const HealthThresholds& t = {}) {
  return evaluate(devices(static_cast<int>(samples.size())), samples, t);
}

TEST(Health, HealthyNode) {
  HealthVerdict v = check(healthy_samples(8));
  EXPECT_TRUE(v.healthy);
  EXPECT_EQ(v.reason, "");
}

TEST(Health, UnknownReadingsAreNotFailures) {
  std::vector<GpuSample> s(2);
  s[0].index = 0;
  s[1].index = 1;  // every field -1: unknown
  EXPECT_TRUE(check(s).healthy);
}

TEST(Health, BackendError) {
  HealthVerdict v = evaluate(devices(2), core::Error{"nvml", "nvmlDeviceGetCount_v2 failed"}, {});
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason, "GPU backend: nvml: nvmlDeviceGetCount_v2 failed");
}

TEST(Health, MissingGpu) {
  std::vector<GpuSample> s = healthy_samples(3);
  s.erase(s.begin() + 1);
  HealthVerdict v = evaluate(devices(3), s, {});
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason, "GPU 1 (GPU-fake-n01-1) missing from the samples");
}

TEST(Health, LostGpu) {
  std::vector<GpuSample> s = healthy_samples(4);
  s[2].present = false;
  s[2].error = "memory: GPU is lost (NVML error 15)";
  HealthVerdict v = check(s);
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason, "GPU 2 lost: memory: GPU is lost (NVML error 15)");
}

TEST(Health, EccOverThreshold) {
  std::vector<GpuSample> s = healthy_samples(4);
  s[3].ecc_uncorrected = 5;
  EXPECT_EQ(check(s).reason, "GPU 3: 5 uncorrected ECC errors (more than 0)");
  HealthThresholds lenient;
  lenient.max_ecc_uncorrected = 5;
  EXPECT_TRUE(check(s, lenient).healthy) << "at the threshold is still healthy";
  s[3].ecc_uncorrected = 6;
  EXPECT_EQ(check(s, lenient).reason, "GPU 3: 6 uncorrected ECC errors (more than 5)");
}

TEST(Health, FatalXid) {
  std::vector<GpuSample> s = healthy_samples(2);
  s[1].xids = {13, 79, 79};
  HealthVerdict v = check(s);
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason, "GPU 1: XID 79 (GPU fell off the bus)") << "13 is an application error";
  s[1].xids = {31};
  EXPECT_TRUE(check(s).healthy);
  HealthThresholds strict;
  strict.fatal_xids = {31};
  EXPECT_EQ(check(s, strict).reason, "GPU 1: XID 31");
}

TEST(Health, Temperature) {
  std::vector<GpuSample> s = healthy_samples(2);
  s[0].temp_c = 90;
  EXPECT_TRUE(check(s).healthy) << "at the limit";
  s[0].temp_c = 95.5;
  EXPECT_EQ(check(s).reason, "GPU 0: temperature 95.5 C (above 90 C)");
}

TEST(Health, EveryFailureIsNamed) {
  std::vector<GpuSample> s = healthy_samples(4);
  s[3].temp_c = 99;
  s[0].ecc_uncorrected = 1;
  s[0].xids = {48};
  s[2].present = false;
  EXPECT_EQ(check(s).reason,
            "GPU 0: 1 uncorrected ECC errors (more than 0); GPU 0: XID 48 (double-bit ECC "
            "error); GPU 2 lost; GPU 3: temperature 99 C (above 90 C)");
}

TEST(Health, MonitorHoldsFatalXidsBetweenVerdicts) {
  HealthThresholds t;
  HealthMonitor monitor(devices(2), t);
  std::vector<GpuSample> s = healthy_samples(2);
  monitor.observe(1, s);
  EXPECT_TRUE(monitor.verdict().healthy);
  s[1].xids = {79};
  monitor.observe(2, s);
  s[1].xids.clear();
  monitor.observe(3, s);
  monitor.observe(4, s);
  HealthVerdict v = monitor.verdict();
  EXPECT_FALSE(v.healthy) << "an XID seen in any sample counts";
  EXPECT_EQ(v.reason, "GPU 1: XID 79 (GPU fell off the bus)");
  monitor.observe(5, core::Error{"nvml", "gone"});
  EXPECT_EQ(monitor.verdict().reason,
            "GPU backend: nvml: gone; GPU 1: XID 79 (GPU fell off the bus)");
}

TEST(Health, MonitorReleasesXidsAfterTheHold) {
  HealthThresholds t;
  t.xid_hold_seconds = 60;
  HealthMonitor monitor(devices(1), t);
  std::vector<GpuSample> s = healthy_samples(1);
  s[0].xids = {79};
  monitor.observe(10, s);
  s[0].xids.clear();
  monitor.observe(69, s);
  EXPECT_FALSE(monitor.verdict().healthy);
  monitor.observe(70, s);
  EXPECT_TRUE(monitor.verdict().healthy);
}

TEST(Health, RecoverableXidsClearWhileFatalOnesStay) {
  HealthThresholds t;  // defaults: fatal XIDs held until the agent restarts, 94 and 68 for 60 s
  HealthMonitor monitor(devices(2), t);
  std::vector<GpuSample> s = healthy_samples(2);
  s[0].xids = {94};
  s[1].xids = {154};
  monitor.observe(10, s);
  EXPECT_EQ(monitor.verdict().reason,
            "GPU 0: XID 94 (contained ECC error); GPU 1: XID 154 (the driver asks for a GPU reset "
            "or a reboot)");
  s[0].xids.clear();
  s[1].xids.clear();
  monitor.observe(69, s);
  EXPECT_NE(monitor.verdict().reason.find("XID 94"), std::string::npos);
  monitor.observe(70, s);
  EXPECT_EQ(monitor.verdict().reason,
            "GPU 1: XID 154 (the driver asks for a GPU reset or a reboot)")
      << "94 clears; 154 stays";
  s[0].xids = {68};
  monitor.observe(1000, s);
  EXPECT_NE(monitor.verdict().reason.find("GPU 0: XID 68 (video decoder exception)"),
            std::string::npos);
  s[0].xids.clear();
  monitor.observe(1060, s);
  EXPECT_EQ(monitor.verdict().reason.find("XID 68"), std::string::npos) << monitor.verdict().reason;
}

TEST(Health, MergeKeepsBothReasons) {
  HealthVerdict a{false, "GPU 1 lost"};
  merge(a, {true, ""});
  EXPECT_EQ(a.reason, "GPU 1 lost");
  merge(a, {false, "health script: disk full"});
  EXPECT_EQ(a.reason, "GPU 1 lost; health script: disk full");
  HealthVerdict b;
  merge(b, {false, "x"});
  EXPECT_FALSE(b.healthy);
}

TEST(HealthScript, ZeroExitIsHealthy) {
  EXPECT_TRUE(run_health_script("exit 0", std::chrono::seconds(10)).healthy);
  EXPECT_TRUE(run_health_script("", std::chrono::seconds(10)).healthy);
}

TEST(HealthScript, FailureGivesItsFirstLine) {
  HealthVerdict v = run_health_script("echo; echo 'disk /scratch full'; echo more; exit 1",
                                      std::chrono::seconds(10));
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason, "health script: disk /scratch full");
  EXPECT_EQ(run_health_script("exit 3", std::chrono::seconds(10)).reason,
            "health script exited with code 3");
  EXPECT_EQ(run_health_script("echo oops >&2; kill -9 $$", std::chrono::seconds(10)).reason,
            "health script: oops");
}

TEST(HealthScript, TimeoutKillsItsGroup) {
  const auto t0 = std::chrono::steady_clock::now();
  HealthVerdict v = run_health_script("sleep 30 & sleep 30", std::chrono::milliseconds(200));
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason, "health script timed out after 0.2 s");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(run_health_script("sleep 30", std::chrono::seconds(1)).reason,
            "health script timed out after 1 s");
}

TEST(HealthScript, ABackgroundChildHoldingThePipeDoesNotStallIt) {
  const auto t0 = std::chrono::steady_clock::now();
  HealthVerdict v = run_health_script("sleep 30 & echo started; exit 0", std::chrono::seconds(20));
  EXPECT_TRUE(v.healthy) << v.reason;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

}  // namespace
}  // namespace allot::agent
