// MIG through the API (docs/api.md, "mig"; docs/policy.md section 7.3, "MIG instances"): the
// instances an agent registers are what the scheduler hands out, whole; a job may name a profile;
// its assignment tells the agent which instance's profile it was counted on.
#include <gtest/gtest.h>

#include "harness.h"

namespace allot::server {
namespace {

using testing::Harness;
using testing::job;
using testing::json;
using testing::TempDir;

class Mig : public ::testing::Test {
 protected:
  void SetUp() override {
    h = std::make_unique<Harness>(dir.file("allot.db"));
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"members", {"ann"}}}).status, 200);
  }
  // An H200 node whose GPU 0 is split into `instances` and GPU 1 is whole.
  std::string node(const std::string& name, const json& instances) {
    json body = {{"name", name},
                 {"cluster", "c1"},
                 {"model", "H200"},
                 {"gpus", 2},
                 {"devices",
                  {{{"index", 0}, {"uuid", "GPU-0"}, {"mig", instances}},
                   {{"index", 1}, {"uuid", "GPU-1"}}}}};
    auto tok = h->token("agent-" + name, "agent", name);
    auto r = h->post("/api/v1/nodes", body, tok);
    EXPECT_TRUE(r.status == 201 || r.status == 200) << r.body.dump();
    return tok;
  }
  static json instance(const std::string& uuid, const std::string& profile, int milli) {
    return {{"uuid", uuid}, {"profile", profile}, {"milli", milli}};
  }
  static json mig_job(const std::string& key, const std::string& profile) {
    auto b = job(key, "/lab/a", 1);
    b.erase("gpus_per_node");
    b["mig"] = profile;
    b["command"] = {"true"};
    return b;
  }
  json placement(JobId id) { return h->get("/api/v1/jobs/" + std::to_string(id)).body; }
  TempDir dir;
  std::unique_ptr<Harness> h;
};

TEST_F(Mig, AJobNamingAProfileGetsAnInstanceOfItAndTheAgentIsToldWhich) {
  auto tok = node(
      "n1", json::array({instance("MIG-a", "1g.18gb", 142), instance("MIG-b", "3g.71gb", 428)}));
  auto r = h->post("/api/v1/jobs", mig_job("k1", "3G.71GB"));
  ASSERT_EQ(r.status, 201) << r.body.dump();
  const JobId id = r.body["id"];
  EXPECT_EQ(r.body["spec"]["mig"], "3g.71gb");
  EXPECT_EQ(r.body["spec"]["gpu_milli"], 428);
  EXPECT_EQ(r.body["spec"]["models"], json::array({"H200"}));
  h->sync();
  auto a = h->get("/api/v1/agent/nodes/n1/assignments", tok);
  ASSERT_EQ(a.body["run"].size(), 1u) << a.body.dump();
  EXPECT_EQ(a.body["run"][0]["job"], id);
  EXPECT_EQ(a.body["run"][0]["gpus"], json::array({0}));
  EXPECT_EQ(a.body["run"][0]["gpu_milli"], 428);
  EXPECT_EQ(a.body["run"][0]["mig_profile"], "3g.71gb");
  // A second 3g waits: the 1g and the 572 milli in no instance do not make one.
  auto second = h->post("/api/v1/jobs", mig_job("k2", "3g.71gb"));
  ASSERT_EQ(second.status, 201);
  // A plain fraction of 100 (ranked first in its budget, so that the waiting 3g's reservation
  // does not hold it back) takes the 1g, whole, not the whole GPU 1.
  auto plain = job("k3", "/lab/a", 1);
  plain["gpu_milli"] = 100;
  plain["priority"] = "high";
  auto third = h->post("/api/v1/jobs", plain);
  ASSERT_EQ(third.status, 201);
  h->sync();
  EXPECT_EQ(h->get("/api/v1/jobs/" + std::to_string(second.body["id"].get<JobId>())).body["state"],
            "pending");
  a = h->get("/api/v1/agent/nodes/n1/assignments", tok);
  ASSERT_EQ(a.body["run"].size(), 2u) << a.body.dump();
  EXPECT_EQ(a.body["run"][1]["gpus"], json::array({0}));
  EXPECT_EQ(a.body["run"][1]["gpu_milli"], 142);
  EXPECT_EQ(a.body["run"][1]["mig_profile"], "1g.18gb");
  // After a restart the instances stay taken: the waiting 3g still waits, and what runs keeps
  // its profile.
  h->restart();
  h->sync();
  EXPECT_EQ(h->get("/api/v1/jobs/" + std::to_string(second.body["id"].get<JobId>())).body["state"],
            "pending");
  a = h->get("/api/v1/agent/nodes/n1/assignments", tok);
  ASSERT_EQ(a.body["run"].size(), 2u) << a.body.dump();
  EXPECT_EQ(a.body["run"][0]["mig_profile"], "3g.71gb");
}

