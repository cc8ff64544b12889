// The fake backend: discovery from YAML, script timing, control-directory overrides, errors that
// name the file, line and field, and MIG re-partitioning by the driver's placement rules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "agent/fake_node_config.h"
#include "agent/gpu_backend.h"
#include "mig_devices.h"

namespace allot::agent {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<GpuBackend> fake(const std::string& yaml, const std::string& node = "n01") {
  auto b = make_fake_backend_from_text(yaml, node);
  EXPECT_TRUE(b.ok()) << b.error().message();
  return b.ok() ? std::move(b.value()) : nullptr;
}

std::vector<GpuSample> sample(GpuBackend& b, double now) {
  auto s = b.sample(now);
  EXPECT_TRUE(s.ok()) << s.error().message();
  return s.ok() ? s.value() : std::vector<GpuSample>{};
}

std::string error_of(const std::string& yaml) {
  auto b = make_fake_backend_from_text(yaml);
  return b.ok() ? "(no error)" : b.error().message();
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/allot-fake-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name) << text;
  }

 private:
  std::string path_;
};

TEST(FakeBackend, DiscoversTheDescribedNode) {
  auto b = fake(R"(
model: H100
name: NVIDIA H100 80GB HBM3
gpus: 8
memory_mib: 81559
mig:
  2: [1g.10gb, 1g.10gb, 3g.40gb]
)");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->name(), "fake");
  auto d = b->discover();
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d.value().size(), 8u);
  EXPECT_EQ(d.value()[3].uuid, "GPU-fake-n01-3");
  EXPECT_EQ(d.value()[3].model, "H100");
  EXPECT_EQ(d.value()[3].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d.value()[3].memory_mib, 81559);
  EXPECT_EQ(d.value()[0].pci_bus_id, "00000000:18:00.0");
  EXPECT_FALSE(d.value()[3].mig_enabled);
  const GpuDevice& g2 = d.value()[2];
  EXPECT_TRUE(g2.mig_enabled);
  ASSERT_EQ(g2.mig.size(), 3u);
  EXPECT_EQ(g2.mig[2].uuid, "MIG-fake-n01-2-2");
  EXPECT_EQ(g2.mig[2].profile, "3g.40gb");
  EXPECT_EQ(g2.mig[2].milli, 428);
  EXPECT_EQ(g2.mig[2].memory_mib, 40960);
  EXPECT_EQ(g2.mig[0].milli, 142);
}

TEST(FakeBackend, UuidSeedAndDerivedNames) {
  auto b = fake("name: NVIDIA B200\ngpus: 1\nmemory_mib: 183359\nuuid_seed: lab7\n");
  ASSERT_TRUE(b);
  auto d = b->discover().value();
  EXPECT_EQ(d[0].uuid, "GPU-fake-lab7-0");
  EXPECT_EQ(d[0].model, "B200");
  auto c = fake("model: H200\ngpus: 1\nmemory_mib: 143771\n", "");
  ASSERT_TRUE(c);
  auto e = c->discover().value();
  EXPECT_EQ(e[0].name, "NVIDIA H200");
  EXPECT_EQ(e[0].uuid, "GPU-fake-node-0");
}

TEST(FakeBackend, TelemetryDefaults) {
  auto b = fake(R"(
model: H100
gpus: 2
memory_mib: 81559
telemetry: {util_pct: 55, mem_used_mib: 1000, temp_c: 41, power_w: 300}
)");
  ASSERT_TRUE(b);
  auto s = sample(*b, 0);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(s[1].present);
  EXPECT_EQ(s[1].index, 1);
  EXPECT_EQ(s[1].util_pct, 55);
  EXPECT_EQ(s[1].mem_used_mib, 1000);
  EXPECT_EQ(s[1].mem_total_mib, 81559);
  EXPECT_EQ(s[1].temp_c, 41);
  EXPECT_EQ(s[1].power_w, 300);
  EXPECT_EQ(s[1].ecc_uncorrected, 0);
  EXPECT_TRUE(s[1].xids.empty());
}

