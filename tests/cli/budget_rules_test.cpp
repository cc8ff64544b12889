// Budget rules against a real `allot server`: the budget-level default minimum runtime
// (docs/policy.md §2), POST /budgets with and without `expect` as raw API calls, and a user's own
// submission limits in place of the server's (`allot limits`).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_server.h"

namespace {

using cli_testing::Cli;
using json = nlohmann::json;

// The token printed by `allot token create` (its first line).
std::string token_of(const cli_testing::Out& created) {
  return created.out.substr(0, created.out.find('\n'));
}

long long min_runtime_of(const cli_testing::Out& submitted) {
  const auto j = json::parse(submitted.out, nullptr, false);
  return j.is_object() ? j["spec"].value("min_runtime", -1LL) : -2;
}

// Its own server: budgets made here are not seen by other suites.
class BudgetRules : public Cli {
 protected:
  // The budget at `path` in `allot budget tree --json`, null if there is none.
  static json budget_in_tree(const std::string& path) {
    auto t = json::parse(allot({"budget", "tree", "--json"}).out, nullptr, false);
    if (!t.is_object()) return json();
    for (const auto& b : t["budgets"]) {
      if (b["path"] == path) return b;
    }
    return json();
  }
};

TEST_F(BudgetRules, DefaultMinRuntimeAppliesToJobsThatAskNone) {
  auto made = allot({"budget", "create", "/dm", "--default-min-runtime", "1h"});
  ASSERT_EQ(made.code, 0) << made.err;
  EXPECT_NE(made.out.find("jobs without --min-runtime get 1h"), std::string::npos) << made.out;
  ASSERT_EQ(allot({"budget", "create", "/dm/team"}).code, 0);

  // The tree shows the budget's own default and the one its child inherits.
  const auto own = budget_in_tree("/dm"), child = budget_in_tree("/dm/team");
  EXPECT_EQ(own.value("default_min_runtime", -1), 3600) << own.dump();
  EXPECT_FALSE(child.contains("default_min_runtime")) << child.dump();
  EXPECT_EQ(child["min_runtime_default"], (json{{"seconds", 3600}, {"from", "/dm"}}));
  auto tree = allot({"budget", "tree"});
  EXPECT_NE(tree.out.find("MIN-RUNTIME"), std::string::npos) << tree.out;
  EXPECT_NE(tree.out.find("1h of /dm"), std::string::npos) << tree.out;

  // Without --min-runtime: the default, and submit says whose.
  auto s = allot({"submit", "--budget", "/dm/team", "--hold", "--name", "dflt"});
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("protected for 1h once started (the default of /dm)"), std::string::npos)
      << s.out;
  auto sj = allot({"submit", "--budget", "/dm/team", "--hold", "--json"});
  EXPECT_EQ(min_runtime_of(sj), 3600) << sj.out;
  EXPECT_EQ(json::parse(sj.out)["min_runtime_default"], (json{{"seconds", 3600}, {"from", "/dm"}}));
  // --min-runtime 0 is still unallocated by choice; a given one is kept.
  auto zero = allot({"submit", "--budget", "/dm/team", "--hold", "--min-runtime", "0", "--json"});
  EXPECT_EQ(min_runtime_of(zero), 0) << zero.out;
  EXPECT_FALSE(json::parse(zero.out).contains("min_runtime_default")) << zero.out;
  EXPECT_EQ(min_runtime_of(allot(
                {"submit", "--budget", "/dm/team", "--hold", "--min-runtime", "20m", "--json"})),
            1200);
  // A debug job gets at most the debug maximum (15 minutes) of a default.
  EXPECT_EQ(min_runtime_of(
                allot({"submit", "--budget", "/dm/team", "--hold", "--kind", "debug", "--json"})),
            900);