TEST_F(Mig, AnAgentThatSplitTheGpuAgainIsCountedOnItsNewInstances) {
  node("n1", json::array({instance("MIG-a", "1g.18gb", 142)}));
  auto first = h->post("/api/v1/jobs", mig_job("k1", "2g.35gb"));
  ASSERT_EQ(first.status, 201);
  h->sync();
  const std::string path = "/api/v1/jobs/" + std::to_string(first.body["id"].get<JobId>());
  EXPECT_EQ(h->get(path).body["state"], "pending");
  // Registered again (an agent restart) with the GPU split into a 2g: the job starts there.
  node("n1", json::array({instance("MIG-c", "2g.35gb", 285)}));
  h->sync();
  EXPECT_EQ(h->get(path).body["state"], "starting");  // placed; its agent confirms the start
}

TEST_F(Mig, BadProfilesAreRefusedNamingTheField) {
  node("n1", json::array({instance("MIG-a", "1g.18gb", 142)}));
  struct Case {
    json patch;
    std::string reason_has;
  };
  const std::vector<Case> cases = {
      {{{"mig", "1g.16gb"}}, "catalogue knows: "},
      {{{"mig", 7}}, "catalogue knows: "},
      {{{"mig", "1g.18gb"}, {"gpu_milli", 500}}, "leave gpu_milli out"},
      {{{"mig", "1g.18gb"}, {"gpus_per_node", 2}}, "one instance of one GPU"},
      {{{"mig", "1g.18gb"}, {"gpus", 2}}, "one instance of one GPU"},
      {{{"mig", "7g.141gb"}}, "whole GPU"},
      {{{"mig", "1g.18gb"}, {"models", {"H100"}}}, "H200"},
  };
  const auto before = h->store().count_jobs();
  for (const auto& c : cases) {
    auto b = mig_job("bad", "1g.18gb");
    b.update(c.patch);
    auto r = h->post("/api/v1/jobs", b);
    EXPECT_EQ(r.status, 400) << c.patch.dump() << " -> " << r.body.dump();
    EXPECT_EQ(r.body["error"]["field"], "mig") << c.patch.dump();
    EXPECT_NE(r.body["error"]["reason"].get<std::string>().find(c.reason_has), std::string::npos)
        << r.body.dump();
  }
  EXPECT_EQ(h->store().count_jobs(), before);
  // The stored spec (mig with its gpu_milli and models) sent back, as a resubmit does: accepted.
  auto good = h->post("/api/v1/jobs", mig_job("good", "1g.18gb"));
  ASSERT_EQ(good.status, 201) << good.body.dump();
  auto again = good.body["spec"];
  again["idempotency_key"] = "again";
  if (again["name"] == "") again.erase("name");
  auto r2 = h->post("/api/v1/jobs", again);
  EXPECT_EQ(r2.status, 201) << r2.body.dump();
  EXPECT_EQ(r2.body["spec"], good.body["spec"]);
  // A node's instances may not add up to more than its GPU.
  auto tok = h->token("agent-n2", "agent", "n2");
  auto r = h->post(
      "/api/v1/nodes",
      {{"name", "n2"},
       {"cluster", "c1"},
       {"model", "H200"},
       {"gpus", 1},
       {"devices",
        {{{"index", 0},
          {"mig", {instance("MIG-x", "4g.71gb", 571), instance("MIG-y", "4g.71gb", 571)}}}}}},
      tok);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["field"], "devices[0].mig");
}

