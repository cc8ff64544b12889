// The NVML backend through a real dlopen() of a fake libnvidia-ml (fake_nvml.cpp): discovery,
// sampling, MIG, XID events, each way loading or reading can fail, and what the real driver does
// that a naive fake would not (NvmlDriver.*: profile names, reserved memory, resets, event
// failures, a caller that is not root).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "agent/gpu_backend.h"
#include "agent/health.h"
#include "fake_nvml_handle.h"

namespace allot::agent {
namespace {

TEST(NvmlBackend, MissingLibraryIsAClearError) {
  auto b = make_nvml_backend("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().reason,
            "/nonexistent/libnvidia-ml.so.1 not found: no NVIDIA driver on this machine");
}

TEST(NvmlBackend, DefaultLibraryOnThisMachine) {
  auto b = make_nvml_backend();
  if (b.ok()) GTEST_SKIP() << "this machine has an NVIDIA driver; the probe covers it";
  EXPECT_NE(b.error().reason.find("libnvidia-ml.so.1"), std::string::npos) << b.error().message();
}

TEST(NvmlBackend, NotASharedLibrary) {
  auto b = make_nvml_backend("/etc/hostname");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().reason.find("/etc/hostname cannot be loaded: "), std::string::npos)
      << b.error().message();
}

TEST(NvmlBackend, RequiredSymbolMissing) {
  FakeNvml lib(FAKE_NVML_WITHOUT_COUNT_LIBRARY);
  auto b = make_nvml_backend(FAKE_NVML_WITHOUT_COUNT_LIBRARY);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().reason.find("has no nvmlDeviceGetCount_v2"), std::string::npos)
      << b.error().message();
  EXPECT_EQ(lib.inits(), 0) << "nothing initialised before every symbol was found";
}

TEST(NvmlBackend, InitFailureNamesTheReason) {
  FakeNvml lib;
  lib.configure("init=9");
  auto b = make_nvml_backend(FAKE_NVML_LIBRARY);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().reason,
            "nvmlInit_v2 failed: Driver Not Loaded (NVML error 9): the NVIDIA kernel driver is "
            "not loaded");
}

TEST(NvmlBackend, DiscoversAndSamples) {
  FakeNvml lib;
  {
    auto b = make_nvml_backend(FAKE_NVML_LIBRARY);
    ASSERT_TRUE(b.ok()) << b.error().message();
    GpuBackend& nvml = *b.value();
    EXPECT_EQ(nvml.name(), "nvml");
    auto d = nvml.discover();
    ASSERT_TRUE(d.ok()) << d.error().message();
    ASSERT_EQ(d.value().size(), 2u);
    const GpuDevice& g1 = d.value()[1];
    EXPECT_EQ(g1.index, 1);
    EXPECT_EQ(g1.uuid, "GPU-5e1f0000-0000-0000-0000-000000000001");
    EXPECT_EQ(g1.name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(g1.model, "H100");
    EXPECT_EQ(g1.memory_mib, 81559);
    EXPECT_EQ(d.value()[0].pci_bus_id, "00000000:18:00.0");
    EXPECT_FALSE(g1.mig_enabled);
    EXPECT_TRUE(g1.mig.empty());

    auto s = nvml.sample(0);
    ASSERT_TRUE(s.ok()) << s.error().message();
    ASSERT_EQ(s.value().size(), 2u);
    const GpuSample& s1 = s.value()[1];
    EXPECT_TRUE(s1.present);
    EXPECT_EQ(s1.index, 1);
    EXPECT_EQ(s1.util_pct, 37);
    EXPECT_EQ(s1.mem_used_mib, 1124);
    EXPECT_EQ(s1.mem_total_mib, 81559);
    EXPECT_EQ(s1.temp_c, 41);
    EXPECT_DOUBLE_EQ(s1.power_w, 351.5);
    EXPECT_EQ(s1.ecc_uncorrected, 0);
    EXPECT_EQ(s1.ecc_corrected, 2);
    EXPECT_TRUE(s1.xids.empty());
    EXPECT_EQ(s1.error, "");
  }
  EXPECT_EQ(lib.inits(), lib.shutdowns()) << "the backend shuts NVML down when destroyed";
}

TEST(NvmlBackend, SampleWithoutDiscoverDiscoversFirst) {
  FakeNvml lib;
  auto b = make_nvml_backend(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(b.ok()) << b.error().message();
  auto s = b.value()->sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.value().size(), 2u);
}

TEST(NvmlBackend, CountFailureFailsDiscovery) {
  FakeNvml lib;
  lib.configure("count_rc=4");
  auto b = make_nvml_backend(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(b.ok());
  auto d = b.value()->discover();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().reason,
            "nvmlDeviceGetCount_v2 failed: Insufficient Permissions (NVML error 4)");
  EXPECT_FALSE(b.value()->sample(0).ok());
}

TEST(NvmlBackend, MigInstances) {
  FakeNvml lib;
  lib.configure("mig=0");
  auto b = make_nvml_backend(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(b.ok());
  auto d = b.value()->discover();
  ASSERT_TRUE(d.ok());
  const GpuDevice& g0 = d.value()[0];
  EXPECT_TRUE(g0.mig_enabled);
  ASSERT_EQ(g0.mig.size(), 2u);
  EXPECT_EQ(g0.mig[0].uuid, "MIG-5e1f0000-0000-0000-0000-000000000000");
  EXPECT_EQ(g0.mig[0].profile, "1g.10gb");
  EXPECT_EQ(g0.mig[0].milli, 142);
  EXPECT_EQ(g0.mig[0].memory_mib, 9984);
  EXPECT_EQ(g0.mig[1].profile, "3g.40gb");
  EXPECT_EQ(g0.mig[1].milli, 428);
  EXPECT_FALSE(d.value()[1].mig_enabled);

  auto s = b.value()->sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.value()[0].util_pct, -1) << "no utilisation in MIG mode";
  EXPECT_EQ(s.value()[0].error, "") << "'not supported' is not an error";
  EXPECT_TRUE(s.value()[0].present);
}

TEST(NvmlBackend, LostGpuIsNotPresent) {
  FakeNvml lib;
  auto b = make_nvml_backend(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b.value()->discover().ok());
  lib.configure("lost=1");
  auto s = b.value()->sample(1);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s.value()[0].present);
  EXPECT_FALSE(s.value()[1].present);
  EXPECT_EQ(s.value()[1].error, "memory: GPU is lost (NVML error 15)");
}