TEST(FakeBackend, ScriptPlaysOnTheAgentsClock) {
  auto b = fake(R"(
model: H100
gpus: 4
memory_mib: 81559
script:
  - {at: 30, gpu: 3, set: {ecc_uncorrected: 5}}
  - {at: 10, gpu: 1, temp_c: 95}
  - {at: 20, gpu: 2, xid: 79}
  - {at: 40, gpu: 0, lost: true}
  - {at: 50, gpu: all, util_pct: 100}
)");
  ASSERT_TRUE(b);
  auto s = sample(*b, 9.9);
  EXPECT_EQ(s[1].temp_c, 35);
  s = sample(*b, 10);
  EXPECT_EQ(s[1].temp_c, 95);
  EXPECT_TRUE(s[2].xids.empty());
  s = sample(*b, 25);
  EXPECT_EQ(s[2].xids, std::vector<int>{79});
  EXPECT_EQ(s[3].ecc_uncorrected, 0);
  s = sample(*b, 26);
  EXPECT_TRUE(s[2].xids.empty()) << "an XID is reported once";
  s = sample(*b, 30);
  EXPECT_EQ(s[3].ecc_uncorrected, 5);
  EXPECT_EQ(s[1].temp_c, 95) << "changes persist";
  EXPECT_TRUE(s[0].present);
  s = sample(*b, 41);
  EXPECT_FALSE(s[0].present);
  EXPECT_EQ(s[0].error, "GPU 0 lost (fake backend)");
  s = sample(*b, 1000);
  EXPECT_EQ(s[1].util_pct, 100);
  EXPECT_EQ(s[3].util_pct, 100);
}

TEST(FakeBackend, ControlDirOverridesWhilePresent) {
  TempDir dir;
  auto b = fake(
      "model: H100\ngpus: 2\nmemory_mib: 81559\ntelemetry: {util_pct: 10}\n"
      "control_dir: " +
      dir.path() + "\n");
  ASSERT_TRUE(b);
  EXPECT_EQ(sample(*b, 0)[1].util_pct, 10);
  dir.write("gpu1.util_pct", "88\n");
  dir.write("gpu1.temp_c", "91.5");
  dir.write("gpu0.ecc_uncorrected", "2");
  auto s = sample(*b, 1);
  EXPECT_EQ(s[1].util_pct, 88);
  EXPECT_EQ(s[1].temp_c, 91.5);
  EXPECT_EQ(s[0].ecc_uncorrected, 2);
  EXPECT_EQ(s[0].util_pct, 10);
  fs::remove(dir.path() + "/gpu1.util_pct");
  EXPECT_EQ(sample(*b, 2)[1].util_pct, 10) << "the scripted value returns once the file is gone";

  dir.write("gpu0.lost", "1");
  EXPECT_FALSE(sample(*b, 3)[0].present);
  dir.write("gpu0.lost", "0");
  EXPECT_TRUE(sample(*b, 4)[0].present);

  dir.write("gpu1.temp_c", "hot");
  s = sample(*b, 5);
  EXPECT_EQ(s[1].temp_c, 35);
  EXPECT_EQ(s[1].error, "control file gpu1.temp_c: cannot read 'hot'");
}

TEST(FakeBackend, ControlDirXidIsReportedOncePerWrite) {
  TempDir dir;
  auto b = fake("model: H100\ngpus: 2\nmemory_mib: 81559\ncontrol_dir: " + dir.path() + "\n");
  ASSERT_TRUE(b);
  dir.write("gpu1.xid", "79");
  EXPECT_EQ(sample(*b, 1)[1].xids, std::vector<int>{79});
  EXPECT_TRUE(sample(*b, 2)[1].xids.empty());
  dir.write("gpu1.xid", "48, 94");
  EXPECT_EQ(sample(*b, 3)[1].xids, (std::vector<int>{48, 94}));
}

TEST(FakeBackend, ControlDirWithNodeNameFromAFile) {
  TempDir dir;
  dir.write("node.yaml", "model: H100\ngpus: 1\nmemory_mib: 81559\ncontrol_dir: ctl/{node}\n");
  fs::create_directories(dir.path() + "/ctl/n07");
  dir.write("ctl/n07/gpu0.mem_used_mib", "4096");
  auto b = make_fake_backend(dir.path() + "/node.yaml", "n07");
  ASSERT_TRUE(b.ok()) << b.error().message();
  EXPECT_EQ(sample(*b.value(), 0)[0].mem_used_mib, 4096);
}

