// The real `allot` CLI against a real `allot server` process: every client command, its output
// and its exit code (0 done, 1 refused, 2 bad usage, 3 unreachable, 4 not authorised, 5 not
// found), and that errors say what to fix. A node agent is played over HTTP for `allot logs`.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli_server.h"

namespace {

using cli_testing::Cli;
using cli_testing::first_line;
using cli_testing::Out;
using cli_testing::slurp;
using json = nlohmann::json;
using namespace std::chrono_literals;

TEST_F(Cli, SubmitWithFlagsAndYamlThenListShowWhyCancel) {
  ASSERT_EQ(allot({"budget", "create", "/lab/cli", "--share", "2", "--members", "ann,bob"}).code,
            0);
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
  auto bad_state = allot({"ls", "--state", "sleeping"});
  EXPECT_EQ(bad_state.code, 2);
  EXPECT_NE(bad_state.err.find("'sleeping' is not one of pending, starting, running"),
            std::string::npos)
      << bad_state.err;
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
  ASSERT_EQ(allot({"budget", "create", "/org/x", "--share", "3", "--owners", "olga"}).code, 0);
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
  EXPECT_EQ(d.out.rfind("node sim-02: draining\n", 0), 0u) << d.out;
  EXPECT_EQ(allot({"undrain", "sim-02"}).out, "node sim-02: healthy\n");
  EXPECT_EQ(allot({"cordon", "sim-02"}).out, "node sim-02: healthy, cordoned\n");
  EXPECT_EQ(allot({"uncordon", "sim-02"}).out, "node sim-02: healthy\n");
  EXPECT_EQ(allot({"drain", "nosuch"}).code, 5);

  // Tokens: create one for ann, use it, revoke it.
  ASSERT_EQ(allot({"budget", "create", "/lab/tok", "--members", "ann"}).code, 0);
  auto c = allot({"token", "create", "ann-cli", "--role", "user", "--subject", "ann"});
  ASSERT_EQ(c.code, 0) << c.err;
  const auto ann = c.out.substr(0, c.out.find('\n'));
  EXPECT_EQ(ann.rfind("allot_", 0), 0u);
  EXPECT_NE(c.err.find("shown once"), std::string::npos);
  // --json: the server's answer (the secret with the token's id, role, subject and scope).
  auto cj = allot({"token", "create", "node-x", "--role", "agent", "--scope", "node-x", "--json"});
  ASSERT_EQ(cj.code, 0) << cj.err;
  const auto made = json::parse(cj.out, nullptr, false);
  ASSERT_TRUE(made.is_object()) << cj.out;
  EXPECT_EQ(made.value("token", "").rfind("allot_", 0), 0u) << cj.out;
  EXPECT_EQ(made.value("role", ""), "agent") << cj.out;
  EXPECT_EQ(made.value("scope", ""), "node-x") << cj.out;
  auto mine = allot({"submit", "--budget", "/lab/tok", "--gpus", "1"}, ann);
  EXPECT_EQ(mine.code, 0) << mine.err;
  EXPECT_EQ(allot({"submit", "--budget", "/org/y", "--gpus", "1"}, ann).code, 1);  // no budget
  // Everyone reads their own standing: usage and the report of the budgets they belong to.
  ASSERT_EQ(allot({"budget", "create", "/lab/own", "--members", "una"}).code, 0);
  auto uc = allot({"token", "create", "una-cli", "--role", "user", "--subject", "una"});
  ASSERT_EQ(uc.code, 0) << uc.err;
  const auto una = uc.out.substr(0, uc.out.find('\n'));
  auto own = allot({"budget", "usage", "--since", "1d", "--json"}, una);
  ASSERT_EQ(own.code, 0) << own.err;
  EXPECT_EQ(json::parse(own.out)["scope"], "/lab/own");
  auto own_report = allot({"report", "--since", "1h"}, una);
  ASSERT_EQ(own_report.code, 0) << own_report.err;
  EXPECT_EQ(own_report.out.rfind("/lab/own: ", 0), 0u) << own_report.out;
  EXPECT_EQ(allot({"report", "--budget", "/lab/cli"}, una).code, 4);  // not hers
  EXPECT_EQ(allot({"report", "--budget", "/"}, una).code, 4);
  EXPECT_EQ(allot({"budget", "usage", "--budget", "/lab"}, una).code, 4);
  // A manager's plain report is of the subtree it manages, not "/" (a 403 before).
  ASSERT_EQ(allot({"budget", "create", "/org/m/team", "--share", "1"}).code, 0);
  auto mc = allot(
      {"token", "create", "mgr-cli", "--role", "manager", "--scope", "/org/m", "--subject", "mia"});
  ASSERT_EQ(mc.code, 0) << mc.err;
  const auto mgr = mc.out.substr(0, mc.out.find('\n'));
  auto mr = allot({"report", "--since", "1h", "--format", "json"}, mgr);
  ASSERT_EQ(mr.code, 0) << mr.err;
  EXPECT_EQ(json::parse(mr.out)["scope"], "/org/m");
  auto own_ls = allot({"token", "ls", "--json"}, ann);  // her own service tokens: none
  ASSERT_EQ(own_ls.code, 0) << own_ls.err;
  EXPECT_TRUE(json::parse(own_ls.out)["tokens"].empty()) << own_ls.out;
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

TEST_F(Cli, MeShowsStandingAndWhatANewJobWouldGet) {
  ASSERT_EQ(allot({"budget", "create", "/me/x", "--share", "1", "--members", "mia"}).code, 0);
  auto t = allot({"token", "create", "mia-t", "--role", "user", "--subject", "mia"});
  ASSERT_EQ(t.code, 0) << t.err;
  const std::string mia = t.out.substr(0, t.out.find('\n'));
  auto sub = allot({"submit", "--budget", "/me/x", "--gpus", "1", "--min-runtime", "1h", "--json",
                    "--", "sleep", "1000"},
                   mia);
  ASSERT_EQ(sub.code, 0) << sub.err;
  ASSERT_TRUE(wait_state(id_of(sub), "running"));
  // Standings are recomputed with the explanations, once a second.
  std::this_thread::sleep_for(1100ms);
  auto me = allot({"me", "--gpus", "2", "--min-runtime", "30m"}, mia);
  ASSERT_EQ(me.code, 0) << me.err;
  for (const char* k : {"mia: standing at", "/me/x", "STANDING", "RANK",
                        "A new 2-GPU job with --min-runtime 30m now:", "/me/x: "}) {
    EXPECT_NE(me.out.find(k), std::string::npos) << k << "\n" << me.out;
  }
  auto js = allot({"me", "--json"}, mia);
  ASSERT_EQ(js.code, 0) << js.err;
  auto j = json::parse(js.out);
  ASSERT_EQ(j["budgets"].size(), 1u) << js.out;
  EXPECT_EQ(j["budgets"][0]["budget"], "/me/x");
  EXPECT_EQ(j["budgets"][0]["clusters"][0]["running_allocated"], 1) << js.out;
  EXPECT_TRUE(j["budgets"][0]["clusters"][0]["new_job"].contains("allocated"));
  // Misspelt flags and budgets the caller may not see are refused.
  auto typo = allot({"me", "--gpu", "2"}, mia);
  EXPECT_EQ(typo.code, 2);
  EXPECT_NE(typo.err.find("--gpus"), std::string::npos) << typo.err;
  EXPECT_EQ(allot({"me", "--budget", "/"}, mia).code, 4);
  EXPECT_EQ(allot({"cancel", id_of(sub)}).code, 0);
}

TEST_F(Cli, ErrorsAreJsonUnderJson) {
  auto missing = allot({"show", "987654", "--json"});
  EXPECT_EQ(missing.code, 5);
  EXPECT_TRUE(missing.out.empty()) << missing.out;
  auto e = json::parse(missing.err, nullptr, false);
  ASSERT_TRUE(e.is_object()) << missing.err;
  EXPECT_EQ(e["error"]["exit_code"], 5);
  EXPECT_EQ(e["error"]["status"], 404);
  auto bad = allot({"submit", "--budget", "/nope/x", "--json", "--", "true"});
  EXPECT_EQ(bad.code, 1);
  e = json::parse(bad.err, nullptr, false);
  ASSERT_TRUE(e.is_object()) << bad.err;
  EXPECT_EQ(e["error"]["field"], "budget") << bad.err;
  // Bad usage too: the flag parser's errors.
  auto typo = allot({"ls", "--stat", "running", "--json"});
  EXPECT_EQ(typo.code, 2);
  e = json::parse(typo.err, nullptr, false);
  ASSERT_TRUE(e.is_object()) << typo.err;
  EXPECT_EQ(e["error"]["exit_code"], 2);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("--state"), std::string::npos);
  // Without --json, a line of text.
  EXPECT_EQ(allot({"show", "987654"}).err.rfind("allot: ", 0), 0u);
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
  ASSERT_EQ(allot({"budget", "create", "/lab/logs", "--share", "1"}).code, 0);
  // Where processes really run, a job without a command is refused at submission.
  auto empty = allot({"submit", "--budget", "/lab/logs", "--cluster", "real"});
  EXPECT_EQ(empty.code, 1);
  EXPECT_NE(empty.err.find("command: is empty"), std::string::npos) << empty.err;
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
// Every misspelling a Slurm or kubectl habit produces fails with exit 2 and names the flag meant;
// nothing is submitted or listed on a guess.
TEST_F(Cli, MistypedFlagsAreRefusedWithASuggestion) {
  ASSERT_EQ(allot({"budget", "create", "/lab/typo", "--share", "1"}).code, 0);
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"submit", "--budget", "/lab/typo", "--min-runtim", "2h"}, "did you mean --min-runtime?"},
      {{"submit", "--budget", "/lab/typo", "--gpu", "1"}, "did you mean --gpus?"},
      {{"submit", "--budget", "/lab/typo", "--resumeable", "--name", "x"},
       "did you mean --resumable?"},
      {{"ls", "--stat", "running"}, "did you mean --state?"},
      {{"ls", "--state", "bogus"}, "is not one of pending, starting, running"},
      {{"submit", "--budget", "/lab/typo", "--min-runtime"}, "--min-runtime needs a value"},
      {{"submit", "--budget", "/lab/typo", "--min-runtime", "--gpus", "1"},
       "--min-runtime needs a value"},
      {{"ls", "running"}, "takes no arguments"},
      {{"budget", "sett", "/lab/typo"}, "did you mean 'set'?"},
      {{"report", "--format", "xml"}, "is not one of text, csv, json"},
      {{"token", "create", "x", "--role", "boss"}, "is not one of admin, manager, user, agent"},
  };
  for (const auto& c : cases) {
    auto r = allot(c.args);
    EXPECT_EQ(r.code, 2) << c.args[0] << " " << c.args[1] << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("bad file"), std::string::npos) << r.err;
  }
  // Nothing was submitted on any of them.
  EXPECT_EQ(json::parse(allot({"ls", "--budget", "/lab/typo", "--all", "--json"}).out).size(), 0u);

  // Each command's --help is its own: usage line, its flags, an example; exit 0, no server needed.
  auto submit_help = allot({"submit", "--help"}, "");
  auto ls_help = allot({"ls", "--help"}, "");
  auto set_help = allot({"budget", "set", "-h"}, "");
  ASSERT_EQ(submit_help.code, 0);
  ASSERT_EQ(ls_help.code, 0);
  ASSERT_EQ(set_help.code, 0);
  EXPECT_EQ(submit_help.out.rfind("usage: allot submit", 0), 0u) << submit_help.out;
  EXPECT_NE(submit_help.out.find("--min-runtime DURATION"), std::string::npos);
  EXPECT_EQ(ls_help.out.rfind("usage: allot ls", 0), 0u) << ls_help.out;
  EXPECT_EQ(ls_help.out.find("--min-runtime"), std::string::npos);
  EXPECT_EQ(set_help.out.rfind("usage: allot budget set PATH", 0), 0u) << set_help.out;
  auto top = allot({"--help"}, "");
  EXPECT_NE(top.out.find("exit codes:"), std::string::npos) << top.out;
}

