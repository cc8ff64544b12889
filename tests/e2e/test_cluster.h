// The end-to-end tests' cluster (cluster.h): its directory, with the log of every process, stays
// behind when the test fails, and the test's output says where.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

#include "cluster.h"

namespace allot::e2e {

class TestCluster : public Cluster {
 public:
  using Cluster::Cluster;
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;
  ~TestCluster() {
    if (::testing::Test::HasFailure()) {
      keep();
      std::fprintf(stderr, "logs of the failed test: %s\n", dir().c_str());
    }
  }
};

}  // namespace allot::e2e