TEST(FakeBackend, MissingFile) {
  auto b = make_fake_backend("/nonexistent/node.yaml");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().message(), "/nonexistent/node.yaml: cannot read the fake node description");
}

TEST(FakeBackend, ErrorsNameFileLineAndField) {
  TempDir dir;
  dir.write("bad.yaml",
            "model: H100\ngpus: 8\nmemory_mib: 81559\nscript:\n"
            "  - {at: 30, gpu: 9, lost: true}\n");
  auto b = make_fake_backend(dir.path() + "/bad.yaml");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().message(),
            dir.path() + "/bad.yaml:5: script[0].gpu: must be between 0 and 7, got 9");
}

TEST(FakeBackend, YamlErrors) {
  EXPECT_EQ(error_of("gpus: 8\nmemory_mib: 1\n"),
            "<fake node>:1: model: missing (give model or name)");
  EXPECT_EQ(error_of("model: H100\nmemory_mib: 1\n"),
            "<fake node>:1: gpus: missing (how many GPUs the node has)");
  EXPECT_EQ(error_of("model: H100\ngpus: many\nmemory_mib: 1\n"),
            "<fake node>:2: gpus: expected a number, got 'many'");
  EXPECT_EQ(error_of("model: H100\ngpus: 2.5\nmemory_mib: 1\n"),
            "<fake node>:2: gpus: expected a whole number, got 2.5");
  EXPECT_EQ(error_of("model: H100\ngpus: 2\nmemory_mib: 1\ngpu: 3\n"),
            "<fake node>:4: gpu: unknown field (expected one of: model, name, gpus, memory_mib, "
            "uuid_seed, mig, telemetry, script, control_dir, mig_reconfigure_seconds)");
  EXPECT_EQ(error_of("model: H100\ngpus: 2\nmemory_mib: 10\ntelemetry: {util_pct: 120}\n"),
            "<fake node>:4: telemetry.util_pct: must be between 0 and 100, got 120");
  EXPECT_EQ(error_of("model: H100\ngpus: 2\nmemory_mib: 10\ntelemetry: {heat: 1}\n"),
            "<fake node>:4: telemetry.heat: unknown field (expected util_pct, mem_used_mib, "
            "temp_c, power_w, ecc_uncorrected or ecc_corrected)");
  EXPECT_EQ(error_of("model: H100\ngpus: 2\nmemory_mib: 10\nmig:\n  1: [2g.20gb, 9g.1gb]\n"),
            "<fake node>:5: mig.1[1]: not a MIG profile like 1g.10gb or 1c.3g.40gb: 9g.1gb");
  EXPECT_EQ(error_of("model: H100\ngpus: 2\nmemory_mib: 10\nmig:\n  1: [4g.40gb, 4g.40gb]\n"),
            "<fake node>:5: mig.1: profiles use 8 GPU slices, more than the 7 a GPU has");
  // Found by fuzz_fake_node_config: "0" and "00" name one GPU, whose slices then added up to 8.
  EXPECT_EQ(
      error_of("model: A100\ngpus: 2\nmemory_mib: 10\nmig:\n  0: [4g.20gb]\n  00: [4g.20gb]\n"),
      "<fake node>:6: mig.00: GPU 0 given twice");
  EXPECT_EQ(error_of("model: H100\ngpus: 2\nmemory_mib: 10\nscript:\n  - {gpu: 1, lost: true}\n"),
            "<fake node>:5: script[0].at: missing (seconds since the agent started)");
  EXPECT_EQ(
      error_of("model: H100\ngpus: 2\nmemory_mib: 10\nscript:\n  - {at: 1, gpu: 1, lost: maybe}\n"),
      "<fake node>:5: script[0].lost: expected true or false, got 'maybe'");
  EXPECT_EQ(error_of("model: H100\ngpus: 2\nmemory_mib: 10\nscript:\n  - {at: 1, gpu: 1}\n"),
            "<fake node>:5: script[0]: changes nothing (give set, lost, xid, ...)");
  EXPECT_EQ(
      error_of("model: H100\ngpus: 2\nmemory_mib: 10\nscript:\n  - {at: 1, gpu: 1, hot: 1}\n"),
      "<fake node>:5: script[0].hot: unknown field (expected at, gpu, set, xid, lost or a "
      "telemetry field)");
  EXPECT_EQ(error_of("model: [H100\n"), "<fake node>:2: yaml: end of sequence flow not found");
}

