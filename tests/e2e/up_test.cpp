// The main job end to end: `allot up` (server + local cluster of agents in one process) and the
// `allot` CLI against it, as a user would run them: submit, see it run as a process on its fake
// GPUs, read its logs, and find the same admin token after a restart.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <cstdio>

#include "cli_run.h"
#include "cluster.h"

namespace allot::e2e {
namespace {

using Run = CliRun;

// Runs the allot CLI with ALLOT_ADDR/ALLOT_TOKEN set; stdout and stderr together.
Run cli(const std::string& addr, const std::string& token, const std::string& args) {
  return run_allot(args, "ALLOT_ADDR=" + addr + " ALLOT_TOKEN=" + token);
}

class UpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = (std::filesystem::temp_directory_path() /
            ("allot-up-test-" + std::to_string(rd()) + std::to_string(rd())))
               .string();
    std::filesystem::create_directories(dir_);
    port_ = free_port();
    addr_ = "http://127.0.0.1:" + std::to_string(port_);
  }
  void TearDown() override {
    up_.signal(SIGTERM);  // allot up stops its agents and their jobs
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }
  void start() {
    up_.start({ALLOT_BIN, "up", "--port", std::to_string(port_), "--data", dir_ + "/allot.db",
               "--nodes", "2", "--tick-ms", "100"},
              dir_ + "/up.log");
    ASSERT_TRUE(eventually([&] {
      token_ = slurp(dir_ + "/allot.db.admin-token");
      while (!token_.empty() && token_.back() == '\n') token_.pop_back();
      return !token_.empty() &&
             cli(addr_, token_, "nodes").out.find("local-02") != std::string::npos;
    })) << slurp(dir_ + "/up.log");
  }

  std::string dir_, addr_, token_;
  int port_ = 0;
  Process up_;
};

TEST_F(UpTest, RunsAJobAsAProcessOnItsLocalClusterAndShowsItsLogs) {
  start();
  auto nodes = cli(addr_, token_, "nodes");
  EXPECT_EQ(nodes.code, 0) << nodes.out;
  EXPECT_NE(nodes.out.find("local-01"), std::string::npos) << nodes.out;
  EXPECT_NE(nodes.out.find("healthy"), std::string::npos) << nodes.out;

  auto sub = cli(addr_, token_,
                 "submit --budget /lab/default --gpus 4 --min-runtime 10m -- sh -c "
                 "'echo \"training on $CUDA_VISIBLE_DEVICES\"; exit 0'");
  ASSERT_EQ(sub.code, 0) << sub.out;
  EXPECT_NE(sub.out.find("submitted job 1"), std::string::npos) << sub.out;
  ASSERT_TRUE(eventually([&] {
    return cli(addr_, token_, "show 1").out.find("succeeded") != std::string::npos;
  })) << cli(addr_, token_, "show 1").out;
  auto logs = cli(addr_, token_, "logs 1");
  EXPECT_EQ(logs.code, 0) << logs.out;
  EXPECT_NE(logs.out.find("training on GPU-fake-local-0"), std::string::npos) << logs.out;

  // A job that fails says so with its exit code.
  sub = cli(addr_, token_, "submit --budget /lab/default --gpus 1 -- sh -c 'exit 7'");
  ASSERT_EQ(sub.code, 0) << sub.out;
  ASSERT_TRUE(eventually([&] {
    return cli(addr_, token_, "show 2").out.find("failed") != std::string::npos;
  })) << cli(addr_, token_, "show 2").out;
  EXPECT_NE(cli(addr_, token_, "show 2").out.find("exited with code 7"), std::string::npos);
}

TEST_F(UpTest, ARestartKeepsTheAdminTokenAndTheJobs) {
  start();
  const std::string first = token_;
  auto sub = cli(addr_, token_, "submit --budget /lab/default --gpus 1 -- true");
  ASSERT_EQ(sub.code, 0) << sub.out;
  ASSERT_TRUE(eventually(
      [&] { return cli(addr_, token_, "show 1").out.find("succeeded") != std::string::npos; }));
  up_.signal(SIGTERM);
  start();
  EXPECT_EQ(token_, first);
  auto show = cli(addr_, token_, "show 1");
  EXPECT_EQ(show.code, 0) << show.out;
  EXPECT_NE(show.out.find("succeeded"), std::string::npos) << show.out;
  // Its secrets are the invoking user's alone (docs/agent.md, "Files and their modes").
  auto mode = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 07777u;
  };
  EXPECT_EQ(mode(dir_ + "/allot.db"), 0600u);
  EXPECT_EQ(mode(dir_ + "/allot.db.admin-token"), 0600u);
  EXPECT_EQ(mode(dir_ + "/allot.db.local/agents/local-01/token"), 0600u);
  EXPECT_EQ(mode(dir_ + "/allot.db.local/agents/local-01/state"), 0700u);
}

}  // namespace
}  // namespace allot::e2e
