// What a backend discovers, for the MIG re-partitioning tests (fake_backend_test.cpp,
// nvml_mig_test.cpp): its devices, and a GPU's MIG profiles in order.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "agent/gpu_backend.h"

namespace allot::agent {

inline std::vector<GpuDevice> devices(GpuBackend& b) {
  auto d = b.discover();
  EXPECT_TRUE(d.ok()) << d.error().message();
  return d.ok() ? d.value() : std::vector<GpuDevice>{};
}

inline std::vector<std::string> profiles_of(const GpuDevice& d) {
  std::vector<std::string> out;
  for (const MigDevice& m : d.mig) out.push_back(m.profile);
  return out;
}

}  // namespace allot::agent
