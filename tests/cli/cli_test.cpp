// The real `allot` CLI against a real `allot server` process: every client command, its output
// and its exit code (0 done, 1 refused, 2 bad usage, 3 unreachable, 4 not authorised, 5 not
// found), and that errors say what to fix. A node agent is played over HTTP for `allot logs`.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string first_line(const std::string& path) {
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
      execl(ALLOT_BIN, ALLOT_BIN, "server", "--data", (dir_ + "/allot.db").c_str(), "--port", "0",
            "--addr-file", (dir_ + "/addr").c_str(), "--token-file", (dir_ + "/token").c_str(),
            "--sim-nodes", "2", "--sim-duration", "3600", "--tick-ms", "50",
            static_cast<char*>(nullptr));
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
    const auto p = dir_ + "/" + name;
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
  static inline pid_t server_ = -1;
};

TEST_F(Cli, SubmitWithFlagsAndYamlThenListShowWhyCancel) {
  ASSERT_EQ(allot({"budget", "set", "/lab/cli", "--share", "2", "--members", "ann,bob"}).code, 0);
  auto s = allot({"submit",
                  "--budget",
                  "/lab/cli",
                  "--gpus",
                  "2",
                  "--name",
                  "flags",
                  "--env",
                  "SEED=7",
                  "--env=LR=0.1",
                  "--memory",
                  "64G",
                  "--cpus",
                  "4",
                  "--workdir",
                  "/tmp",
                  "--container",
                  "img:1",
                  "--min-runtime",
                  "10m",
                  "--expected",
                  "2h",
                  "--json",
                  "--",
                  "python",
                  "train.py",
                  "--epochs",
                  "3"});
  ASSERT_EQ(s.code, 0) << s.err;
  const auto spec = json::parse(s.out)["spec"];
  EXPECT_EQ(spec["env"], json({{"LR", "0.1"}, {"SEED", "7"}}));
  EXPECT_EQ(spec["memory_mib"], 65536);
  EXPECT_EQ(spec["cpus"], 4);
  EXPECT_EQ(spec["min_runtime"], 600);
  EXPECT_EQ(spec["expected_duration"], 7200);
  EXPECT_EQ(spec["command"], json({"python", "train.py", "--epochs", "3"}));
  EXPECT_EQ(spec["workdir"], "/tmp");
  const auto flags = id_of(s);

  const auto yaml = file("job.yaml",
                         "budget: /lab/cli\n"
                         "name: from-yaml\n"
                         "gpus: 1\n"
                         "memory: 1.5T\n"
                         "expected_duration: 30m\n"
                         "resumable: true\n"
                         "env: {SEED: 3, DEBUG: true}\n"
                         "command: [python, eval.py, 5]\n");
  s = allot({"submit", yaml, "--json"});
  ASSERT_EQ(s.code, 0) << s.err;
  const auto y = json::parse(s.out);
  EXPECT_EQ(y["name"], "from-yaml");
  EXPECT_EQ(y["spec"]["memory_mib"], 1536 * 1024);
  EXPECT_EQ(y["spec"]["expected_duration"], 1800);
  EXPECT_EQ(y["spec"]["env"], json({{"DEBUG", "true"}, {"SEED", "3"}}));
  EXPECT_EQ(y["spec"]["command"], json({"python", "eval.py", "5"}));
  EXPECT_EQ(y["spec"]["resumable"], true);
  // No --workdir: the job starts where it was submitted from.
  EXPECT_EQ(y["spec"]["workdir"], std::filesystem::current_path().string());
  const auto yid = id_of(s);

  // Plain output.
  s = allot({"submit", "--budget", "/lab/cli", "--gpus", "1", "--", "sleep", "1"});
  ASSERT_EQ(s.code, 0);
  EXPECT_EQ(s.out.rfind("submitted job ", 0), 0u) << s.out;

  // Refusals name the field, with the exit code of what went wrong.
  s = allot({"submit", "--budget", "/lab/nope", "--gpus", "1"});
  EXPECT_EQ(s.code, 1);
  EXPECT_NE(s.err.find("budget"), std::string::npos) << s.err;
  s = allot({"submit", "--budget", "/lab/cli", "--env", "CUDA_VISIBLE_DEVICES=0"});
  EXPECT_EQ(s.code, 1);
  EXPECT_NE(s.err.find("env.CUDA_VISIBLE_DEVICES"), std::string::npos) << s.err;
  s = allot({"submit", "--gpus", "1"});
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("--budget"), std::string::npos) << s.err;
  s = allot({"submit", "--budget", "/lab/cli", "--memory", "lots"});
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("--memory"), std::string::npos) << s.err;
  s = allot({"submit", "--budget", "/lab/cli", "--env", "NOEQUALS"});
  EXPECT_EQ(s.code, 2);
  s = allot({"submit", file("bad.yaml", "[1, 2]")});
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.err.find("mapping"), std::string::npos) << s.err;
  s = allot({"submit", dir_ + "/missing.yaml"});
  EXPECT_EQ(s.code, 2);

  // ls, show, why.
  ASSERT_TRUE(wait_state(flags, "running"));
  auto l = allot({"ls", "--budget", "/lab/cli"});
  ASSERT_EQ(l.code, 0) << l.err;
  EXPECT_EQ(l.out.rfind("ID", 0), 0u);
  EXPECT_NE(l.out.find("from-yaml"), std::string::npos) << l.out;
  l = allot({"ls", "--budget", "/lab/cli", "--state", "running", "--json"});
  ASSERT_EQ(l.code, 0);
  const auto listed = json::parse(l.out);
  ASSERT_FALSE(listed.empty());
  for (const auto& j : listed) EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(allot({"ls", "--state", "sleeping"}).code, 1);
  auto sh = allot({"show", flags});
  ASSERT_EQ(sh.code, 0);
  EXPECT_NE(sh.out.find("job " + flags + "  flags"), std::string::npos) << sh.out;
  EXPECT_NE(sh.out.find("events:"), std::string::npos);
  EXPECT_NE(sh.out.find("-> running"), std::string::npos) << sh.out;
  auto w = allot({"why", flags});
  ASSERT_EQ(w.code, 0);
  EXPECT_EQ(w.out.rfind("job " + flags + " is running", 0), 0u) << w.out;
  EXPECT_EQ(allot({"show", "999999"}).code, 5);
  EXPECT_EQ(allot({"show"}).code, 2);
  EXPECT_EQ(allot({"why", "x"}).code, 2);

  // cancel
  auto c = allot({"cancel", yid, "--reason", "not needed"});
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(c.out, "job " + yid + " cancelled\n");
  c = allot({"cancel", yid});
  EXPECT_EQ(c.code, 1);
  EXPECT_NE(c.err.find("already ended"), std::string::npos) << c.err;
}

