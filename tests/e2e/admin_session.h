// What an end-to-end test on one Cluster (cluster.h) often wants besides: the `allot` CLI run as
// the cluster's administrator, and the cluster's directory (its processes' logs) kept for a person
// to read when the test fails.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cli_run.h"
#include "cluster.h"

namespace allot::e2e {

inline CliRun admin_cli(const Cluster& c, const std::string& args) {
  return run_allot(args, "ALLOT_ADDR=" + c.url() + " ALLOT_TOKEN=" + c.admin());
}

// Declared after the Cluster: when the test has failed by the time it ends, the cluster's
// directory stays behind and its path is printed.
struct KeepLogsOnFailure {
  Cluster& c;
  ~KeepLogsOnFailure() {
    if (::testing::Test::HasFailure()) {
      c.keep();
      std::fprintf(stderr, "logs of the failed test: %s\n", c.dir().c_str());
    }
  }
};

}  // namespace allot::e2e