TEST(NvmlBackend, GpuUnreadableAtDiscoveryIsReportedInSamples) {
  FakeNvml lib;
  lib.configure("count=3,unreadable=1");
  auto b = make_nvml_backend(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(b.ok());
  auto d = b.value()->discover();
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d.value().size(), 2u);
  EXPECT_EQ(d.value()[0].index, 0);
  EXPECT_EQ(d.value()[1].index, 2);
  auto s = b.value()->sample(0);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s.value().size(), 3u);
  EXPECT_FALSE(s.value()[1].present);
  EXPECT_EQ(s.value()[1].error, "GPU 1 unreadable at discovery: GPU is lost (NVML error 15)");
}

TEST(NvmlBackend, XidEventsGoToTheirGpuOnce) {
  FakeNvml lib;
  auto b = make_nvml_backend(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b.value()->discover().ok());
  lib.configure("xid=1:79,xid=1:48,xid=0:13,ecc=1:3");
  auto s = b.value()->sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.value()[0].xids, std::vector<int>{13});
  EXPECT_EQ(s.value()[1].xids, (std::vector<int>{79, 48}));
  EXPECT_EQ(s.value()[1].ecc_uncorrected, 3);
  auto again = b.value()->sample(1);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.value()[1].xids.empty());
}

TEST(NvmlBackend, NoEventSupportStillSamples) {
  FakeNvml lib;
  lib.configure("events=0");
  auto b = make_nvml_backend(FAKE_NVML_LIBRARY);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b.value()->discover().ok());
  lib.configure("xid=0:79");
  auto s = b.value()->sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s.value()[0].xids.empty());
  EXPECT_EQ(s.value()[0].util_pct, 37);
}

