// The fixture of the CLI tests: a real `allot server` process (2 simulated nodes of 8 GPUs) per
// test suite, and `allot` run as a child process with its output, errors and exit code.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace cli_testing {

using json = nlohmann::json;
using namespace std::chrono_literals;

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::string first_line(const std::string& path) {
  auto s = slurp(path);
  return s.substr(0, s.find('\n'));
}

struct Out {
  int code = -1;
  std::string out, err;
};

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::random_device rd;
    dir_ = (std::filesystem::temp_directory_path() /
            ("allot-cli-" + std::to_string(rd()) + std::to_string(rd())))
               .string();
    std::filesystem::create_directories(dir_ + "/home");
    server_ = fork();
    if (server_ == 0) {
      std::freopen((dir_ + "/server.log").c_str(), "a", stdout);
      std::freopen((dir_ + "/server.log").c_str(), "a", stderr);
      std::vector<std::string> args = {ALLOT_BIN,          "server",
                                       "--data",           dir_ + "/allot.db",
                                       "--port",           "0",
                                       "--addr-file",      dir_ + "/addr",
                                       "--token-file",     dir_ + "/token",
                                       "--sim-nodes",      "2",
                                       "--sim-duration",   "3600",
                                       "--tick-ms",        "50",
                                       "--event-log",      dir_ + "/events.jsonl",
                                       "--metrics-listen", "127.0.0.1:0"};
      args.insert(args.end(), server_flags_.begin(), server_flags_.end());
      std::vector<char*> argv;
      argv.reserve(args.size() + 1);
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(ALLOT_BIN, argv.data());
      _exit(127);
    }
    for (int i = 0; i < 2000 && !std::filesystem::exists(dir_ + "/addr"); ++i) {
      std::this_thread::sleep_for(5ms);
    }
    addr_ = first_line(dir_ + "/addr");
    admin_ = first_line(dir_ + "/token");
  }
  static void TearDownTestSuite() {
    if (server_ > 0) {
      ::kill(server_, SIGTERM);
      int st = 0;
      waitpid(server_, &st, 0);
    }
    std::filesystem::remove_all(dir_);
  }
  void SetUp() override {
    ASSERT_FALSE(addr_.empty()) << "server did not start: " << slurp(dir_ + "/server.log");
  }

  // Runs `allot args...` with the given token (admin by default; "" for none) and stdin file.
  static Out allot(const std::vector<std::string>& args, const std::string& token = "admin",
                   const std::string& addr = "") {
    const std::string out = dir_ + "/out", err = dir_ + "/err";
    pid_t pid = fork();
    if (pid == 0) {
      int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(o, 1);
      dup2(e, 2);
      setenv("HOME", (dir_ + "/home").c_str(), 1);
      setenv("ALLOT_ADDR", (addr.empty() ? addr_ : addr).c_str(), 1);
      if (token.empty()) {
        unsetenv("ALLOT_TOKEN");
      } else {
        setenv("ALLOT_TOKEN", (token == "admin" ? admin_ : token).c_str(), 1);
      }
      std::vector<char*> argv{const_cast<char*>(ALLOT_BIN)};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(ALLOT_BIN, argv.data());
      _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(out), slurp(err)};
  }
  static std::string file(const std::string& name, const std::string& text) {
    auto p = dir_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  static httplib::Headers bearer(const std::string& tok) {
    return {{"Authorization", "Bearer " + tok}};
  }
  static int port() { return std::stoi(addr_.substr(addr_.rfind(':') + 1)); }
  // Waits until job `id` is in `state`.
  static bool wait_state(const std::string& id, const std::string& state) {
    for (int i = 0; i < 400; ++i) {
      auto r = allot({"show", id, "--json"});
      if (r.code == 0 && json::parse(r.out).value("state", "") == state) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  static std::string id_of(const Out& submitted) {
    auto j = json::parse(submitted.out, nullptr, false);
    return j.is_object() ? std::to_string(j.value("id", 0)) : "";
  }

  static inline std::string dir_, addr_, admin_;
  // More flags for `allot server`: a suite sets them in its own SetUpTestSuite before Cli's.
  static inline std::vector<std::string> server_flags_;
  static inline pid_t server_ = -1;
};

}  // namespace cli_testing
