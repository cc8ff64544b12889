// Slurm's habits through the API: hold/release, --after dependencies and job arrays, kept out of
// the core by the controller's gate (src/server/controller_gate.cpp) and stored across restarts.
#include <gtest/gtest.h>

#include "harness.h"
#include "server/job_array.h"

namespace allot::server {
namespace {

using testing::Harness;
using testing::job;
using testing::json;
using testing::TempDir;

class Habits : public ::testing::Test {
 protected:
  void SetUp() override {
    h = std::make_unique<Harness>(dir.file("allot.db"));
    ASSERT_EQ(h->post("/api/v1/budgets",
                      {{"path", "/lab/a"}, {"share", 1}, {"members", {"alice", "bob"}}})
                  .status,
              200);
    h->add_sim_nodes(1);  // 8 GPUs: one 8-GPU job at a time
  }
  JobId submit(json body, const std::string& tok = "") {
    auto r = h->post("/api/v1/jobs", body, tok);
    EXPECT_EQ(r.status, 201) << r.body.dump();
    return r.body.value("id", JobId{0});
  }
  json get(JobId id) { return h->get("/api/v1/jobs/" + std::to_string(id)).body; }
  std::string state(JobId id) { return get(id).value("state", "?"); }
  json why(JobId id) { return h->get("/api/v1/jobs/" + std::to_string(id) + "/why").body; }
  testing::Reply act(JobId id, const std::string& what, const std::string& tok = "") {
    return h->post("/api/v1/jobs/" + std::to_string(id) + "/" + what, json::object(), tok);
  }
  static json timed(const std::string& key, int seconds = 100, int gpus = 8) {
    auto b = job(key, "/lab/a", gpus);
    b["expected_duration"] = seconds;
    return b;
  }
  TempDir dir;
  std::unique_ptr<Harness> h;
};

TEST_F(Habits, AHeldJobWaitsUntilReleasedThenRuns) {
  auto b = timed("held");
  b["hold"] = true;
  const auto id = submit(b);
  h->sync();
  EXPECT_EQ(state(id), "pending");
  EXPECT_EQ(get(id)["held_by"], "root");
  EXPECT_EQ(why(id)["code"], "held");
  EXPECT_NE(why(id)["explanation"].get<std::string>().find("held (by root)"), std::string::npos);
  auto r = act(id, "release");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_FALSE(r.body.contains("held_by"));
  h->sync();
  EXPECT_EQ(state(id), "running");
  // Who held and released it is in its history.
  std::string reasons;
  const auto events = h->get("/api/v1/jobs/" + std::to_string(id) + "/events").body;
  for (const auto& e : events["events"]) {
    reasons += e["reason"].get<std::string>() + ";";
  }
  EXPECT_NE(reasons.find("submitted, held by root;"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("released by root"), std::string::npos) << reasons;
}

TEST_F(Habits, HoldingAWaitingJobTakesItOutOfTheQueue) {
  const auto first = submit(timed("first"));
  const auto second = submit(timed("second"));
  h->sync();
  ASSERT_EQ(state(first), "running");
  ASSERT_EQ(state(second), "pending");
  ASSERT_EQ(act(second, "hold").status, 200);
  ASSERT_EQ(act(second, "hold").status, 200);  // again: no change, no error
  h->advance(150);
  h->sync();
  EXPECT_EQ(state(first), "succeeded");
  h->sync();
  EXPECT_EQ(state(second), "pending") << "a held job started";
  EXPECT_EQ(why(second)["code"], "held");
  ASSERT_EQ(act(second, "release").status, 200);
  h->sync();
  EXPECT_EQ(state(second), "running");
}

TEST_F(Habits, OnlyWaitingJobsAndOnlyTheirOwnerManagerOrAdminMayHold) {
  const auto alice = h->token("alice", "user");
  const auto bob = h->token("bob", "user");
  const auto manager = h->token("mgr", "manager", "/lab/a");
  const auto running = submit(timed("run"), alice);
  const auto waiting = submit(timed("wait"), alice);
  h->sync();
  ASSERT_EQ(state(running), "running");
  auto r = act(running, "hold", alice);
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.body["error"]["field"], "state");
  EXPECT_NE(r.body["error"]["reason"].get<std::string>().find("is running"), std::string::npos);
  EXPECT_EQ(act(waiting, "hold", bob).status, 404);       // not bob's: he cannot see it
  EXPECT_EQ(act(waiting, "release", alice).status, 409);  // not held
  ASSERT_EQ(act(waiting, "hold", manager).status, 200);
  EXPECT_EQ(get(waiting)["held_by"], "mgr");
  EXPECT_EQ(act(waiting, "release", bob).status, 404);
  EXPECT_EQ(act(waiting, "release", alice).status, 200);
  EXPECT_EQ(act(999999, "hold").status, 404);
  EXPECT_EQ(h->post("/api/v1/jobs/abc/hold", json::object()).status, 404);  // no such route
  auto extra = h->post("/api/v1/jobs/" + std::to_string(waiting) + "/hold", {{"x", 1}});
  EXPECT_EQ(extra.status, 400);
  EXPECT_EQ(extra.body["error"]["field"], "x");
  const auto agent = h->token("agent-n", "agent", "local-n0");
  EXPECT_EQ(act(waiting, "hold", agent).status, 403);
  // Ended: cancelled, then a hold is refused with the state it ended in.
  ASSERT_EQ(act(waiting, "cancel").status, 200);
  r = act(waiting, "hold");
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(r.body["error"]["reason"].get<std::string>().find("already ended (cancelled)"),
            std::string::npos);
  auto bad = timed("bad-hold");
  bad["hold"] = "yes";
  EXPECT_EQ(h->post("/api/v1/jobs", bad).body["error"]["field"], "hold");
}

TEST_F(Habits, AfterStartsOnlyOnceItsDependencySucceeded) {
  const auto a = submit(timed("a", 100, 1));
  auto b = timed("b", 100, 1);
  b["after"] = {a};
  const auto bid = submit(b);
  h->sync();
  ASSERT_EQ(state(a), "running");
  EXPECT_EQ(state(bid), "pending") << "B started while A was running (GPUs were free)";
  EXPECT_EQ(why(bid)["code"], "dependency");
  EXPECT_EQ(why(bid)["explanation"], "waiting for job " + std::to_string(a) + " (running)");
  EXPECT_EQ(get(bid)["after"], json::array({a}));
  h->advance(150);
  h->sync();
  EXPECT_EQ(state(a), "succeeded");
  EXPECT_EQ(state(bid), "running");
}

TEST_F(Habits, AFailedOrCancelledDependencyFailsTheJobAndAfterAnyRunsAnyway) {
  const auto a = submit(timed("a"));
  const auto waiting = submit(timed("w"));
  auto b = timed("b", 100, 1);
  b["after"] = {a, waiting};
  const auto bid = submit(b);
  auto c = timed("c", 100, 1);
  c["after_any"] = {waiting};
  const auto cid = submit(c);
  auto d = timed("d", 100, 1);
  d["after"] = {bid};  // a chain: fails once B fails
  const auto did = submit(d);
  h->sync();
  ASSERT_EQ(act(waiting, "cancel").status, 200);
  h->sync();
  h->sync();
  EXPECT_EQ(state(bid), "failed");
  EXPECT_EQ(get(bid)["reason"], "dependency " + std::to_string(waiting) + " failed (cancelled)");
  EXPECT_EQ(state(did), "failed");
  EXPECT_EQ(get(did)["reason"], "dependency " + std::to_string(bid) + " failed (failed)");
  // After any: the cancelled job ended, so C may start (on the GPUs A leaves).
  h->advance(150);
  h->sync();
  EXPECT_EQ(state(cid), "running") << get(cid).dump();
}

TEST_F(Habits, AfterRefusesJobsThatDoNotExistOrAreNotTheCallers) {
  const auto alice = h->token("alice", "user");
  const auto bob = h->token("bob", "user");
  const auto hers = submit(timed("hers"), alice);
  for (const json& after : {json::array({999999}), json("12"), json::array({"x"}), json::array({0}),
                            json::array({hers})}) {
    auto b = timed("dep-" + after.dump());
    b["after"] = after;
    auto r = h->post("/api/v1/jobs", b, bob);
    EXPECT_EQ(r.status, 400) << after.dump() << " " << r.body.dump();
    EXPECT_EQ(r.body["error"]["field"], "after") << r.body.dump();
  }
  auto b = timed("any");
  b["after_any"] = json::array({999999});
  EXPECT_EQ(h->post("/api/v1/jobs", b).body["error"]["field"], "after_any");
  EXPECT_EQ(h->store().count_jobs(), 1);
}

TEST_F(Habits, AnArrayMakesOneNamedJobPerIndexAndARetryMakesNone) {
  auto b = timed("sweep", 100, 1);
  b["name"] = "sweep";
  b["array"] = "0-2";
  auto r = h->post("/api/v1/jobs", b);
  ASSERT_EQ(r.status, 201) << r.body.dump();
  ASSERT_EQ(r.body["jobs"].size(), 3u);
  const auto first = r.body["array_job_id"].get<JobId>();
  for (int i = 0; i < 3; ++i) {
    const auto& t = r.body["jobs"][i];
    EXPECT_EQ(t["name"], "sweep[" + std::to_string(i) + "]");
    EXPECT_EQ(t["array_index"], i);
    EXPECT_EQ(t["array_job_id"], first);
  }
  const auto count = h->store().count_jobs();
  auto again = h->post("/api/v1/jobs", b);
  ASSERT_EQ(again.status, 200) << again.body.dump();
  EXPECT_EQ(again.body["jobs"], r.body["jobs"]);
  EXPECT_EQ(h->store().count_jobs(), count);
  // The same key for another request, or for a single job: refused.
  b["array"] = "0-3";
  EXPECT_EQ(h->post("/api/v1/jobs", b).status, 409);
  b.erase("array");
  EXPECT_EQ(h->post("/api/v1/jobs", b).status, 409);
  h->sync();
  for (const auto& t : r.body["jobs"]) EXPECT_EQ(state(t["id"].get<JobId>()), "running");
  for (const char* bad : {"5-1", "0-10000", "x", "", "0-3%0", "1,,2", "0-4:0"}) {
    auto w = timed(std::string("bad") + bad);
    w["array"] = bad;
    auto e = h->post("/api/v1/jobs", w);
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_EQ(e.body["error"]["field"], "array") << bad;
  }
  EXPECT_EQ(h->store().count_jobs(), count);
}

TEST_F(Habits, AnArrayLimitRunsAtMostNTasksAtOnce) {
  auto b = timed("limited", 100, 1);
  b["array"] = "0-3%2";
  auto r = h->post("/api/v1/jobs", b);
  ASSERT_EQ(r.status, 201) << r.body.dump();
  std::vector<JobId> ids;
  for (const auto& t : r.body["jobs"]) ids.push_back(t["id"].get<JobId>());
  h->sync();
  EXPECT_EQ(state(ids[0]), "running");
  EXPECT_EQ(state(ids[1]), "running");
  EXPECT_EQ(state(ids[2]), "pending");
  EXPECT_EQ(state(ids[3]), "pending");
  EXPECT_EQ(why(ids[2])["code"], "array-limit");
  h->advance(150);
  h->sync();
  EXPECT_EQ(state(ids[0]), "succeeded");
  EXPECT_EQ(state(ids[2]), "running");
  EXPECT_EQ(state(ids[3]), "running");
}

TEST_F(Habits, HeldAndDependentJobsSurviveARestart) {
  auto held = timed("held", 100, 1);
  held["hold"] = true;
  const auto hid = submit(held);
  auto dep = timed("dep", 100, 1);
  dep["after"] = {hid};
  const auto did = submit(dep);
  h->sync();
  h->restart();
  h->sync();
  EXPECT_EQ(state(hid), "pending");
  EXPECT_EQ(get(hid)["held_by"], "root");
  EXPECT_EQ(state(did), "pending");
  EXPECT_EQ(get(did)["after"], json::array({hid}));
  ASSERT_EQ(act(hid, "release").status, 200);
  h->sync();
  EXPECT_EQ(state(hid), "running");
  EXPECT_EQ(state(did), "pending");
  h->advance(150);
  h->sync();
  EXPECT_EQ(state(hid), "succeeded");
  EXPECT_EQ(state(did), "running");
}

TEST(JobArray, EachTaskCountsAgainstTheWaitingLimit) {
  TempDir dir;
  ApiOptions api;
  api.submit_limits.max_waiting = 5;
  Harness h(dir.file("allot.db"), api);
  ASSERT_EQ(
      h.post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 1}, {"members", {"alice"}}}).status,
      200);
  const auto alice = h.token("alice", "user");
  auto b = job("big", "/lab/a", 1);
  b["array"] = "0-9";
  auto r = h.post("/api/v1/jobs", b, alice);
  EXPECT_EQ(r.status, 429) << r.body.dump();
  EXPECT_EQ(h.store().count_jobs(), 0);
  b["array"] = "0-3";
  EXPECT_EQ(h.post("/api/v1/jobs", b, alice).status, 201);
}

TEST(JobArray, ParsesSlurmsForms) {
  auto r = parse_array("0,3,7");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().indices, (std::vector<int>{0, 3, 7}));
  r = parse_array("0-6:2%3");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().indices, (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(r.value().limit, 3);
  r = parse_array("2-4,3");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().indices, (std::vector<int>{2, 3, 4}));
  EXPECT_TRUE(parse_array("0-9999").ok());
  auto big = parse_array("0-10000");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.error().reason.find("at most 10000"), std::string::npos);
  for (const char* bad : {"", "-1", "a-b", "3-1", "0-1%", "0-1%x", "1-2:0", "99999999"}) {
    auto e = parse_array(bad);
    EXPECT_FALSE(e.ok()) << bad;
    if (!e.ok()) {
      EXPECT_EQ(e.error().field, "array");
    }
  }
}

}  // namespace
}  // namespace allot::server