TEST(FakeBackend, MigProfileParsing) {
  auto p = parse_mig_profile("1c.3g.40gb");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->gpu_slices, 3);
  EXPECT_EQ(p->compute_slices, 1);
  EXPECT_EQ(p->memory_gib, 40);
  EXPECT_TRUE(parse_mig_profile("7g.80gb"));
  EXPECT_FALSE(parse_mig_profile("8g.80gb"));
  EXPECT_FALSE(parse_mig_profile("3c.1g.10gb"));
  EXPECT_FALSE(parse_mig_profile("1g.10"));
  EXPECT_FALSE(parse_mig_profile("1g.10gbx"));
  EXPECT_FALSE(parse_mig_profile("g.10gb"));
}

// --- MIG re-partitioning (GpuBackend::reconfigure_mig) ---------------------------------------

constexpr const char* kMigNode =
    "model: H100\ngpus: 2\nmemory_mib: 81559\nmig_reconfigure_seconds: 0\n"
    "mig:\n  1: [3g.40gb]\n";

TEST(FakeBackend, ReconfigureMigAppliesTheLayout) {
  auto b = fake(kMigNode);
  ASSERT_TRUE(b);
  auto st = b->reconfigure_mig(0, {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"});
  ASSERT_TRUE(st.ok()) << st.error().message();
  auto d = devices(*b);
  ASSERT_EQ(d.size(), 2u);
  const GpuDevice& g0 = d[0];
  EXPECT_TRUE(g0.mig_enabled);
  EXPECT_EQ(profiles_of(g0),
            (std::vector<std::string>{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}));
  EXPECT_EQ(g0.mig[0].milli, 428);
  EXPECT_EQ(g0.mig[1].milli, 285);
  EXPECT_EQ(g0.mig[3].milli, 142);
  EXPECT_EQ(g0.mig[0].memory_mib, 40960);
  EXPECT_EQ(g0.mig[1].memory_mib, 20480);
  EXPECT_EQ(g0.mig[0].uuid, "MIG-fake-n01-0-g1-0");
  EXPECT_EQ(g0.mig[3].uuid, "MIG-fake-n01-0-g1-3");
  EXPECT_EQ(g0.uuid, "GPU-fake-n01-0") << "the GPU itself stays";
  EXPECT_EQ(profiles_of(d[1]), std::vector<std::string>{"3g.40gb"}) << "the other GPU untouched";
  EXPECT_EQ(d[1].mig[0].uuid, "MIG-fake-n01-1-0");
  auto s = sample(*b, 1);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(s[0].present);
  EXPECT_EQ(s[0].error, "");
  EXPECT_EQ(s[0].mem_total_mib, 81559);

  // A new layout's instances are new devices: no UUID of the previous one comes back.
  const std::string first_uuid = g0.mig[0].uuid;  // g0 is gone once d is read again
  ASSERT_TRUE(b->reconfigure_mig(1, {"4g.40gb", "2g.20gb", "1g.10gb+me"}).ok());
  ASSERT_TRUE(b->reconfigure_mig(0, {"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}).ok());
  d = devices(*b);
  EXPECT_EQ(profiles_of(d[1]), (std::vector<std::string>{"4g.40gb", "2g.20gb", "1g.10gb+me"}));
  EXPECT_EQ(d[1].mig[2].milli, 142);
  EXPECT_EQ(d[1].mig[2].memory_mib, 10240);
  EXPECT_EQ(d[0].mig[0].uuid, "MIG-fake-n01-0-g3-0");
  EXPECT_NE(d[0].mig[0].uuid, first_uuid);
}

TEST(FakeBackend, ReconfigureMigRefusesWhatTheDriverWouldAndChangesNothing) {
  auto b = fake(kMigNode);
  ASSERT_TRUE(b);
  const auto before = devices(*b);
  auto refused = [&](int gpu, const std::vector<std::string>& profiles) {
    auto st = b->reconfigure_mig(gpu, profiles);
    return st.ok() ? std::string("(applied)") : st.error().message();
  };
  EXPECT_EQ(refused(2, {"7g.80gb"}), "gpu: no GPU 2 on this node (it has 2)");
  EXPECT_EQ(refused(-1, {}), "gpu: no GPU -1 on this node (it has 2)");
  EXPECT_EQ(refused(0, {"9g.1gb"}), "mig: '9g.1gb' is not a MIG profile of a H100 (80 GB)");
  EXPECT_EQ(refused(0, {"3g.71gb"}), "mig: '3g.71gb' is not a MIG profile of a H100 (80 GB)")
      << "an H200's profile";
  const std::string no_fit =
      "cannot share one H100: they overlap, need more than 7 compute slices, or break NVIDIA's "
      "placement rules";
  EXPECT_EQ(refused(0, {"4g.40gb", "3g.40gb"}), "mig: [4g.40gb, 3g.40gb] " + no_fit);
  EXPECT_EQ(refused(1, {"3g.40gb", "3g.40gb", "2g.20gb"}),
            "mig: [3g.40gb, 3g.40gb, 2g.20gb] " + no_fit);
  EXPECT_EQ(refused(1, {"1g.10gb+me", "1g.10gb+me"}), "mig: [1g.10gb+me, 1g.10gb+me] " + no_fit)
      << "one instance at most has the media engines";
  EXPECT_EQ(refused(0, {"7g.80gb", "1g.10gb"}), "mig: [7g.80gb, 1g.10gb] " + no_fit);
  const auto after = devices(*b);
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].mig_enabled, before[i].mig_enabled) << i;
    EXPECT_EQ(profiles_of(after[i]), profiles_of(before[i])) << i;
  }

  auto l40s = fake("model: L40S\ngpus: 1\nmemory_mib: 46068\nmig_reconfigure_seconds: 0\n");
  ASSERT_TRUE(l40s);
  auto st = l40s->reconfigure_mig(0, {"1g.10gb"});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message(), "mig: L40S GPUs cannot be split into MIG instances");
}

TEST(FakeBackend, ReconfigureMigBackToWhole) {
  auto b = fake(kMigNode);
  ASSERT_TRUE(b);
  ASSERT_TRUE(devices(*b)[1].mig_enabled);
  auto st = b->reconfigure_mig(1, {});
  ASSERT_TRUE(st.ok()) << st.error().message();
  const auto d = devices(*b);
  EXPECT_FALSE(d[1].mig_enabled);
  EXPECT_TRUE(d[1].mig.empty());
  EXPECT_EQ(sample(*b, 1).size(), 2u);
}

TEST(FakeBackend, ReconfigureMigTakesTheConfiguredTime) {
  using Clock = std::chrono::steady_clock;
  auto b = fake("model: H200\ngpus: 1\nmemory_mib: 143771\nmig_reconfigure_seconds: 0.2\n");
  ASSERT_TRUE(b);
  auto t0 = Clock::now();
  ASSERT_TRUE(b->reconfigure_mig(0, {"3g.71gb", "3g.71gb"}).ok());
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(200));
  EXPECT_EQ(devices(*b)[0].mig[1].milli, 428);
  t0 = Clock::now();
  EXPECT_FALSE(b->reconfigure_mig(0, {"3g.40gb"}).ok());
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(200)) << "a refusal does not wait";

  auto c = parse_fake_node("model: H100\ngpus: 1\nmemory_mib: 81559\n", "n.yaml");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().mig_reconfigure_seconds, 1) << "a driver's seconds by default";
  EXPECT_EQ(error_of("model: H100\ngpus: 1\nmemory_mib: 1\nmig_reconfigure_seconds: 601\n"),
            "<fake node>:4: mig_reconfigure_seconds: must be between 0 and 600, got 601");
  EXPECT_EQ(error_of("model: H100\ngpus: 1\nmemory_mib: 1\nmig_reconfigure_seconds: soon\n"),
            "<fake node>:4: mig_reconfigure_seconds: expected a number, got 'soon'");
}

TEST(FakeBackend, ShippedExamplesLoad) {
  for (const char* name : {"h100-node.yaml", "h100-node-faulty.yaml"}) {
    auto b = make_fake_backend(std::string(ALLOT_EXAMPLES_DIR) + "/agent/" + name, "n01");
    ASSERT_TRUE(b.ok()) << name << ": " << b.error().message();
    auto d = b.value()->discover();
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.value().size(), 8u) << name;
    EXPECT_TRUE(b.value()->sample(0).ok()) << name;
  }
}

}  // namespace
}  // namespace allot::agent