// docs/policy.md section 7.5: with dynamic MIG the server orders an idle GPU split for a job that
// names a profile, the agent is told in its assignments, and its next registration settles it.
TEST(DynamicMigServer, AnIdleGpuIsSplitThroughTheAgentAndTakenBackForTraining) {
  TempDir dir;
  ControllerOptions o;
  o.policy.mig_dynamic = true;
  o.policy.mig_hold = 60;
  Harness h(dir.file("allot.db"), {}, 1'000'000, o);
  ASSERT_EQ(h.post("/api/v1/budgets", {{"path", "/lab/a"}, {"members", {"ann"}}}).status, 200);
  const json whole_gpu = {{"name", "n1"},
                          {"cluster", "c1"},
                          {"model", "H200"},
                          {"gpus", 1},
                          {"devices", {{{"index", 0}, {"uuid", "GPU-0"}}}}};
  auto tok = h.token("agent-n1", "agent", "n1");
  ASSERT_EQ(h.post("/api/v1/nodes", whole_gpu, tok).status, 201);
  auto b = job("k1", "/lab/a", 1);
  b.erase("gpus_per_node");
  b["mig"] = "2g.35gb";
  b["command"] = {"true"};
  auto r = h.post("/api/v1/jobs", b);
  ASSERT_EQ(r.status, 201) << r.body.dump();
  const std::string path = "/api/v1/jobs/" + std::to_string(r.body["id"].get<JobId>());
  h.sync();
  auto a = h.get("/api/v1/agent/nodes/n1/assignments", tok);
  EXPECT_TRUE(a.body["run"].empty()) << a.body.dump();
  ASSERT_EQ(a.body["mig_layouts"].size(), 1u) << a.body.dump();
  EXPECT_EQ(a.body["mig_layouts"][0]["gpu"], 0);
  EXPECT_EQ(a.body["mig_layouts"][0]["profiles"], json::array({"2g.35gb", "4g.71gb", "1g.18gb"}));
  EXPECT_EQ(h.get(path).body["state"], "pending");
  // Operators see the GPU being re-partitioned.
  const json reconfiguring = h.get("/api/v1/nodes/n1").body["mig_reconfiguring"];
  ASSERT_EQ(reconfiguring.size(), 1u) << reconfiguring.dump();
  EXPECT_EQ(reconfiguring[0]["gpu"], 0);
  const json events = h.get(path + "/events").body["events"];
  bool told = false;
  for (const auto& e : events) {
    told |= e["reason"].get<std::string>().find("GPU 0 of node n1 being split") == 0;
  }
  EXPECT_TRUE(told) << events.dump();

  // The agent made it and registers again: the job starts on its 2g instance, and the order is
  // gone from the assignments.
  json split = whole_gpu;
  json instances = json::array();
  instances.push_back({{"uuid", "MIG-0"}, {"profile", "2g.35gb"}, {"milli", 285}});
  instances.push_back({{"uuid", "MIG-1"}, {"profile", "4g.71gb"}, {"milli", 571}});
  instances.push_back({{"uuid", "MIG-2"}, {"profile", "1g.18gb"}, {"milli", 142}});
  split["devices"][0]["mig"] = instances;
  ASSERT_EQ(h.post("/api/v1/nodes", split, tok).status, 200);
  h.sync();
  a = h.get("/api/v1/agent/nodes/n1/assignments", tok);
  EXPECT_FALSE(a.body.contains("mig_layouts")) << a.body.dump();
  EXPECT_TRUE(h.get("/api/v1/nodes/n1").body["mig_reconfiguring"].empty());
  ASSERT_EQ(a.body["run"].size(), 1u) << a.body.dump();
  EXPECT_EQ(a.body["run"][0]["mig_profile"], "2g.35gb");
  EXPECT_EQ(h.get(path).body["state"], "starting");
  const JobId id = r.body["id"];
  for (const char* event : {"started", "exited"}) {
    json one = {{"job", id}, {"run", 1}, {"event", event}};
    if (std::string(event) == "exited") one["exit_code"] = 0;
    ASSERT_EQ(h.post("/api/v1/agent/nodes/n1/reports", {{"reports", {one}}}, tok).status, 200);
  }
  EXPECT_EQ(h.get(path).body["state"], "succeeded");

  // Training waits for the whole GPU: once the hold is over, the idle GPU is made whole.
  auto training = job("k2", "/lab/a", 1);
  training["command"] = {"true"};
  auto t = h.post("/api/v1/jobs", training);
  ASSERT_EQ(t.status, 201) << t.body.dump();
  for (int i = 0; i < 3; ++i) {  // the node stays in touch while the hold runs out
    h.advance(21);
    ASSERT_EQ(h.post("/api/v1/nodes/n1/heartbeat", json::object(), tok).status, 200);
  }
  h.sync();
  a = h.get("/api/v1/agent/nodes/n1/assignments", tok);
  ASSERT_EQ(a.body["mig_layouts"].size(), 1u) << a.body.dump();
  EXPECT_EQ(a.body["mig_layouts"][0]["profiles"], json::array());
  // An agent that could not do it registers the layout unchanged: the GPU is back as it was.
  ASSERT_EQ(h.post("/api/v1/nodes", split, tok).status, 200);
  h.sync();
  a = h.get("/api/v1/agent/nodes/n1/assignments", tok);
  EXPECT_FALSE(a.body.contains("mig_layouts")) << a.body.dump();
}

