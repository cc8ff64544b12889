// `allot ls` against a real server: -o wide's extra columns, -o json as --json, a refused -o
// value, and --watch listing again until stopped.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_server.h"

namespace {

using cli_testing::Cli;
using json = nlohmann::json;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The line of `listing` that starts with job `id`, "" if none.
std::string row_of(const std::string& listing, const std::string& id) {
  const auto at = listing.find("\n" + id + " ");
  return at == std::string::npos ? "" : listing.substr(at + 1, listing.find('\n', at + 1) - at - 1);
}

TEST_F(Cli, LsWideShowsPlacementShapeContractPriorityAndSubmitTime) {
  ASSERT_EQ(allot({"budget", "create", "/lab/wide", "--share", "1"}).code, 0);
  auto gang = allot({"submit", "--budget", "/lab/wide", "--gpus-per-node", "4", "--nodes", "2",
                     "--min-runtime", "20m", "--priority", "high", "--name", "gang", "--json"});
  ASSERT_EQ(gang.code, 0) << gang.err;
  const auto id = std::to_string(json::parse(gang.out)["id"].get<unsigned long long>());
  ASSERT_TRUE(wait_state(id, "running"));
  // The placement has one entry per GPU; NODES names each node once.
  std::vector<std::string> placed;
  const auto shown = json::parse(allot({"show", id, "--json"}).out);
  for (const auto& g : shown["placement"]) {
    const auto node = g["node"].get<std::string>();
    if (std::find(placed.begin(), placed.end(), node) == placed.end()) placed.push_back(node);
  }
  ASSERT_EQ(placed.size(), 2u) << shown.dump();

  auto plain = allot({"ls", "--budget", "/lab/wide"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("NODES"), std::string::npos) << plain.out;

  for (const std::vector<std::string>& wide :
       {std::vector<std::string>{"ls", "--budget", "/lab/wide", "-o", "wide"},
        {"ls", "--budget", "/lab/wide", "--output=wide"},
        {"ls", "-owide", "--budget", "/lab/wide"}}) {
    auto w = allot(wide);
    ASSERT_EQ(w.code, 0) << w.err;
    const auto head = w.out.substr(0, w.out.find('\n'));
    for (const char* col : {"CLASS", "PROTECTED", "NODES", "SHAPE", "MIN-RUNTIME", "PRIORITY",
                            "SUBMITTED", "REASON"}) {
      EXPECT_NE(head.find(col), std::string::npos) << col << " in " << head;
    }
    const auto row = row_of(w.out, id);
    ASSERT_FALSE(row.empty()) << w.out;
    const auto nodes = placed[0] + "," + placed[1];
    EXPECT_NE(row.find(" " + nodes + " "), std::string::npos) << row;
    EXPECT_NE(row.find(" 2x4 "), std::string::npos) << row;
    EXPECT_NE(row.find(" 20m "), std::string::npos) << row;
    EXPECT_NE(row.find(" high "), std::string::npos) << row;
    EXPECT_NE(row.find(" allocated "), std::string::npos) << row;
    // SUBMITTED is a local wall-clock time (HH:MM:SS today).
    EXPECT_NE(row.find(':'), std::string::npos) << row;
  }

  // -o json is --json: the same list of jobs.
  for (const std::vector<std::string>& as_json :
       {std::vector<std::string>{"ls", "--budget", "/lab/wide", "-o", "json"},
        {"ls", "--budget", "/lab/wide", "--json"}}) {
    auto j = allot(as_json);
    ASSERT_EQ(j.code, 0) << j.err;
    const auto jobs = json::parse(j.out, nullptr, false);
    ASSERT_TRUE(jobs.is_array()) << j.out;
    ASSERT_EQ(jobs.size(), 1u) << j.out;
    EXPECT_EQ(std::to_string(jobs[0]["id"].get<unsigned long long>()), id);
  }

  // An unknown -o value: exit 2, naming the values it takes.
  auto bad = allot({"ls", "-o", "yaml"});
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.err.find("'yaml' is not one of wide, json"), std::string::npos) << bad.err;
  // Under -o json its errors are JSON too.
  auto bad_json = allot({"ls", "-o", "json", "--state", "runing"});
  EXPECT_EQ(bad_json.code, 2);
  EXPECT_TRUE(json::parse(bad_json.err, nullptr, false).contains("error")) << bad_json.err;
  // The aliases are in the help.
  auto help = allot({"ls", "--help"});
  EXPECT_NE(help.out.find("-o, --output F"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("-w, --watch [INTERVAL]"), std::string::npos) << help.out;
}

TEST_F(Cli, LsWatchListsAgainEachIntervalUntilStopped) {
  ASSERT_EQ(allot({"budget", "create", "/lab/watch", "--share", "1"}).code, 0);
  auto s = allot({"submit", "--budget", "/lab/watch", "--hold", "--name", "watched", "--json"});
  ASSERT_EQ(s.code, 0) << s.err;
  const auto id = std::to_string(json::parse(s.out)["id"].get<unsigned long long>());

  // Not a terminal: a line of dashes and the listing, each time.
  const auto start = std::chrono::steady_clock::now();
  auto w = allot({"ls", "--budget", "/lab/watch", "-w", "1s", "--watch-count", "2"});
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(w.code, 0) << w.err;
  EXPECT_EQ(count(w.out, "--- "), 2u) << w.out;
  EXPECT_EQ(count(w.out, "(every 1s) ---"), 2u) << w.out;
  EXPECT_EQ(count(w.out, "\nID "), 2u) << w.out;
  EXPECT_EQ(count(w.out, "\n" + id + " "), 2u) << w.out;
  EXPECT_EQ(w.out.find("\033["), std::string::npos) << "no screen clearing into a pipe";
  EXPECT_GE(took, std::chrono::milliseconds(900)) << "it waited the interval between listings";

  // The default interval is 2s; a listing reflects the server each time (here: a release).
  auto dflt = allot({"ls", "--budget", "/lab/watch", "--watch", "--watch-count", "1"});
  ASSERT_EQ(dflt.code, 0) << dflt.err;
  EXPECT_NE(dflt.out.find("(every 2s) ---"), std::string::npos) << dflt.out;

  // Under --json: one JSON list a line.
  auto j = allot({"ls", "--budget", "/lab/watch", "--watch=1s", "--watch-count", "2", "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const auto first = j.out.substr(0, j.out.find('\n'));
  const auto second = j.out.substr(first.size() + 1);
  EXPECT_EQ(json::parse(first, nullptr, false).size(), 1u) << j.out;
  EXPECT_EQ(json::parse(second, nullptr, false).size(), 1u) << j.out;

  // Bad watch values are refused, naming the flag.
  auto zero = allot({"ls", "--watch", "0s", "--watch-count", "1"});
  EXPECT_EQ(zero.code, 2);
  EXPECT_NE(zero.err.find("--watch: the interval must be at least 1s"), std::string::npos)
      << zero.err;
  auto odd = allot({"ls", "-w", "soon"});
  EXPECT_EQ(odd.code, 2);
  EXPECT_NE(odd.err.find("--watch: 'soon' is not a duration"), std::string::npos) << odd.err;
  auto alone = allot({"ls", "--watch-count", "2"});
  EXPECT_EQ(alone.code, 2);
  EXPECT_NE(alone.err.find("--watch-count needs --watch"), std::string::npos) << alone.err;
}

// `allot ls -w` in the background, its output and errors in files under the test's directory.
struct Watch {
  pid_t pid = -1;
  std::string out, err;
  // Waits (at most `limit`) for it to exit; its exit code, -1 if it did not.
  int wait_exit(std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      int st = 0;
      if (::waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return -1;
  }
  // Waits until it printed `n` listings (a line of dashes each).
  bool listed(std::size_t n) const {
    for (int i = 0; i < 500; ++i) {
      if (count(cli_testing::slurp(out), "--- ") >= n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
};

Watch watch(const std::string& dir, const std::string& addr, const std::string& token,
            const std::vector<std::string>& extra = {}) {
  Watch w{-1, dir + "/watch.out", dir + "/watch.err"};
  w.pid = fork();
  if (w.pid == 0) {
    int o = ::open(w.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = ::open(w.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, 1);
    dup2(e, 2);
    setenv("HOME", (dir + "/home").c_str(), 1);
    setenv("ALLOT_ADDR", addr.c_str(), 1);
    setenv("ALLOT_TOKEN", token.c_str(), 1);
    std::vector<std::string> args{ALLOT_BIN, "ls", "-w", "1s"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    execv(ALLOT_BIN, argv.data());
    _exit(127);
  }
  return w;
}

// A watch whose token is revoked stops at its next refresh: not authorised (4), one line.
TEST_F(Cli, LsWatchStopsWhenItsTokenIsRevoked) {
  auto t = allot({"token", "create", "watcher", "--role", "user", "--subject", "wat"});
  ASSERT_EQ(t.code, 0) << t.err;
  auto w = watch(dir_, addr_, t.out.substr(0, t.out.find('\n')));
  ASSERT_TRUE(w.listed(1)) << cli_testing::slurp(w.err);
  const auto id = t.err.substr(6, t.err.find(' ', 6) - 6);  // "token 12 for wat (user): ..."
  ASSERT_EQ(allot({"token", "revoke", id}).code, 0) << t.err;
  EXPECT_EQ(w.wait_exit(std::chrono::seconds(10)), 4) << cli_testing::slurp(w.err);
  const auto err = cli_testing::slurp(w.err);
  EXPECT_EQ(count(err, "\n"), 1u) << err;
  EXPECT_EQ(err.rfind("allot: ls --watch stopped (the last listing is from ", 0), 0u) << err;
  EXPECT_NE(err.find("server refused (401)"), std::string::npos) << err;
}

// A server that answers the first listing, then fails with 503: the watch exits with 6 (server
// error) after exactly one listing, under --json with one JSON error line.
TEST(LsWatch, StopsOnAServerError) {
  httplib::Server fake;
  std::atomic<int> asked{0};
  fake.Get("/api/v1/jobs", [&](const httplib::Request&, httplib::Response& res) {
    if (asked++ == 0) {
      res.set_content(R"({"jobs": [], "next": null})", "application/json");
    } else {
      res.status = 503;
      res.set_content(R"({"error": {"field": "", "reason": "overloaded"}})", "application/json");
    }
  });
  const int port = fake.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { fake.listen_after_bind(); });
  const auto dir =
      std::filesystem::temp_directory_path() / ("allot-watch-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "home");
  auto w = watch(dir.string(), "127.0.0.1:" + std::to_string(port), "any", {"--json"});
  const int code = w.wait_exit(std::chrono::seconds(10));
  const auto out = cli_testing::slurp(w.out), err = cli_testing::slurp(w.err);
  fake.stop();
  serving.join();
  std::filesystem::remove_all(dir);
  EXPECT_EQ(code, 6) << err;
  EXPECT_EQ(out, "[]\n");
  EXPECT_EQ(count(err, "\n"), 1u) << err;
  const auto e = json::parse(err, nullptr, false);
  ASSERT_TRUE(e.contains("error")) << err;
  EXPECT_EQ(e["error"]["exit_code"], 6) << err;
  EXPECT_EQ(e["error"]["status"], 503) << err;
  EXPECT_NE(e["error"]["message"].get<std::string>().find("overloaded"), std::string::npos) << err;
}

// Its own server, which the test kills during a watch: exit 3 (unreachable), one line saying the
// watch stopped, and no listing printed after the server went.
class LsWatchServerGone : public Cli {};

TEST_F(LsWatchServerGone, ExitsUnreachableWithOneLine) {
  auto w = watch(dir_, addr_, admin_);
  ASSERT_TRUE(w.listed(2)) << cli_testing::slurp(w.err);
  ::kill(server_, SIGKILL);
  ::waitpid(server_, nullptr, 0);
  server_ = -1;
  const auto listings = count(cli_testing::slurp(w.out), "--- ");
  EXPECT_EQ(w.wait_exit(std::chrono::seconds(10)), 3) << cli_testing::slurp(w.err);
  const auto out = cli_testing::slurp(w.out), err = cli_testing::slurp(w.err);
  EXPECT_LE(count(out, "--- "), listings + 1) << out;  // one may have been under way
  EXPECT_EQ(count(out, "--- "), count(out, "\nID ")) << "each listing whole\n" << out;
  EXPECT_EQ(count(err, "\n"), 1u) << err;
  EXPECT_EQ(err.rfind("allot: ls --watch stopped (the last listing is from ", 0), 0u) << err;
  EXPECT_NE(err.find("cannot reach the server"), std::string::npos) << err;
}

}  // namespace