TEST(NvmlBackend, ProbePrintsDiscoveryAndSamples) {
  const std::string cmd =
      std::string(NVML_PROBE) + " --library " + FAKE_NVML_LIBRARY + " --samples 2 --interval-ms 10";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find("\"uuid\": \"GPU-5e1f0000-0000-0000-0000-000000000001\""), std::string::npos)
      << out;
  EXPECT_NE(out.find("\"util_pct\": 37,"), std::string::npos) << out;
  EXPECT_NE(out.find("\"sample_ms_max\""), std::string::npos) << out;

  FILE* csv = popen((std::string(NVML_PROBE) + " --library " + FAKE_NVML_LIBRARY +
                     " --samples 2 --interval-ms 10 --csv")
                        .c_str(),
                    "r");
  ASSERT_NE(csv, nullptr);
  out.clear();
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, csv)) > 0;) out.append(buf, n);
  EXPECT_EQ(pclose(csv), 0) << out;
  EXPECT_EQ(out.substr(0, out.find("# sample_ms_max=")),
            "0,GPU-5e1f0000-0000-0000-0000-000000000000,NVIDIA H100 80GB HBM3,81559,37,37,1024,40,"
            "350.5,1,0,\n"
            "1,GPU-5e1f0000-0000-0000-0000-000000000001,NVIDIA H100 80GB HBM3,81559,37,37,1124,41,"
            "351.5,1,0,\n");

  FILE* missing = popen((std::string(NVML_PROBE) + " --library /nonexistent.so 2>&1").c_str(), "r");
  ASSERT_NE(missing, nullptr);
  out.clear();
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, missing)) > 0;) out.append(buf, n);
  EXPECT_NE(pclose(missing), 0);
  EXPECT_NE(out.find("no NVIDIA driver on this machine"), std::string::npos) << out;
}

// --- NVML as the driver really behaves
// ------------------------------------------------------------

std::unique_ptr<GpuBackend> backend(const char* library = FAKE_NVML_LIBRARY) {
  auto b = make_nvml_backend(library);
  EXPECT_TRUE(b.ok()) << b.error().message();
  return b.ok() ? std::move(b.value()) : nullptr;
}

TEST(NvmlDriver, MigProfileNamesAreTheDriversOwn) {
  FakeNvml lib;
  lib.configure("mig=0,h200=1");
  auto b = backend();
  auto d = b->discover();
  ASSERT_TRUE(d.ok()) << d.error().message();
  const GpuDevice& g0 = d.value()[0];
  EXPECT_EQ(g0.model, "H200");
  ASSERT_EQ(g0.mig.size(), 2u);
  EXPECT_EQ(g0.mig[0].profile, "1g.18gb") << "not 1g.16gb from 15.75 GiB rounded";
  EXPECT_EQ(g0.mig[0].memory_mib, 16128);
  EXPECT_EQ(g0.mig[0].milli, 142);
  EXPECT_EQ(g0.mig[1].profile, "3g.71gb") << "not 3g.70gb";
  EXPECT_EQ(g0.mig[1].milli, 428);
}

TEST(NvmlDriver, MediaExtensionProfileNamedByItsIdWhenRoot) {
  FakeNvml lib;
  lib.configure("mig=0,media=1");
  auto d = backend()->discover();
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value()[0].mig[0].profile, "1g.10gb+me");
  // Not root: the GPU instance cannot be looked up, so the profile is matched by its slices and
  // memory, which the media-extension profile shares with the plain one.
  lib.configure("reset,mig=0,media=1,nonroot=1");
  auto n = backend()->discover();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.value()[0].mig[0].profile, "1g.10gb");
}

TEST(NvmlDriver, OlderDriverNamesProfilesFromTheModelTableAndReadsMemoryV1) {
  FakeNvml lib(FAKE_NVML_OLD_DRIVER_LIBRARY);
  lib.configure("mig=0,h200=1");
  auto b = backend(FAKE_NVML_OLD_DRIVER_LIBRARY);
  auto d = b->discover();
  ASSERT_TRUE(d.ok()) << d.error().message();
  ASSERT_EQ(d.value()[0].mig.size(), 2u);
  EXPECT_EQ(d.value()[0].mig[0].profile, "1g.18gb");
  EXPECT_EQ(d.value()[0].mig[1].profile, "3g.71gb");
  auto s = b->sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.value()[1].mem_used_mib, 1124 + 512) << "v1 counts the driver's reserve as used";
}

TEST(NvmlDriver, MemoryUsedLeavesOutTheDriversReserve) {
  FakeNvml lib;
  auto b = backend();
  ASSERT_TRUE(b->discover().ok());
  auto s = b->sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.value()[0].mem_used_mib, 1024) << "v2: 512 MiB reserved by the driver not counted";
  EXPECT_EQ(s.value()[0].mem_total_mib, 81559);
  lib.configure("v2_rc=25");  // a driver that has v2 but refuses this struct version
  auto v1 = b->sample(1);
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(v1.value()[0].mem_used_mib, 1024 + 512) << "v1 then, reserve and all";
  EXPECT_EQ(v1.value()[0].error, "");
}