// docs/policy.md section 7.5, "Yield": training with a contract takes a GPU in MIG mode back from
// unallocated work on its instance; the agent is told to make it whole only once that work's run
// is gone (an agent leaves a GPU a run still holds as it is).
TEST(DynamicMigServer, UnallocatedWorkYieldsItsGpuAndTheMergeWaitsForItsRunToGo) {
  TempDir dir;
  ControllerOptions o;
  o.policy.mig_dynamic = true;
  o.policy.mig_yield = true;
  o.policy.mig_hold = 60;
  Harness h(dir.file("allot.db"), {}, 1'000'000, o);
  ASSERT_EQ(h.post("/api/v1/budgets", {{"path", "/lab/a"}, {"members", {"ann"}}}).status, 200);
  json node = {{"name", "n1"}, {"cluster", "c1"}, {"model", "H200"}, {"gpus", 1}};
  node["devices"] = {{{"index", 0},
                      {"uuid", "GPU-0"},
                      {"mig",
                       {{{"uuid", "MIG-0"}, {"profile", "3g.71gb"}, {"milli", 428}},
                        {{"uuid", "MIG-1"}, {"profile", "3g.71gb"}, {"milli", 428}}}}}};
  auto tok = h.token("agent-n1", "agent", "n1");
  ASSERT_EQ(h.post("/api/v1/nodes", node, tok).status, 201);
  auto inference = job("k1", "/lab/a", 1);
  inference.erase("gpus_per_node");
  inference["mig"] = "3g.71gb";
  inference["min_runtime"] = 0;  // unallocated by choice
  inference["command"] = {"sleep", "1000"};
  auto r = h.post("/api/v1/jobs", inference);
  ASSERT_EQ(r.status, 201) << r.body.dump();
  const JobId id = r.body["id"];
  h.sync();
  ASSERT_EQ(h.post("/api/v1/agent/nodes/n1/reports",
                   {{"reports", {{{"job", id}, {"run", 1}, {"event", "started"}}}}}, tok)
                .status,
            200);
  h.advance(30);
  auto training = job("k2", "/lab/a", 1);
  training["min_runtime"] = 3600;
  training["command"] = {"true"};
  ASSERT_EQ(h.post("/api/v1/jobs", training).status, 201);
  h.sync();
  auto a = h.get("/api/v1/agent/nodes/n1/assignments", tok);
  // The inference run is told to stop; the GPU is not yet re-partitioned under it.
  ASSERT_EQ(a.body["stop"].size(), 1u) << a.body.dump();
  EXPECT_EQ(a.body["stop"][0]["job"], id);
  EXPECT_FALSE(a.body.contains("mig_layouts")) << a.body.dump();
  EXPECT_EQ(h.get("/api/v1/jobs/" + std::to_string(id)).body["state"], "preempting");
  // Its run is gone: now the agent is told to make the GPU whole.
  ASSERT_EQ(h.post("/api/v1/agent/nodes/n1/reports",
                   {{"reports", {{{"job", id}, {"run", 1}, {"event", "preempted"}}}}}, tok)
                .status,
            200);
  h.sync();
  a = h.get("/api/v1/agent/nodes/n1/assignments", tok);
  ASSERT_EQ(a.body["mig_layouts"].size(), 1u) << a.body.dump();
  EXPECT_EQ(a.body["mig_layouts"][0]["gpu"], 0);
  EXPECT_EQ(a.body["mig_layouts"][0]["profiles"], json::array());
}

}  // namespace
}  // namespace allot::server