TEST_F(Cli, BudgetsNodesReportAndTokens) {
  ASSERT_EQ(allot({"budget", "set", "/org/x", "--share", "3", "--owners", "olga"}).code, 0);
  auto t = allot({"budget", "tree"});
  ASSERT_EQ(t.code, 0);
  EXPECT_NE(t.out.find("OWNERS"), std::string::npos);
  EXPECT_NE(t.out.find("/org/x"), std::string::npos);
  EXPECT_NE(t.out.find("olga"), std::string::npos) << t.out;
  EXPECT_EQ(json::parse(allot({"budget", "tree", "--json"}).out)["budgets"].size() > 2, true);
  auto u = allot({"budget", "usage", "--since", "1d", "--by", "user"});
  ASSERT_EQ(u.code, 0) << u.err;
  EXPECT_EQ(u.out.rfind("USER", 0), 0u) << u.out;
  EXPECT_EQ(allot({"budget", "set", "/org/x", "--share", "many"}).code, 2);
  EXPECT_EQ(allot({"budget", "frobnicate"}).code, 2);
  auto rm = allot({"budget", "rm", "/org/x"});
  ASSERT_EQ(rm.code, 0) << rm.err;
  EXPECT_EQ(rm.out, "removed /org/x\n");
  EXPECT_EQ(allot({"budget", "rm", "/org/x"}).code, 5);

  // The report before any node changes health (availability is exactly 1 then), once the
  // nodes have existed for a whole second (times are seconds).
  std::this_thread::sleep_for(1100ms);
  auto r = allot({"report", "--since", "1h"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* k : {"availability", "occupancy", "impact", "utilization", "BUDGET"}) {
    EXPECT_NE(r.out.find(k), std::string::npos) << k << "\n" << r.out;
  }
  auto csv = allot({"report", "--since", "1h", "--format", "csv"});
  ASSERT_EQ(csv.code, 0);
  EXPECT_EQ(csv.out.rfind("section,name,metric,value\n", 0), 0u);
  EXPECT_NE(csv.out.find("all,/,availability,1\n"), std::string::npos) << csv.out;
  auto js = allot({"report", "--since", "1h", "--format", "json"});
  ASSERT_EQ(js.code, 0);
  EXPECT_DOUBLE_EQ(json::parse(js.out)["availability"]["value"].get<double>(), 1.0);
  EXPECT_EQ(allot({"report", "--format", "xml"}).code, 2);

  auto n = allot({"nodes"});
  ASSERT_EQ(n.code, 0);
  EXPECT_NE(n.out.find("sim-01"), std::string::npos) << n.out;
  EXPECT_NE(n.out.find("simulated"), std::string::npos);
  auto d = allot({"drain", "sim-02", "--reason", "fan"});
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_EQ(d.out, "node sim-02: draining\n");
  EXPECT_EQ(allot({"undrain", "sim-02"}).out, "node sim-02: healthy\n");
  EXPECT_EQ(allot({"cordon", "sim-02"}).out, "node sim-02: healthy, cordoned\n");
  EXPECT_EQ(allot({"uncordon", "sim-02"}).out, "node sim-02: healthy\n");
  EXPECT_EQ(allot({"drain", "nosuch"}).code, 5);

  // Tokens: create one for ann, use it, revoke it.
  ASSERT_EQ(allot({"budget", "set", "/lab/tok", "--members", "ann"}).code, 0);
  auto c = allot({"token", "create", "ann-cli", "--role", "user", "--subject", "ann"});
  ASSERT_EQ(c.code, 0) << c.err;
  const auto ann = c.out.substr(0, c.out.find('\n'));
  EXPECT_EQ(ann.rfind("allot_", 0), 0u);
  EXPECT_NE(c.err.find("shown once"), std::string::npos);
  auto mine = allot({"submit", "--budget", "/lab/tok", "--gpus", "1"}, ann);
  EXPECT_EQ(mine.code, 0) << mine.err;
  EXPECT_EQ(allot({"submit", "--budget", "/org/y", "--gpus", "1"}, ann).code, 1);  // no budget
  EXPECT_EQ(allot({"token", "ls"}, ann).code, 4);
  auto ls = allot({"token", "ls"});
  ASSERT_EQ(ls.code, 0);
  std::string id;
  const auto tokens = json::parse(allot({"token", "ls", "--json"}).out);
  for (const auto& tk : tokens["tokens"]) {
    if (tk["name"] == "ann-cli") id = std::to_string(tk["id"].get<long long>());
  }
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(allot({"token", "revoke", id}).out, "token " + id + " revoked\n");
  auto after = allot({"ls"}, ann);
  EXPECT_EQ(after.code, 4);
  EXPECT_NE(after.err.find("Authorization"), std::string::npos) << after.err;
  EXPECT_EQ(allot({"token", "create", "x"}).code, 2);
  EXPECT_EQ(allot({"token", "revoke", "999999"}).code, 5);
}

TEST_F(Cli, ConnectionProblemsSayWhatToFix) {
  auto none = allot({"ls"}, "");
  EXPECT_EQ(none.code, 4);
  EXPECT_NE(none.err.find("ALLOT_TOKEN"), std::string::npos) << none.err;
  auto bad = allot({"ls"}, "allot_0000000000000000000000000000000000000000");
  EXPECT_EQ(bad.code, 4);
  auto gone = allot({"ls"}, "admin", "http://127.0.0.1:1");
  EXPECT_EQ(gone.code, 3);
  EXPECT_NE(gone.err.find("ALLOT_ADDR"), std::string::npos) << gone.err;
  EXPECT_EQ(allot({"ls", "--help"}).code, 0);
}

TEST_F(Cli, LogsFromAnAgentAndFollowUntilComplete) {
  // Play a node agent: register a real node, take the job, upload its output.
  const std::string node = "cli-gpu1";
  auto tok = allot({"token", "create", "agent-" + node, "--role", "agent", "--scope", node});
  ASSERT_EQ(tok.code, 0) << tok.err;
  const auto agent = tok.out.substr(0, tok.out.find('\n'));
  httplib::Client http("127.0.0.1", port());
  auto reg =
      http.Post("/api/v1/nodes", bearer(agent),
                json{{"name", node}, {"cluster", "real"}, {"model", "H100"}, {"gpus", 8}}.dump(),
                "application/json");
  ASSERT_TRUE(reg);
  ASSERT_EQ(reg->status, 201) << reg->body;
  ASSERT_EQ(allot({"budget", "set", "/lab/logs", "--share", "1"}).code, 0);
  auto s = allot({"submit", "--budget", "/lab/logs", "--gpus", "8", "--cluster", "real", "--json",
                  "--", "echo", "hi"});
  ASSERT_EQ(s.code, 0) << s.err;
  const auto id = id_of(s);
  ASSERT_TRUE(wait_state(id, "starting"));
  auto up = [&](const std::string& q, const std::string& body) {
    return http.Post(("/api/v1/agent/nodes/" + node + "/logs?job=" + id + "&run=1" + q).c_str(),
                     bearer(agent), body, "application/octet-stream");
  };
  auto report = [&](const json& r) {
    return http.Post(("/api/v1/agent/nodes/" + node + "/reports").c_str(), bearer(agent),
                     json{{"reports", {r}}}.dump(), "application/json");
  };
  ASSERT_EQ(report({{"job", std::stoll(id)}, {"run", 1}, {"event", "started"}})->status, 200);
  ASSERT_EQ(up("&stream=stdout&offset=0", "hello\n")->status, 200);
  ASSERT_EQ(up("&stream=stderr&offset=0", "warning\n")->status, 200);
  auto l = allot({"logs", id});
  ASSERT_EQ(l.code, 0) << l.err;
  EXPECT_EQ(l.out, "hello\n");
  EXPECT_EQ(allot({"logs", id, "--stderr"}).out, "warning\n");
  EXPECT_EQ(allot({"logs", id, "--node", node}).out, "hello\n");
  EXPECT_EQ(allot({"logs", "999999"}).code, 5);
  EXPECT_EQ(allot({"logs"}).code, 2);
  // -f follows: more bytes arrive, the run exits, the agent marks the stream final.
  std::thread agent_side([&] {
    std::this_thread::sleep_for(1500ms);
    up("&stream=stdout&offset=6", "world\n");
    report({{"job", std::stoll(id)}, {"run", 1}, {"event", "exited"}, {"exit_code", 0}});
    up("&stream=stdout&offset=12&final=true", "");
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto f = allot({"logs", id, "-f"});
  agent_side.join();
  EXPECT_EQ(f.code, 0) << f.err;
  EXPECT_EQ(f.out, "hello\nworld\n");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
}

// allot up shows the same admin token at every start on the same data, kept in a private file.
TEST(CliUp, ReusesItsAdminToken) {
  std::random_device rd;
  const auto dir = (std::filesystem::temp_directory_path() /
                    ("allot-up-" + std::to_string(rd()) + std::to_string(rd())))
                       .string();
  std::filesystem::create_directories(dir);
  auto once = [&]() {
    std::filesystem::remove(dir + "/addr");
    pid_t pid = fork();
    if (pid == 0) {
      std::freopen((dir + "/up.log").c_str(), "w", stdout);
      execl(ALLOT_BIN, ALLOT_BIN, "up", "--data", (dir + "/a.db").c_str(), "--port", "0",
            "--addr-file", (dir + "/addr").c_str(), "--sim-nodes", "1",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 2000 && !std::filesystem::exists(dir + "/addr"); ++i) {
      std::this_thread::sleep_for(5ms);
    }
    ::kill(pid, SIGTERM);
    int st = 0;
    waitpid(pid, &st, 0);
    return slurp(dir + "/up.log");
  };
  const auto first = once();
  const auto kept = first_line(dir + "/a.db.admin-token");
  ASSERT_EQ(kept.rfind("allot_", 0), 0u) << first;
  EXPECT_NE(first.find(kept), std::string::npos);
  EXPECT_EQ(std::filesystem::status(dir + "/a.db.admin-token").permissions() &
                std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const auto second = once();
  EXPECT_NE(second.find(kept), std::string::npos) << second;
  EXPECT_NE(second.find("the same as before"), std::string::npos) << second;
  std::filesystem::remove_all(dir);
}

}  // namespace