TEST(NvmlDriver, GpuThatNeedsAResetIsNotPresentAndTheNodeUnhealthy) {
  FakeNvml lib;
  auto b = backend();
  auto d = b->discover();
  ASSERT_TRUE(d.ok());
  lib.configure("needs_reset=1");
  auto s = b->sample(1);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s.value()[0].present);
  EXPECT_FALSE(s.value()[1].present);
  EXPECT_EQ(s.value()[1].error, "memory: GPU requires reset (NVML error 14)");
  HealthVerdict v = evaluate(d.value(), s, HealthThresholds{});
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason, "GPU 1 lost: memory: GPU requires reset (NVML error 14)");
}

TEST(NvmlDriver, RepeatedUnknownErrorsMeanTheGpuNeedsAReset) {
  FakeNvml lib;
  auto b = backend();
  ASSERT_TRUE(b->discover().ok());
  lib.configure("unknown=0");
  for (int n = 1; n < 3; ++n) {
    auto s = b->sample(n);
    ASSERT_TRUE(s.ok());
    EXPECT_TRUE(s.value()[0].present) << "sample " << n << ": once or twice may be passing";
    EXPECT_NE(s.value()[0].error.find("memory: Unknown Error (NVML error 999)"), std::string::npos)
        << s.value()[0].error;
  }
  auto third = b->sample(3);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third.value()[0].present);
  EXPECT_NE(third.value()[0].error.find("3 samples in a row with unknown errors: the GPU needs a "
                                        "reset"),
            std::string::npos)
      << third.value()[0].error;
  EXPECT_TRUE(third.value()[1].present);
  lib.configure("unknown=-1");
  auto after = b->sample(4);
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after.value()[0].present) << "answers again after the reset";
  EXPECT_EQ(after.value()[0].error, "");
}

TEST(NvmlDriver, FailedEventWaitIsSaidAndTheSetMadeAgain) {
  FakeNvml lib;
  auto b = backend();
  ASSERT_TRUE(b->discover().ok());
  EXPECT_EQ(lib.event_sets(), 1);
  lib.configure("wait_rc=999");
  auto s = b->sample(0);
  ASSERT_TRUE(s.ok());
  for (const GpuSample& g : s.value()) {
    EXPECT_EQ(g.error,
              "XID events: nvmlEventSetWait_v2 failed: Unknown Error (NVML error 999); "
              "registering again");
    EXPECT_TRUE(g.present);
  }
  lib.configure("xid=1:79");
  auto again = b->sample(1);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(lib.event_sets(), 2) << "a new event set";
  EXPECT_EQ(again.value()[1].xids, std::vector<int>{79}) << "and the GPUs in it again";
  EXPECT_EQ(again.value()[1].error, "");
}

TEST(NvmlDriver, RegistrationFailureIsSaidForItsGpu) {
  FakeNvml lib;
  lib.configure("register=1:4");
  auto b = backend();
  ASSERT_TRUE(b->discover().ok());
  auto s = b->sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.value()[0].error, "");
  EXPECT_EQ(s.value()[1].error,
            "XID events not watched: nvmlDeviceRegisterEvents failed: Insufficient Permissions "
            "(NVML error 4)");
}

TEST(NvmlDriver, GpuReadableOnlyAtALaterDiscoveryIsWatchedForXids) {
  FakeNvml lib;
  lib.configure("unreadable=1");
  auto b = backend();
  ASSERT_EQ(b->discover().value().size(), 1u);
  lib.configure("unreadable=-1");
  ASSERT_EQ(b->discover().value().size(), 2u);
  lib.configure("xid=1:79,xid=0:13");
  auto s = b->sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.value()[1].xids, std::vector<int>{79});
  EXPECT_EQ(s.value()[0].xids, std::vector<int>{13});
  EXPECT_EQ(lib.event_sets(), 1) << "one set, GPUs added to it";
}

TEST(NvmlDriver, NotRootInMigModeKeepsTheGpu) {
  FakeNvml lib;
  lib.configure("mig=0,nonroot=1");
  auto b = backend();
  auto d = b->discover();
  ASSERT_TRUE(d.ok()) << d.error().message();
  ASSERT_EQ(d.value().size(), 2u) << "the GPU in MIG mode is kept";
  const GpuDevice& g0 = d.value()[0];
  EXPECT_TRUE(g0.mig_enabled);
  EXPECT_EQ(g0.memory_mib, 80768) << "the full-GPU profile's memory";
  ASSERT_EQ(g0.mig.size(), 2u);
  EXPECT_EQ(g0.mig[1].profile, "3g.40gb");
  auto s = b->sample(0);
  ASSERT_TRUE(s.ok());
  const GpuSample& s0 = s.value()[0];
  EXPECT_TRUE(s0.present);
  EXPECT_EQ(s0.error, "") << "no permission for the aggregate is not an error";
  EXPECT_EQ(s0.mem_used_mib, 5300) << "the sum over its MIG devices";
  EXPECT_EQ(s0.mem_total_mib, 80768);
  EXPECT_EQ(s0.temp_c, 40);
}

