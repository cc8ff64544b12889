// The NVML backend re-partitioning GPUs into MIG instances (nvml_mig.cpp), through a real dlopen()
// of the fake libnvidia-ml, which makes and destroys instances as the driver does: only in MIG
// mode, only by root, at NVIDIA's placements, never overlapping, a GPU instance only once its
// compute instance is gone.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "agent/gpu_backend.h"
#include "fake_nvml_handle.h"
#include "mig_devices.h"

namespace allot::agent {
namespace {

std::unique_ptr<GpuBackend> backend(const char* library = FAKE_NVML_LIBRARY) {
  auto b = make_nvml_backend(library);
  EXPECT_TRUE(b.ok()) << b.error().message();
  return b.ok() ? std::move(b.value()) : nullptr;
}

std::string error_of(const core::Status& st) {
  return st.ok() ? "(applied)" : st.error().message();
}

TEST(NvmlMig, TurnsMigModeOnAndMakesTheLayoutWhereTheGeometrySays) {
  FakeNvml lib;
  auto b = backend();
  ASSERT_FALSE(devices(*b)[1].mig_enabled);
  auto st = b->reconfigure_mig(1, {"3g.40gb", "2g.20gb", "1g.10gb+me", "1g.10gb"});
  ASSERT_TRUE(st.ok()) << st.error().message();
  EXPECT_EQ(lib.mode_changes(), 1);
  // 3g.40gb may start at memory slice 0 or 4: at 0 no slice is left for the last 1g.10gb, so at 4
  // (core::mig_layout_starts), and the driver took exactly those placements.
  EXPECT_EQ(lib.layout(1), "3g.40gb@4 2g.20gb@0 1g.10gb+me@2 1g.10gb@3");
  EXPECT_EQ(lib.layout(0), "") << "the other GPU untouched";

  // Sampled at once from the new devices (the old handles are gone), before any discovery.
  auto s = b->sample(0);
  ASSERT_TRUE(s.ok()) << s.error().message();
  ASSERT_EQ(s.value()[1].mig.size(), 4u);
  EXPECT_EQ(s.value()[1].util_pct, -1) << "in MIG mode now";

  const auto d = devices(*b);
  const GpuDevice& g1 = d[1];
  EXPECT_TRUE(g1.mig_enabled);
  EXPECT_EQ(profiles_of(g1),
            (std::vector<std::string>{"3g.40gb", "2g.20gb", "1g.10gb+me", "1g.10gb"}));
  EXPECT_EQ(g1.mig[0].milli, 428);
  EXPECT_EQ(g1.mig[1].milli, 285);
  EXPECT_EQ(g1.mig[3].milli, 142);
  EXPECT_EQ(g1.mig[0].memory_mib, 40448);
  EXPECT_EQ(s.value()[1].mig[2].uuid, g1.mig[2].uuid);
  EXPECT_FALSE(d[0].mig_enabled);
}

TEST(NvmlMig, ANewLayoutReplacesTheOldWithNewDevices) {
  FakeNvml lib;
  lib.configure("mig=0,h200=1");
  auto b = backend();
  const auto before = devices(*b)[0];
  ASSERT_EQ(profiles_of(before), (std::vector<std::string>{"1g.18gb", "3g.71gb"}));
  auto st = b->reconfigure_mig(0, {"4g.71gb", "2g.35gb", "1g.18gb"});
  ASSERT_TRUE(st.ok()) << st.error().message();
  EXPECT_EQ(lib.mode_changes(), 0) << "MIG mode was on already";
  EXPECT_EQ(lib.layout(0), "4g.71gb@0 2g.35gb@4 1g.18gb@6");
  const auto after = devices(*b)[0];
  ASSERT_EQ(profiles_of(after), (std::vector<std::string>{"4g.71gb", "2g.35gb", "1g.18gb"}));
  for (const MigDevice& n : after.mig) {
    for (const MigDevice& o : before.mig) EXPECT_NE(n.uuid, o.uuid) << "a new layout, new UUIDs";
  }
  ASSERT_TRUE(b->reconfigure_mig(0, {"7g.141gb"}).ok());
  EXPECT_EQ(profiles_of(devices(*b)[0]), std::vector<std::string>{"7g.141gb"});
}

TEST(NvmlMig, AnEmptyLayoutMakesTheGpuWhole) {
  FakeNvml lib;
  lib.configure("mig=0");
  auto b = backend();
  ASSERT_TRUE(devices(*b)[0].mig_enabled);
  auto st = b->reconfigure_mig(0, {});
  ASSERT_TRUE(st.ok()) << st.error().message();
  EXPECT_EQ(lib.layout(0), "");
  EXPECT_EQ(lib.mode_changes(), 1);
  const auto d = devices(*b);
  EXPECT_FALSE(d[0].mig_enabled);
  EXPECT_TRUE(d[0].mig.empty());
  auto s = b->sample(0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.value()[0].util_pct, 37) << "whole again: utilisation is read";
  EXPECT_TRUE(s.value()[0].mig.empty());
  // Whole already: nothing to do, and nothing done.
  ASSERT_TRUE(b->reconfigure_mig(1, {}).ok());
  EXPECT_EQ(lib.mode_changes(), 1);
}

TEST(NvmlMig, RefusesBeforeTouchingTheGpu) {
  FakeNvml lib;
  lib.configure("mig=0");
  auto b = backend();
  EXPECT_EQ(error_of(b->reconfigure_mig(5, {"7g.80gb"})), "gpu: no GPU 5 on this node (it has 2)");
  EXPECT_EQ(error_of(b->reconfigure_mig(0, {"4g.40gb", "3g.40gb"})),
            "mig: [4g.40gb, 3g.40gb] cannot share one H100: they overlap, need more than 7 "
            "compute slices, or break NVIDIA's placement rules");
  EXPECT_EQ(error_of(b->reconfigure_mig(1, {"1g.18gb"})),
            "mig: '1g.18gb' is not a MIG profile of a H100 (80 GB)");
  EXPECT_EQ(lib.layout(0), "1g.10gb@0 3g.40gb@4");
  EXPECT_EQ(lib.mode_changes(), 0);
}

TEST(NvmlMig, WhatTheDriverRefusesIsSaid) {
  FakeNvml lib;
  lib.configure("nonroot=1");
  auto b = backend();
  EXPECT_EQ(error_of(b->reconfigure_mig(0, {"7g.80gb"})),
            "mig: nvmlDeviceSetMigMode (on) failed: Insufficient Permissions (NVML error 4): "
            "re-partitioning MIG needs root");

  lib.configure("reset,mig_reset=1");
  b = backend();
  EXPECT_EQ(error_of(b->reconfigure_mig(1, {"7g.80gb"})),
            "mig: MIG mode set on but not active: GPU requires reset (NVML error 14): the GPU "
            "needs a reset (nvidia-smi -r) or the machine a reboot first");
  EXPECT_FALSE(devices(*b)[1].mig_enabled) << "nothing made on a GPU not in MIG mode";

  // A process on an instance: the layout stays as it was, and the agent hears why.
  lib.configure("reset,mig=0,in_use=0");
  b = backend();
  EXPECT_EQ(error_of(b->reconfigure_mig(0, {"7g.80gb"})),
            "mig: nvmlComputeInstanceDestroy failed: In use by another client (NVML error 19): a "
            "process still uses the GPU");
  EXPECT_EQ(profiles_of(devices(*b)[0]), (std::vector<std::string>{"1g.10gb", "3g.40gb"}));
}

TEST(NvmlMig, AnOlderDriverFindsProfilesBySlicesAndMemory) {
  // No versioned profile queries: the profiles have no names, so they are matched by their slices
  // and memory, and the media engines by the profile's index.
  FakeNvml lib(FAKE_NVML_OLD_DRIVER_LIBRARY);
  lib.configure("h200=1");
  auto b = backend(FAKE_NVML_OLD_DRIVER_LIBRARY);
  auto st = b->reconfigure_mig(0, {"3g.71gb", "1g.35gb", "1g.18gb+me", "1g.18gb"});
  ASSERT_TRUE(st.ok()) << st.error().message();
  EXPECT_EQ(lib.layout(0), "3g.71gb@0 1g.35gb@6 1g.18gb+me@4 1g.18gb@5");
}

}  // namespace
}  // namespace allot::agent