  // The nearest budget that sets one wins: the child says 0 (unallocated) for its jobs.
  auto set0 = allot({"budget", "set", "/dm/team", "--default-min-runtime", "0"});
  ASSERT_EQ(set0.code, 0) << set0.err;
  auto free = allot({"submit", "--budget", "/dm/team", "--hold"});
  EXPECT_NE(free.out.find("UNALLOCATED: no --min-runtime, and the default of /dm/team is 0"),
            std::string::npos)
      << free.out;
  // Dropped ("none"): the parent's applies again. A job already queued keeps what it got.
  ASSERT_EQ(allot({"budget", "set", "/dm/team", "--default-min-runtime", "none"}).code, 0);
  EXPECT_EQ(budget_in_tree("/dm/team")["min_runtime_default"]["from"], "/dm");
  ASSERT_EQ(allot({"budget", "set", "/dm", "--default-min-runtime", "none"}).code, 0);
  EXPECT_FALSE(budget_in_tree("/dm/team").contains("min_runtime_default"));
  EXPECT_EQ(min_runtime_of(
                allot({"show", std::to_string(json::parse(sj.out)["id"].get<int>()), "--json"})),
            3600);
  EXPECT_EQ(min_runtime_of(allot({"submit", "--budget", "/dm/team", "--hold", "--json"})), 0);

  // Audited, with old and new values.
  auto log = allot({"budget", "log", "/dm", "--json"});
  ASSERT_EQ(log.code, 0) << log.err;
  int changes = 0;
  for (const auto& e : json::parse(log.out)) changes += e["field"] == "default_min_runtime";
  EXPECT_EQ(changes, 4) << log.out;  // created with 1h; team 0; team none; /dm none
  // Bounded: at most the policy's 8 hours, named in the error.
  auto big = allot({"budget", "set", "/dm", "--default-min-runtime", "9h"});
  EXPECT_EQ(big.code, 1) << big.err;
  EXPECT_NE(big.err.find("default_min_runtime"), std::string::npos) << big.err;

  // A manager of /dm may set it below; a member may not.
  auto mgr = allot(
      {"token", "create", "dm-mgr", "--role", "manager", "--scope", "/dm", "--subject", "dmm"});
  ASSERT_EQ(mgr.code, 0) << mgr.err;
  EXPECT_EQ(allot({"budget", "set", "/dm/team", "--default-min-runtime", "2h"}, token_of(mgr)).code,
            0);
  EXPECT_EQ(budget_in_tree("/dm/team").value("default_min_runtime", -1), 7200);
  auto user = allot({"token", "create", "dm-user", "--role", "user", "--subject", "dmu"});
  ASSERT_EQ(user.code, 0) << user.err;
  EXPECT_EQ(
      allot({"budget", "set", "/dm/team", "--default-min-runtime", "1h"}, token_of(user)).code, 4);
}

// POST /budgets as a raw API call: `expect: existing` refuses an unknown path (404), `expect:
// new` an existing one (409), and without `expect` it creates or changes (docs/api.md).
TEST_F(BudgetRules, RawPostWithAndWithoutExpect) {
  httplib::Client http("127.0.0.1", port());
  auto post = [&](const json& body) {
    auto r = http.Post("/api/v1/budgets", bearer(admin_), body.dump(), "application/json");
    return std::make_pair(r ? r->status : 0, r ? json::parse(r->body, nullptr, false) : json());
  };
  auto [missing, why] = post({{"path", "/raw/nope"}, {"share", 2}, {"expect", "existing"}});
  EXPECT_EQ(missing, 404) << why.dump();
  EXPECT_EQ(why["error"]["field"], "path");
  EXPECT_TRUE(budget_in_tree("/raw/nope").is_null()) << "not made";
  auto [made, b] = post({{"path", "/raw/a"}, {"share", 2}, {"expect", "new"}});
  EXPECT_EQ(made, 200) << b.dump();
  auto [again, conflict] = post({{"path", "/raw/a"}, {"share", 3}, {"expect", "new"}});
  EXPECT_EQ(again, 409) << conflict.dump();
  EXPECT_EQ(budget_in_tree("/raw/a")["share"], 2);
  auto [changed, c] = post({{"path", "/raw/a"}, {"share", 3}, {"expect", "existing"}});
  EXPECT_EQ(changed, 200) << c.dump();
  // Without expect: either, as before.
  auto [upsert_new, n] = post({{"path", "/raw/b"}, {"share", 4}});
  EXPECT_EQ(upsert_new, 200) << n.dump();
  EXPECT_EQ(budget_in_tree("/raw/b")["share"], 4);
  auto [upsert_old, o] = post({{"path", "/raw/b"}, {"share", 5}});
  EXPECT_EQ(upsert_old, 200) << o.dump();
  EXPECT_EQ(budget_in_tree("/raw/b")["share"], 5);
  auto [bad, e] = post({{"path", "/raw/b"}, {"share", 5}, {"expect", "maybe"}});
  EXPECT_EQ(bad, 400);
  EXPECT_EQ(e["error"]["field"], "expect");
}

