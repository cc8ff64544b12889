// kill -9 under load: the real `allot server` process takes a submit storm from several client
// threads and is killed and restarted repeatedly. Afterwards every acknowledged job is there
// exactly once, and the ledger holds each run segment once. Loopback only; bounded in time.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "../e2e/kept_jobs.h"
#include "../e2e/submit_storm.h"
#include "store/sqlite_store.h"

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::string read_file(const std::string& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}

class ServerProcess {
 public:
  explicit ServerProcess(std::string dir) : dir_(std::move(dir)) {}
  ~ServerProcess() { kill9(); }
  void start() {
    std::filesystem::remove(dir_ + "/addr");
    pid_ = fork();
    if (pid_ == 0) {
      std::freopen((dir_ + "/server.log").c_str(), "a", stdout);
      std::freopen((dir_ + "/server.log").c_str(), "a", stderr);
      execl(ALLOT_BIN, ALLOT_BIN, "server", "--data", (dir_ + "/allot.db").c_str(), "--port", "0",
            "--addr-file", (dir_ + "/addr").c_str(), "--token-file", (dir_ + "/token").c_str(),
            "--sim-nodes", "4", "--sim-duration", "1", "--tick-ms", "20", "--threads", "16",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 2000 && !std::filesystem::exists(dir_ + "/addr"); ++i) {
      std::this_thread::sleep_for(5ms);
    }
    auto addr = read_file(dir_ + "/addr");
    ASSERT_FALSE(addr.empty()) << "server did not start; see " << dir_ << "/server.log";
    port_ = std::stoi(addr.substr(addr.rfind(':') + 1));
  }
  void kill9() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      waitpid(pid_, &st, 0);
      pid_ = -1;
    }
  }
  int port() const { return port_; }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  std::atomic<int> port_{0};
};

TEST(CrashSafety, KillNineDuringSubmitStormLosesNoAcknowledgedJob) {
#if defined(__SANITIZE_ADDRESS__)
  const int kRounds = 2;
#else
  const int kRounds = 5;
#endif
  std::random_device rd;
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("allot-crash-" + std::to_string(rd()) + std::to_string(rd())))
                              .string();
  std::filesystem::create_directories(dir);
  ServerProcess server(dir);
  server.start();
  const std::string token = read_file(dir + "/token");
  ASSERT_FALSE(token.empty());
  const httplib::Headers auth = {{"Authorization", "Bearer " + token}};
  {
    httplib::Client c("127.0.0.1", server.port());
    auto r = c.Post("/api/v1/budgets", auth, R"({"path":"/lab/a","share":1})", "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
  }

  std::atomic<int> port{server.port()};
  allot::e2e::SubmitStorm storm([&] { return port.load(); }, token,
                                [](const std::string&) {
                                  return json{{"budget", "/lab/a"},
                                              {"gpus_per_node", 2},
                                              {"expected_duration", 1},
                                              {"min_runtime", 60}};
                                },
                                {});
  for (int round = 0; round < kRounds; ++round) {
    std::this_thread::sleep_for(700ms);
    server.kill9();
    server.start();
    port = server.port();
  }
  std::this_thread::sleep_for(500ms);
  storm.stop();
  server.kill9();

  auto opened = allot::store::open_sqlite(dir + "/allot.db");
  ASSERT_TRUE(opened.ok());
  ASSERT_GT(storm.count(), 20u);
  allot::e2e::expect_acknowledged_jobs_kept(*opened.value(), storm.acked());
  std::filesystem::remove_all(dir);
}

}  // namespace
