// `allot ls` against a real server: -o wide's extra columns, -o json as --json, a refused -o
// value, and --watch listing again until stopped.
#include <gtest/gtest.h>

#include <algorithm>
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

}  // namespace