// A server whose users may have 2 jobs waiting: an administrator lets ann queue more; bob stays
// at 2.
class UserLimits : public Cli {
 protected:
  static void SetUpTestSuite() {
    server_flags_ = {"--max-waiting-jobs", "2"};
    Cli::SetUpTestSuite();
  }
  static void TearDownTestSuite() {
    Cli::TearDownTestSuite();
    server_flags_.clear();
  }
};

TEST_F(UserLimits, AnOverrideLetsOneUserQueueMoreWhileOthersStayCapped) {
  ASSERT_EQ(allot({"budget", "create", "/ul", "--members", "ann,bob"}).code, 0);
  const auto ann = token_of(allot({"token", "create", "ann", "--role", "user"}));
  const auto bob = token_of(allot({"token", "create", "bob", "--role", "user"}));
  // The quota counts from the scheduler's latest snapshot plus what was accepted since (quota.h),
  // which may lag a submission answered a moment ago: a pause lets each one reach a snapshot.
  auto submit = [&](const std::string& who) {
    auto r = allot({"submit", "--budget", "/ul", "--hold", "--json"}, who);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return r;
  };
  auto set = allot({"limits", "ann", "--max-waiting-jobs", "5"});
  ASSERT_EQ(set.code, 0) << set.err;
  EXPECT_EQ(set.out, "user ann: 5 waiting\n");
  for (int i = 0; i < 5; ++i) {
    auto r = submit(ann);
    ASSERT_EQ(r.code, 0) << i << ": " << r.err;
  }
  auto sixth = submit(ann);
  EXPECT_EQ(sixth.code, 1) << sixth.err;
  EXPECT_NE(sixth.err.find("ann has 5 jobs waiting, the most allowed"), std::string::npos)
      << sixth.err;
  for (int i = 0; i < 2; ++i) ASSERT_EQ(submit(bob).code, 0) << i;
  auto third = submit(bob);
  EXPECT_EQ(third.code, 1) << third.err;
  EXPECT_NE(third.err.find("bob has 2 jobs waiting, the most allowed"), std::string::npos)
      << third.err;

  // Listed, shown per user, audited; administrators only.
  auto all = allot({"limits"});
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_NE(all.out.find("(server)"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("ann"), std::string::npos) << all.out;
  EXPECT_EQ(all.out.find("bob"), std::string::npos) << all.out;
  EXPECT_EQ(allot({"limits", "bob"}).out, "user bob: the server's limits\n");
  EXPECT_EQ(allot({"limits"}, ann).code, 4);
  EXPECT_EQ(allot({"limits", "ann", "--max-waiting-jobs", "100"}, ann).code, 4);
  auto log = allot({"budget", "log", "/", "--json"});
  bool audited = false;
  for (const auto& e : json::parse(log.out)) {
    audited = audited || (e["field"] == "user_limits ann" && e["new"] == R"({"max_waiting":5})");
  }
  EXPECT_TRUE(audited) << log.out;

  // Dropped: ann is back to the server's 2 (she has 5 waiting: refused).
  auto drop = allot({"limits", "ann", "--server-limits"});
  ASSERT_EQ(drop.code, 0) << drop.err;
  EXPECT_EQ(drop.out, "user ann: the server's limits\n");
  EXPECT_EQ(submit(ann).code, 1);
  EXPECT_EQ(allot({"limits", "--max-waiting-jobs", "3"}).code, 2) << "a user must be named";
}

}  // namespace