// Requests no node of the cluster could hold are refused at submission, with what to ask.
TEST_F(Cli, ImpossibleRequestsAreRefusedAtSubmit) {
  ASSERT_EQ(allot({"budget", "create", "/lab/big", "--share", "1"}).code, 0);
  // --gpus-per-node is an explicit shape: larger than any node, refused with the way to ask.
  auto r = allot({"submit", "--budget", "/lab/big", "--gpus-per-node", "16"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--gpus 16 (shaped for you) or --nodes 2 --gpus-per-node 8"),
            std::string::npos)
      << r.err;
  r = allot({"submit", "--budget", "/lab/big", "--nodes", "3", "--gpus-per-node", "8", "--cluster",
             "sim"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("has only 2"), std::string::npos) << r.err;
  // --gpus is the total, shaped by the scheduler's rule; 24 on two 8-GPU nodes can never run.
  r = allot({"submit", "--budget", "/lab/big", "--gpus", "24", "--cluster", "sim"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("needs 3 nodes with 8 GPUs each, but cluster sim has only 2"),
            std::string::npos)
      << r.err;
  // Mixed or uneven requests are usage errors, before any request.
  r = allot({"submit", "--budget", "/lab/big", "--gpus", "16", "--gpus-per-node", "8"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("not both"), std::string::npos) << r.err;
  r = allot({"submit", "--budget", "/lab/big", "--gpus", "16", "--nodes", "3"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("does not split evenly over --nodes 3"), std::string::npos) << r.err;
  r = allot({"submit", "--budget", "/lab/big", "--model", "B200"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no node has a GPU model B200"), std::string::npos) << r.err;
  EXPECT_EQ(json::parse(allot({"ls", "--budget", "/lab/big", "--all", "--json"}).out).size(), 0u);
}

// --gpus N is the total: 16 on 8-GPU nodes is a gang of 2 x 8, 12 is 2 x 6, 4 stays on one node;
// --nodes with --gpus splits it evenly. Held, so that they take no GPUs from the other tests.
TEST_F(Cli, GpusIsTheTotalShapedIntoAGang) {
  ASSERT_EQ(allot({"budget", "create", "/lab/shape", "--share", "1"}).code, 0);
  auto shape_of = [](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"submit", "--budget", "/lab/shape", "--cluster",
                                     "sim",    "--hold",   "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = allot(args);
    EXPECT_EQ(r.code, 0) << r.err;
    auto j = json::parse(r.out, nullptr, false);
    if (!j.is_object()) return std::string("?");
    allot({"cancel", std::to_string(j["id"].get<unsigned long long>())});
    return std::to_string(j["spec"].value("nodes", 0)) + "x" +
           std::to_string(j["spec"].value("gpus_per_node", 0));
  };
  EXPECT_EQ(shape_of({"--gpus", "16"}), "2x8");
  EXPECT_EQ(shape_of({"--gpus", "12"}), "2x6");
  EXPECT_EQ(shape_of({"--gpus", "4"}), "1x4");
  EXPECT_EQ(shape_of({"--gpus", "8", "--nodes", "2"}), "2x4");
  EXPECT_EQ(shape_of({"--nodes", "2", "--gpus-per-node", "3"}), "2x3");
  // The human output names the gang.
  auto r =
      allot({"submit", "--budget", "/lab/shape", "--cluster", "sim", "--hold", "--gpus", "16"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("a gang of 2x8 GPUs"), std::string::npos) << r.out;
  // A YAML spec's gpus is the total too.
  const auto spec = file("gang.yaml", "budget: /lab/shape\ngpus: 16\ncluster: sim\n");
  r = allot({"submit", spec, "--hold", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["spec"].value("nodes", 0), 2) << r.out;
  // And the API still takes an explicit shape, but not both.
  httplib::Client http("127.0.0.1", port());
  json both = {{"budget", "/lab/shape"}, {"gpus", 4}, {"nodes", 1}, {"idempotency_key", "both"}};
  auto res = http.Post("/api/v1/jobs", bearer(admin_), both.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("not both"), std::string::npos) << res->body;
}

// `allot nodes` like sinfo: GPUs free/allocated/unallocated/down per node, the jobs on it, in
// natural name order (n2 before n10), and the same under --json.
TEST_F(Cli, NodesListsGpusAndJobsInNaturalOrder) {
  httplib::Client http("127.0.0.1", port());
  for (const char* node : {"n10", "n2"}) {
    auto tok = allot(
        {"token", "create", std::string("agent-") + node, "--role", "agent", "--scope", node});
    ASSERT_EQ(tok.code, 0) << tok.err;
    const auto agent = tok.out.substr(0, tok.out.find('\n'));
    auto reg =
        http.Post("/api/v1/nodes", bearer(agent),
                  json{{"name", node}, {"cluster", "order"}, {"model", "H100"}, {"gpus", 4}}.dump(),
                  "application/json");
    ASSERT_TRUE(reg);
    ASSERT_EQ(reg->status, 201) << reg->body;
  }
  ASSERT_EQ(allot({"budget", "create", "/lab/sinfo", "--share", "1"}).code, 0);
  auto s = allot({"submit", "--budget", "/lab/sinfo", "--cluster", "sim", "--gpus", "3",
                  "--min-runtime", "1h", "--json"});
  ASSERT_EQ(s.code, 0) << s.err;
  const auto id = json::parse(s.out)["id"].get<unsigned long long>();
  ASSERT_TRUE(wait_state(std::to_string(id), "running"));
  auto js = allot({"nodes", "--json"});
  ASSERT_EQ(js.code, 0) << js.err;
  const auto nodes = json::parse(js.out);
  std::vector<std::string> names;
  json on;
  for (const auto& n : nodes) {
    names.push_back(n["name"]);
    for (const auto& j : n["jobs"]) {
      if (j.get<unsigned long long>() == id) on = n;
    }
  }
  const auto at = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) - names.begin();
  };
  EXPECT_LT(at("n2"), at("n10"));
  EXPECT_LT(at("sim-01"), at("sim-02"));
  ASSERT_TRUE(on.is_object()) << nodes.dump();
  EXPECT_GE(on["allocated_gpus"].get<int>(), 3) << on.dump();
  EXPECT_EQ(on["free_gpus"].get<int>() + on["allocated_gpus"].get<int>() +
                on["unallocated_gpus"].get<int>() + on["down_gpus"].get<int>() +
                on["draining_idle_gpus"].get<int>(),
            8)
      << on.dump();
  // The table: the new columns, and the job on its node's row.
  auto t = allot({"nodes"});
  ASSERT_EQ(t.code, 0) << t.err;
  for (const char* col : {"FREE", "ALLOC", "UNALLOC", "DOWN", "JOBS", "EMPTY-AT", "UTIL"}) {
    EXPECT_NE(t.out.find(col), std::string::npos) << col << "\n" << t.out;
  }
  const auto row_at = t.out.find("\n" + on["name"].get<std::string>() + " ");
  ASSERT_NE(row_at, std::string::npos) << t.out;
  const auto row = t.out.substr(row_at + 1, t.out.find('\n', row_at + 1) - row_at - 1);
  bool listed = false;  // in the JOBS column: "1,3,14"
  for (const char* before : {" ", ","}) {
    for (const char* after : {" ", ","}) {
      listed = listed || row.find(before + std::to_string(id) + after) != std::string::npos;
    }
  }
  EXPECT_TRUE(listed) << row;
  EXPECT_LT(t.out.find("\nn2 "), t.out.find("\nn10 ")) << t.out;
  allot({"cancel", std::to_string(id)});
}

// `allot budget log` shows the audit: who created or changed what, newest first, under PATH.
TEST_F(Cli, BudgetLogShowsTheAudit) {
  ASSERT_EQ(allot({"budget", "create", "/lab/audited", "--share", "2"}).code, 0);
  ASSERT_EQ(allot({"budget", "set", "/lab/audited", "--share", "3"}).code, 0);
  auto l = allot({"budget", "log", "/lab/audited"});
  ASSERT_EQ(l.code, 0) << l.err;
  EXPECT_NE(l.out.find("FIELD"), std::string::npos) << l.out;
  EXPECT_NE(l.out.find("created"), std::string::npos) << l.out;
  const auto share = l.out.find(" share ");
  ASSERT_NE(share, std::string::npos) << l.out;
  EXPECT_LT(share, l.out.find("created")) << "newest first\n" << l.out;
  EXPECT_EQ(l.out.find("/lab/tok"), std::string::npos) << "only under the path\n" << l.out;
  auto js = allot({"budget", "log", "/lab/audited", "--json", "--limit", "1"});
  ASSERT_EQ(js.code, 0) << js.err;
  const auto entries = json::parse(js.out);
  ASSERT_EQ(entries.size(), 1u) << js.out;
  EXPECT_EQ(entries[0]["field"], "share");
  EXPECT_EQ(entries[0]["actor"], "admin");
  // A user who is no member of it may not read it.
  auto tok = allot({"token", "create", "nobody", "--role", "user", "--subject", "nobody"});
  ASSERT_EQ(tok.code, 0) << tok.err;
  EXPECT_EQ(allot({"budget", "log", "/lab/audited"}, tok.out.substr(0, tok.out.find('\n'))).code,
            4);  // not authorised
}

// Budgets are made only by `budget create`; `set` on a mistyped path is refused, not made; a
// leaf with live jobs gets no sub-budgets (its jobs would lose their funding).
TEST_F(Cli, BudgetCreateSetAndNoChildUnderALeafWithJobs) {
  auto set = allot({"budget", "set", "/lab/mistyped", "--share", "2"});
  EXPECT_EQ(set.code, 5) << set.err;  // not found
  EXPECT_NE(set.err.find("create it with 'allot budget create /lab/mistyped"), std::string::npos)
      << set.err;
  EXPECT_EQ(json::parse(allot({"budget", "tree", "--json"}).out).dump().find("/lab/mistyped"),
            std::string::npos);
  ASSERT_EQ(allot({"budget", "create", "/lab/leaf", "--share", "2"}).code, 0);
  auto again = allot({"budget", "create", "/lab/leaf"});
  EXPECT_EQ(again.code, 1) << again.err;
  EXPECT_NE(again.err.find("exists: change it with 'allot budget set /lab/leaf'"),
            std::string::npos)
      << again.err;
  EXPECT_EQ(allot({"budget", "set", "/lab/leaf", "--share", "3"}).code, 0);
  auto s = allot({"submit", "--budget", "/lab/leaf", "--cluster", "sim", "--hold", "--json"});
  ASSERT_EQ(s.code, 0) << s.err;
  auto child = allot({"budget", "create", "/lab/leaf/sub"});
  EXPECT_EQ(child.code, 1) << child.err;
  EXPECT_NE(child.err.find("/lab/leaf has 1 job queued or running"), std::string::npos)
      << child.err;
  ASSERT_EQ(
      allot({"cancel", std::to_string(json::parse(s.out)["id"].get<unsigned long long>())}).code,
      0);
  auto later = allot({"budget", "create", "/lab/leaf/sub"});
  EXPECT_EQ(later.code, 0) << later.err;
}

// A fresh server (2 simulated nodes of 8 GPUs) for the story of contracts: a free job, a
// protected one, one that loses its contract to the burst limit and is preempted, and a drain.
class CliContract : public Cli {};

TEST_F(CliContract, ProtectedFreeAndPreemptedJobsAreToldApart) {
  for (const char* b : {"/lab/p", "/lab/q"}) {
    ASSERT_EQ(allot({"budget", "create", b, "--share", "1"}).code, 0);
  }
  // A: no --min-runtime: free, preemptible work, and submit says so.
  auto a = allot({"submit", "--budget", "/lab/q", "--gpus", "8", "--name", "free"});
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_NE(a.out.find("UNALLOCATED: no --min-runtime"), std::string::npos) << a.out;
  EXPECT_NE(a.out.find("started UNALLOCATED (no minimum runtime asked"), std::string::npos)
      << a.out;
  const auto ida = a.out.substr(14, a.out.find(' ', 14) - 14);
  // B: a contract, and the budget can fund it.
  auto b = allot({"submit", "--budget", "/lab/p", "--gpus", "8", "--min-runtime", "30m", "--name",
                  "protected"});
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_NE(b.out.find("protected for 30m once started"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("started allocated: protected until"), std::string::npos) << b.out;
  const auto idb = b.out.substr(14, b.out.find(' ', 14) - 14);
  // C: asks for a contract, but /lab/p would hold all 16 GPUs, past its burst limit.
  auto c = allot(
      {"submit", "--budget", "/lab/p", "--gpus", "8", "--min-runtime", "30m", "--name", "burst"});
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("may start unallocated: /lab/p would exceed its burst limit"),
            std::string::npos)
      << c.out;
  const auto idc = c.out.substr(14, c.out.find(' ', 14) - 14);
  ASSERT_EQ(allot({"cancel", ida}).code, 0);
  ASSERT_TRUE(wait_state(idc, "running"));
  auto wc = allot({"why", idc});
  ASSERT_EQ(wc.code, 0) << wc.err;
  EXPECT_NE(wc.out.find("UNALLOCATED (/lab/p is over its burst limit)"), std::string::npos)
      << wc.out;
  auto wb = allot({"why", idb});
  EXPECT_NE(wb.out.find("allocated: protected until"), std::string::npos) << wb.out;
  auto sb = allot({"show", idb});
  EXPECT_NE(sb.out.find("  class      allocated, protected until "), std::string::npos) << sb.out;
  EXPECT_NE(sb.out.find(" left)"), std::string::npos) << sb.out;

  // D: /lab/q funds a contract and takes C's GPUs; C's stop reason names D.
  auto d = allot({"submit", "--budget", "/lab/q", "--gpus", "8", "--min-runtime", "10m"});
  ASSERT_EQ(d.code, 0) << d.err;
  const auto idd = d.out.substr(14, d.out.find(' ', 14) - 14);
  ASSERT_TRUE(wait_state(idc, "preempted"));
  wc = allot({"why", idc});
  EXPECT_NE(wc.out.find("is preempted: preempted for job " + idd + " after running"),
            std::string::npos)
      << wc.out;
  EXPECT_NE(wc.out.find("it ran unallocated"), std::string::npos) << wc.out;

  // ls: CLASS and PROTECTED tell the three apart; REASON shows the preemption.
  auto l = allot({"ls", "--all", "--budget", "/lab"});
  ASSERT_EQ(l.code, 0) << l.err;
  EXPECT_NE(l.out.find("CLASS"), std::string::npos) << l.out;
  EXPECT_NE(l.out.find("PROTECTED"), std::string::npos) << l.out;
  auto row = [&](const std::string& id) {
    auto at = l.out.find("\n" + id + " ");
    return at == std::string::npos ? std::string()
                                   : l.out.substr(at + 1, l.out.find('\n', at + 1) - at - 1);
  };
  EXPECT_NE(row(idb).find("allocated"), std::string::npos) << l.out;
  EXPECT_NE(row(idb).find("29m"), std::string::npos) << row(idb);
  EXPECT_NE(row(idc).find("preempted for job " + idd), std::string::npos) << row(idc);
  EXPECT_NE(row(ida).find("cancelled"), std::string::npos) << row(ida);

  // Drain B's node: the jobs still there and when the node will be empty (B's protection end).
  const auto placed = json::parse(allot({"show", idb, "--json"}).out);
  const auto node = placed["placement"][0]["node"].get<std::string>();
  auto dr = allot({"drain", node, "--reason", "fan"});
  ASSERT_EQ(dr.code, 0) << dr.err;
  EXPECT_NE(dr.out.find(idb), std::string::npos) << dr.out;
  EXPECT_NE(dr.out.find("will be empty by"), std::string::npos) << dr.out;
  wb = allot({"why", idb});
  EXPECT_NE(wb.out.find("node " + node + " is draining (fan): this job will be stopped at "),
            std::string::npos)
      << wb.out;
  EXPECT_NE(wb.out.find("its protection ends then)"), std::string::npos) << wb.out;
  // B's owner is told in B's events: the drain, and when B will be stopped (its protection end).
  auto drained_event = [&](const std::string& text) {
    auto r =
        httplib::Client("127.0.0.1", port()).Get("/api/v1/jobs/" + idb + "/events", bearer(admin_));
    if (!r || r->status != 200) return std::string("no events");
    const auto events = json::parse(r->body);
    for (const auto& e : events["events"]) {
      const auto reason = e["reason"].get<std::string>();
      if (reason.find(text) != std::string::npos) return reason;
    }
    return "no event with '" + text + "' in " + r->body;
  };
  {
    const std::time_t until = placed["protected_until"].get<std::time_t>();
    std::tm tm{};
    gmtime_r(&until, &tm);
    char at[32];
    std::strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%SZ", &tm);
    EXPECT_EQ(drained_event("is draining"), "node " + node +
                                                " is draining (fan): this job will be stopped "
                                                "at " +
                                                at + " (its protection ends then)");
  }
  // ls and show tell B's owner too.
  auto ld = allot({"ls", "--budget", "/lab/p"});
  const auto brow = ld.out.find("\n" + idb + " ");
  ASSERT_NE(brow, std::string::npos) << ld.out;
  EXPECT_NE(
      ld.out.substr(brow, ld.out.find('\n', brow + 1) - brow).find(node + " draining: stops at "),
      std::string::npos)
      << ld.out;
  const auto shown = allot({"show", idb}).out;
  EXPECT_NE(shown.find("  drain      node " + node +
                       " is draining (fan): this job will be "
                       "stopped at "),
            std::string::npos)
      << shown;
  EXPECT_NE(shown.find("this job will be stopped at "), shown.rfind("this job will be stopped at "))
      << "the events list the drain too\n"
      << shown;
  // nodes: the draining node, B on it, and when it will be empty.
  for (const auto& n : json::parse(allot({"nodes", "--json"}).out)) {
    if (n["name"] != node) continue;
    EXPECT_TRUE(n["draining"].get<bool>()) << n.dump();
    EXPECT_TRUE(n["drain_eta"].is_number()) << n.dump();
    EXPECT_EQ(n["allocated_gpus"].get<int>(), 8) << n.dump();
    EXPECT_NE(std::find(n["jobs"].begin(), n["jobs"].end(), json(std::stoull(idb))),
              n["jobs"].end())
        << n.dump();
  }
  ASSERT_EQ(allot({"undrain", node}).code, 0);
  EXPECT_EQ(drained_event("again").rfind(
                "node " + node + " is healthy again: the drain is over (by admin", 0),
            0u)
      << drained_event("again");

  // Fractions of a GPU print as fractions (250 milli-GPUs were "0.2", 50 were "0.0").
  for (const char* milli : {"250", "50"}) {
    ASSERT_EQ(allot({"submit", "--budget", "/lab/q", "--gpu-milli", milli, "--json"}).code, 0);
  }
  l = allot({"ls", "--budget", "/lab/q", "--state", "pending,running"});
  EXPECT_NE(l.out.find(" 0.25 "), std::string::npos) << l.out;
  EXPECT_NE(l.out.find(" 0.05 "), std::string::npos) << l.out;
  // A MIG profile prints as its name; the server sets its fraction and models.
  auto m = allot({"submit", "--budget", "/lab/q", "--mig", "1g.10gb", "--json"});
  ASSERT_EQ(m.code, 0) << m.err;
  const auto mj = json::parse(m.out);
  EXPECT_EQ(mj["spec"]["gpu_milli"], 142) << m.out;
  EXPECT_EQ(mj["spec"]["mig"], "1g.10gb") << m.out;
  l = allot({"ls", "--budget", "/lab/q", "--state", "pending,running"});
  EXPECT_NE(l.out.find(" 1g.10gb "), std::string::npos) << l.out;
  auto bad = allot({"submit", "--budget", "/lab/q", "--mig", "1g.16gb"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("mig"), std::string::npos) << bad.err;
}

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
  // The hint runs as printed: the build's binary is not on $PATH, so its path is shown, and its
  // first job holds a contract.
  EXPECT_NE(first.find(std::string("  ") + ALLOT_BIN +
                       " submit --budget /lab/default --gpus 8 "
                       "--min-runtime 10m"),
            std::string::npos)
      << first;
  EXPECT_EQ(std::filesystem::status(dir + "/a.db.admin-token").permissions() &
                std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const auto second = once();
  EXPECT_NE(second.find(kept), std::string::npos) << second;
  EXPECT_NE(second.find("the same as before"), std::string::npos) << second;
  std::filesystem::remove_all(dir);
}

// The server binary's metrics and event log: a metrics token on the API port, the tokenless
// listener, promtool on the live text, and the event log's lines for a submitted job.
TEST_F(Cli, MetricsAndEventLogOfTheServerBinary) {
  auto t = allot({"token", "create", "prom", "--role", "metrics"});
  ASSERT_EQ(t.code, 0) << t.err;
  std::string secret;
  for (std::size_t at = t.out.find("allot_"); at != std::string::npos && secret.empty();
       at = t.out.find("allot_", at + 1)) {
    secret = t.out.substr(at, t.out.find_first_of(" \n", at) - at);
  }
  ASSERT_EQ(secret.size(), 46u) << t.out;
  ASSERT_EQ(allot({"budget", "create", "/lab/metrics", "--share", "1"}).code, 0);
  auto s = allot({"submit", "--budget", "/lab/metrics", "--gpus", "1", "--", "sleep", "1"});
  ASSERT_EQ(s.code, 0) << s.err;
  std::this_thread::sleep_for(300ms);  // a few cycles of 50 ms

  httplib::Client api(addr_);
  auto m = api.Get("/metrics", bearer(secret));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("allot_submissions_total{budget=\"/lab/metrics\",kind=\"batch\"}"),
            std::string::npos);
  EXPECT_EQ(api.Get("/api/v1/jobs", bearer(secret))->status, 403);

  const auto log = slurp(dir_ + "/server.log");
  const std::string said = "metrics (no token) on ";
  auto at = log.find(said);
  ASSERT_NE(at, std::string::npos) << log;
  const auto url = log.substr(at + said.size(), log.find('\n', at) - at - said.size());
  const auto host = url.substr(0, url.rfind("/metrics"));
  httplib::Client open(host);
  auto o = open.Get("/metrics");
  ASSERT_TRUE(o) << host;
  EXPECT_EQ(o->status, 200);
  if (std::system("command -v promtool >/dev/null 2>&1") == 0) {
    const auto text = file("metrics.txt", o->body);
    const int rc = std::system(
        ("promtool check metrics < " + text + " > " + dir_ + "/promtool.out 2>&1").c_str());
    EXPECT_EQ(rc, 0) << slurp(dir_ + "/promtool.out");
  }

  bool submitted = false;
  std::ifstream events(dir_ + "/events.jsonl");
  std::string line;
  while (std::getline(events, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    if (j["event"] == "job" && j["to"] == "pending" && j["budget"] == "/lab/metrics") {
      submitted = true;
    }
  }
  EXPECT_TRUE(submitted) << slurp(dir_ + "/events.jsonl");
}

TEST(CliServer, RefusesBadMetricsAndEventLogFlags) {
  auto run = [](const std::vector<std::string>& args) {
    const std::string err = std::filesystem::temp_directory_path() / "allot-cli-server-err";
    pid_t pid = fork();
    if (pid == 0) {
      int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(e, 2);
      std::vector<char*> argv{const_cast<char*>(ALLOT_BIN), const_cast<char*>("server")};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(ALLOT_BIN, argv.data());
      _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    Out o{WIFEXITED(st) ? WEXITSTATUS(st) : -1, "", slurp(err)};
    std::filesystem::remove(err);
    return o;
  };
  auto r = run({"--metrics-listen", "9464"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--metrics-listen: '9464' is not HOST:PORT"), std::string::npos) << r.err;
  r = run({"--metrics-listen", "127.0.0.1:70000"});
  EXPECT_EQ(r.code, 2);
  r = run({"--event-log", "/nonexistent-dir/events.jsonl"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--event-log: cannot open /nonexistent-dir/events.jsonl"), std::string::npos)
      << r.err;
  r = run({"--event-logs", "x"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown option '--event-logs'"), std::string::npos) << r.err;
}

}  // namespace

// Tokens off the command line (issue 12): a token file must be private to its owner, for the
// client commands and the agent alike; the agent removes $ALLOT_TOKEN from its environment and
// blanks a --token argument, so neither /proc/PID/environ nor ps shows them once it runs.
TEST_F(Cli, TokenFilesMustBePrivate) {
  const auto path = file("tok", admin_ + "\n");
  ::chmod(path.c_str(), 0644);
  auto open = allot({"ls", "--token-file", path}, "");
  EXPECT_EQ(open.code, 2) << open.err;
  EXPECT_NE(open.err.find("--token-file: " + path +
                          " may be read or written by its group or others (mode 0644)"),
            std::string::npos)
      << open.err;
  EXPECT_NE(open.err.find("chmod 600 " + path), std::string::npos) << open.err;
  ::chmod(path.c_str(), 0600);
  auto ok = allot({"ls", "--token-file", path}, "");
  EXPECT_EQ(ok.code, 0) << ok.err;
  auto missing = allot({"ls", "--token-file", dir_ + "/no-such-token"}, "");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("cannot read " + dir_ + "/no-such-token"), std::string::npos)
      << missing.err;

  ::chmod(path.c_str(), 0640);
  auto agent = allot({"agent", "--token-file", path, "--node", "t1"}, "");
  EXPECT_EQ(agent.code, 2);
  EXPECT_NE(agent.err.find("allot agent: --token-file: " + path +
                           " may be read or written by its group or others (mode 0640)"),
            std::string::npos)
      << agent.err;
}

// Starts `allot agent` (its node refused: the token is not an agent's) with `env_token` as
// $ALLOT_TOKEN and `args`, and returns what /proc shows of it while it runs.
struct Shown {
  std::string environ, cmdline, err;
  bool ran = false;
};
Shown shown_by_agent(const std::string& dir, const std::string& addr, const std::string& env_token,
                     const std::vector<std::string>& args) {
  std::ofstream(dir + "/t.yaml") << "model: H100\ngpus: 1\nmemory_mib: 81559\ncontrol_dir: " << dir
                                 << "/t-ctl\n";
  std::filesystem::create_directories(dir + "/t-ctl");
  const std::string err = dir + "/agent-secret.err";
  pid_t pid = fork();
  if (pid == 0) {
    int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(e, 1);
    dup2(e, 2);
    if (env_token.empty()) {
      unsetenv("ALLOT_TOKEN");
    } else {
      setenv("ALLOT_TOKEN", env_token.c_str(), 1);
    }
    std::vector<std::string> all = {ALLOT_BIN,     "agent",
                                    "--server",    addr,
                                    "--node",      "t1",
                                    "--backend",   "fake:" + dir + "/t.yaml",
                                    "--state-dir", dir + "/t-state"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(ALLOT_BIN, argv.data());
    _exit(127);
  }
  Shown s;
  // Long enough to be past its start (it keeps retrying a node it may not register).
  std::this_thread::sleep_for(500ms);
  int st = 0;
  s.ran = waitpid(pid, &st, WNOHANG) == 0;
  s.environ = slurp("/proc/" + std::to_string(pid) + "/environ");
  s.cmdline = slurp("/proc/" + std::to_string(pid) + "/cmdline");
  ::kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  s.err = slurp(err);
  return s;
}

TEST_F(Cli, TheAgentKeepsItsTokenOutOfProc) {
  const std::string secret = "allot_secretfromtheenvironment0000000000000000";
  auto env = shown_by_agent(dir_, addr_, secret, {});
  ASSERT_TRUE(env.ran) << env.err;
  EXPECT_NE(env.environ.find("HOME="), std::string::npos) << "the rest of it stays";
  EXPECT_EQ(env.environ.find(secret), std::string::npos);

  const std::string flag = "allot_secretonthecommandline00000000000000000";
  auto cmd = shown_by_agent(dir_, addr_, "", {"--token", flag});
  ASSERT_TRUE(cmd.ran) << cmd.err;
  EXPECT_NE(cmd.cmdline.find("--token"), std::string::npos) << cmd.cmdline;
  EXPECT_EQ(cmd.cmdline.find(flag), std::string::npos) << cmd.cmdline;
  EXPECT_NE(cmd.err.find("--token puts the token where other local users can read it"),
            std::string::npos)
      << cmd.err;
}