TEST(NvmlDriver, MigDevicesAreSampledOneByOne) {
  FakeNvml lib;
  lib.configure("mig=0");
  auto b = backend();
  auto d = b->discover();
  ASSERT_TRUE(d.ok());
  auto s = b->sample(0);
  ASSERT_TRUE(s.ok());
  const GpuSample& s0 = s.value()[0];
  ASSERT_EQ(s0.mig.size(), 2u);
  EXPECT_EQ(s0.mig[0].uuid, d.value()[0].mig[0].uuid);
  EXPECT_EQ(s0.mig[0].mem_used_mib, 300);
  EXPECT_EQ(s0.mig[0].mem_total_mib, 9984);
  EXPECT_EQ(s0.mig[1].mem_used_mib, 5000);
  EXPECT_EQ(s0.mig[1].mem_total_mib, 40448);
  EXPECT_EQ(s0.mem_used_mib, 1024) << "root: the whole GPU's own reading";
  EXPECT_TRUE(s.value()[1].mig.empty());
}

TEST(GpuNaming, CatalogModelNames) {
  EXPECT_EQ(catalog_model_name("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(catalog_model_name("NVIDIA H200"), "H200");
  EXPECT_EQ(catalog_model_name("NVIDIA B200"), "B200");
  EXPECT_EQ(catalog_model_name("NVIDIA A100-SXM4-80GB"), "A100");
  EXPECT_EQ(catalog_model_name("Tesla V100-SXM2-32GB"), "V100");
  EXPECT_EQ(catalog_model_name("NVIDIA l40s"), "L40S");
  EXPECT_EQ(catalog_model_name("NVIDIA GeForce RTX 4090"), "NVIDIA-GEFORCE-RTX-4090");
}

TEST(GpuNaming, MigProfileNamesFromTheModelTable) {
  EXPECT_EQ(mig_profile_name(1, 1, 16128, 143771), "1g.18gb");  // H200
  EXPECT_EQ(mig_profile_name(1, 1, 32512, 143771), "1g.35gb");
  EXPECT_EQ(mig_profile_name(2, 2, 32512, 143771), "2g.35gb");
  EXPECT_EQ(mig_profile_name(3, 3, 71168, 143771), "3g.71gb");
  EXPECT_EQ(mig_profile_name(7, 7, 143488, 143771), "7g.141gb");
  EXPECT_EQ(mig_profile_name(1, 1, 21504, 183359), "1g.23gb");  // B200
  EXPECT_EQ(mig_profile_name(3, 3, 87040, 183359), "3g.90gb");
  EXPECT_EQ(mig_profile_name(2, 2, 44032, 189471), "2g.47gb");  // GB200
  EXPECT_EQ(mig_profile_name(3, 3, 44800, 95830), "3g.47gb");   // H100 NVL
  EXPECT_EQ(mig_profile_name(1, 1, 4864, 40960), "1g.5gb");     // A100 40GB
  EXPECT_EQ(mig_profile_name(3, 1, 71168, 143771), "1c.3g.71gb");
}

TEST(GpuNaming, MigProfileNames) {
  EXPECT_EQ(mig_profile_name(1, 1, 9984), "1g.10gb");   // H100 80GB: 9.75 GiB
  EXPECT_EQ(mig_profile_name(1, 1, 20096), "1g.20gb");  // 19.62 GiB
  EXPECT_EQ(mig_profile_name(3, 3, 40448), "3g.40gb");  // 39.5 GiB
  EXPECT_EQ(mig_profile_name(7, 7, 81152), "7g.80gb");  // 79.25 GiB
  EXPECT_EQ(mig_profile_name(1, 1, 4864), "1g.5gb");    // A100 40GB: 4.75 GiB
  EXPECT_EQ(mig_profile_name(3, 1, 40448), "1c.3g.40gb");
}

}  // namespace
}  // namespace allot::agent
