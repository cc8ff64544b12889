// The NVML backend through a real dlopen() of a fake libnvidia-ml (fake_nvml.cpp): discovery,
// sampling, MIG, XID events, and each way loading or reading can fail.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "agent/gpu_backend.h"

namespace allot::agent {
namespace {

// The test's own handle on the fake library, the same one the backend loads (dlopen counts
// references by file), to script its answers.
class FakeNvml {
 public:
  explicit FakeNvml(const char* path = FAKE_NVML_LIBRARY) : handle_(dlopen(path, RTLD_NOW)) {
    EXPECT_NE(handle_, nullptr) << dlerror();
    configure("reset");
  }
  ~FakeNvml() { dlclose(handle_); }
  void configure(const std::string& spec) const {
    auto fn = reinterpret_cast<void (*)(const char*)>(dlsym(handle_, "fake_nvml_configure"));
    fn(spec.c_str());
  }
  int inits() const { return call("fake_nvml_inits"); }
  int shutdowns() const { return call("fake_nvml_shutdowns"); }

 private:
  int call(const char* name) const { return reinterpret_cast<int (*)()>(dlsym(handle_, name))(); }
  void* handle_;
};

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

TEST(GpuNaming, CatalogModelNames) {
  EXPECT_EQ(catalog_model_name("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(catalog_model_name("NVIDIA H200"), "H200");
  EXPECT_EQ(catalog_model_name("NVIDIA B200"), "B200");
  EXPECT_EQ(catalog_model_name("NVIDIA A100-SXM4-80GB"), "A100");
  EXPECT_EQ(catalog_model_name("Tesla V100-SXM2-32GB"), "V100");
  EXPECT_EQ(catalog_model_name("NVIDIA l40s"), "L40S");
  EXPECT_EQ(catalog_model_name("NVIDIA GeForce RTX 4090"), "NVIDIA-GEFORCE-RTX-4090");
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
