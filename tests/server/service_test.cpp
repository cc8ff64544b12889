// Inference services (server/service.h): the request's validation and the autoscaler's decision
// on hand-made figures, then /api/v1/services against a real server with simulated nodes: the
// replicas kept, their tiers, scaling on memory pressure and on the reported load, replacement,
// protection of the minimum against preemption, a restart, and deletion.
#include "server/service.h"

#include <gtest/gtest.h>

#include <set>

#include "harness.h"

namespace allot::server {
namespace {

using testing::Harness;
using testing::json;
using testing::TempDir;

ServiceSpec spec_of(int mn, int mx) {
  ServiceSpec s;
  s.name = "chat";
  s.min_replicas = mn;
  s.max_replicas = mx;
  s.autoscale.cooldown = 60;
  return s;
}

TEST(ServiceScale, OutAboveHighInBelowLowNothingBetween) {
  auto s = spec_of(1, 3);
  ServiceState st;
  st.desired = 1;
  auto d = scale_decision(s, st, {1, 0.9, std::nullopt}, 1000);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->from, 1);
  EXPECT_EQ(d->to, 2);
  EXPECT_NE(d->reason.find("GPU memory 90% used"), std::string::npos) << d->reason;
  EXPECT_NE(d->reason.find("above 80%"), std::string::npos) << d->reason;
  // Between the watermarks: no change either way (the hysteresis).
  st.desired = 2;
  EXPECT_FALSE(scale_decision(s, st, {2, 0.5, std::nullopt}, 1000));
  // Below the low one: in, but never under the minimum.
  d = scale_decision(s, st, {2, 0.1, std::nullopt}, 1000);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->to, 1);
  EXPECT_NE(d->reason.find("in: GPU memory 10% used, below 30%"), std::string::npos) << d->reason;
  st.desired = 1;
  EXPECT_FALSE(scale_decision(s, st, {1, 0.1, std::nullopt}, 1000));
  // Never past the maximum.
  st.desired = 3;
  EXPECT_FALSE(scale_decision(s, st, {3, 0.95, std::nullopt}, 1000));
  // Nothing measured: nothing decided.
  st.desired = 2;
  EXPECT_FALSE(scale_decision(s, st, {2, std::nullopt, std::nullopt}, 1000));
}

TEST(ServiceScale, CooldownAndWaitingForTheLastScaleOut) {
  auto s = spec_of(1, 4);
  ServiceState st;
  st.desired = 2;
  st.last_scale = 1000;
  EXPECT_FALSE(scale_decision(s, st, {2, 0.9, std::nullopt}, 1059));  // inside the cool-down
  EXPECT_TRUE(scale_decision(s, st, {2, 0.9, std::nullopt}, 1060));
  // The replica wanted last time has not started: no further scale-out on the same pressure.
  EXPECT_FALSE(scale_decision(s, st, {1, 0.9, std::nullopt}, 1060));
}

TEST(ServiceScale, LoadPerReplicaAndScaleFromZero) {
  auto s = spec_of(0, 4);
  s.autoscale.load_high = 100;
  s.autoscale.load_low = 20;
  ServiceState st;
  st.desired = 2;
  auto d = scale_decision(s, st, {2, std::nullopt, 300.0}, 1000);  // 150 a replica
  ASSERT_TRUE(d);
  EXPECT_EQ(d->to, 3);
  ASSERT_TRUE(d->load);
  EXPECT_DOUBLE_EQ(*d->load, 150);
  EXPECT_NE(d->reason.find("load 150 per replica, above 100"), std::string::npos) << d->reason;
  // Memory low but load high: out (any signal above its high watermark wins).
  EXPECT_TRUE(scale_decision(s, st, {2, 0.1, 300.0}, 1000));
  // Memory low and load between: no scale-in.
  EXPECT_FALSE(scale_decision(s, st, {2, 0.1, 100.0}, 1000));
  // Both low: in.
  d = scale_decision(s, st, {2, 0.1, 10.0}, 1000);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->to, 1);
  // At zero replicas only a reported load brings one back.
  st.desired = 0;
  EXPECT_FALSE(scale_decision(s, st, {0, std::nullopt, std::nullopt}, 1000));
  d = scale_decision(s, st, {0, std::nullopt, 5.0}, 1000);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->to, 1);
}

TEST(ServiceState, DecisionsAreBoundedAndRoundTrip) {
  ServiceState st;
  ServiceLimits lim;
  lim.max_decisions = 3;
  for (int i = 1; i <= 5; ++i)
    record_decision(st, {i * 100, i - 1, i, "r", 0.5, std::nullopt}, lim);
  ASSERT_EQ(st.decisions.size(), 3u);
  EXPECT_EQ(st.decisions.front().at, 300);
  EXPECT_EQ(st.desired, 5);
  auto back = state_from_json(state_to_json(st));
  EXPECT_EQ(back.desired, 5);
  EXPECT_EQ(back.last_scale, 500);
  ASSERT_EQ(back.decisions.size(), 3u);
  ASSERT_TRUE(back.decisions.back().memory);
  EXPECT_DOUBLE_EQ(*back.decisions.back().memory, 0.5);
  EXPECT_FALSE(back.decisions.back().load);
}

TEST(ServiceSpecReadiness, KeptInTheCanonicalFormAndGivenToEachReplica) {
  ServiceSpec s;
  s.name = "chat";
  s.budget = "/lab/a";
  s.job = {{"command", {"serve"}}};
  s.ready_path = "/health";
  s.ready_port = 8000;
  s.ready_timeout = 120;
  auto back = service_from_json(service_to_json(s));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back.value().ready_path, "/health");
  EXPECT_EQ(back.value().ready_port, 8000);
  EXPECT_EQ(back.value().ready_timeout, 120);
  auto j = replica_job(s, true);
  EXPECT_TRUE(has_ready_check(j));
  EXPECT_EQ(j["ready"], json({{"path", "/health"}, {"port", 8000}}));
  EXPECT_EQ(j["env"]["ALLOT_SERVICE_PORT"], "8000");
  s.ready_path.clear();
  s.ready_port = 0;
  s.ready_command = {"test", "-e", "/tmp/up"};
  j = replica_job(s, false);
  EXPECT_EQ(j["ready"], json({{"command", {"test", "-e", "/tmp/up"}}}));
  EXPECT_FALSE(j["env"].contains("ALLOT_SERVICE_PORT"));
  s.ready_command.clear();
  EXPECT_FALSE(has_ready_check(replica_job(s, false)));
  // A service stored before readiness was checked: no check, the default bound.
  json old = service_to_json(s);
  old.erase("ready_timeout");
  back = service_from_json(old);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back.value().ready_timeout, 600);
  EXPECT_EQ(back.value().ready_port, 0);
}

class Services : public ::testing::Test {
 protected:
  void SetUp() override {
    h = std::make_unique<Harness>(dir.file("allot.db"));
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 1}}).status, 200);
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b"}, {"share", 1}}).status, 200);
  }
  // A service of `gpus`-GPU replicas that run a day (simulated nodes end a job at its expected
  // duration).
  static json service(const std::string& name, int mn, int mx, int gpus = 1) {
    return {{"name", name},
            {"budget", "/lab/a"},
            {"min_replicas", mn},
            {"max_replicas", mx},
            {"job", {{"command", {"serve"}}, {"gpus", gpus}, {"expected_duration", 86400}}},
            {"autoscale", {{"memory_high", 0.8}, {"memory_low", 0.3}, {"cooldown", 60}}}};
  }
  json show(const std::string& name) {
    auto r = h->get("/api/v1/services/" + name);
    EXPECT_EQ(r.status, 200) << r.body.dump();
    return r.body;
  }
  // Every GPU of every node the service's running replicas are on reports `fraction` of its
  // memory used.
  void memory(const std::string& name, double fraction) {
    const json shown = show(name);  // not a temporary in the range-for: it would die first
    for (const auto& r : shown["replicas"]) {
      for (const auto& n : r.value("nodes", json::array())) {
        json gpus = json::array();
        for (int g = 0; g < 8; ++g) {
          gpus.push_back({{"index", g},
                          {"mem_used_mib", static_cast<int>(fraction * 80000)},
                          {"mem_total_mib", 80000}});
        }
        h->ctl().set_node_telemetry(n, json{{"time", h->now()}, {"gpus", gpus}}.dump());
      }
    }
  }
  // Service "chat" (1 to 2 replicas of `gpus` GPUs) scaled out to two running replicas by
  // memory pressure: what the autoscaler left.
  json two_running(int gpus) {
    EXPECT_EQ(h->post("/api/v1/services", service("chat", 1, 2, gpus)).status, 201);
    h->sync();
    memory("chat", 0.9);
    h->sync();
    h->sync();
    auto s = show("chat");
    EXPECT_EQ(s["running"], 2) << s.dump();
    return s;
  }
  static int count(const json& s, const std::string& tier, const std::string& state) {
    int n = 0;
    for (const auto& r : s["replicas"]) n += r["tier"] == tier && r["state"] == state;
    return n;
  }
  TempDir dir;
  std::unique_ptr<Harness> h;
};

TEST_F(Services, RequestsAreValidatedFieldByField) {
  h->add_sim_nodes(1);
  auto bad = [&](json body, const std::string& field) {
    auto r = h->post("/api/v1/services", body);
    EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body.dump();
    EXPECT_EQ(r.body["error"]["field"], field) << r.body.dump();
  };
  auto s = service("chat", 1, 2);
  s["replicas"] = 3;
  bad(s, "replicas");
  s = service("chat", 1, 2);
  s["job"]["bogus"] = 1;
  bad(s, "job.bogus");
  s = service("chat", 3, 2);
  bad(s, "min_replicas");
  s = service("chat", 1, 1000);
  bad(s, "max_replicas");
  s = service("chat", 1, 2);
  s["autoscale"]["memory_low"] = 0.9;
  bad(s, "autoscale.memory_low");
  s = service("chat", 1, 2);
  s["autoscale"]["bogus"] = 1;
  bad(s, "autoscale.bogus");
  s = service("chat", 1, 2);
  s["job"]["budget"] = "/lab/b";
  bad(s, "job.budget");
  s = service("chat", 1, 2);
  s["job"].erase("command");
  bad(s, "job.command");
  s = service("chat", 1, 2);
  s["job"]["gpus"] = 16;  // two nodes' worth: a replica runs on one
  bad(s, "job.nodes");
  s = service("chat/x", 1, 2);
  bad(s, "name");
  s = service("chat", 1, 2);
  s["ready_path"] = "health";
  bad(s, "ready_path");
  s = service("chat", 1, 2);
  s["ready_path"] = "/health";  // without its port
  bad(s, "ready_port");
  s["ready_port"] = 70000;
  bad(s, "ready_port");
  s["ready_port"] = "8000";
  bad(s, "ready_port");
  s = service("chat", 1, 2);
  s["ready_port"] = 8000;  // a port without a path to ask
  bad(s, "ready_port");
  s = service("chat", 1, 2);
  s["ready_command"] = {"true"};
  s["ready_timeout"] = 5;
  bad(s, "ready_timeout");
  s["ready_timeout"] = "10m";
  bad(s, "ready_timeout");
  // A user who is not a member of the budget may not create it there.
  auto ann = h->token("ann", "user");
  EXPECT_EQ(h->post("/api/v1/services", service("chat", 1, 2), ann).status, 403);
  ASSERT_EQ(h->post("/api/v1/services", service("chat", 1, 2)).status, 201);
  EXPECT_EQ(h->post("/api/v1/services", service("chat", 1, 2)).status, 409);
  // Nor see it.
  EXPECT_EQ(h->get("/api/v1/services/chat", ann).status, 404);
  EXPECT_TRUE(h->get("/api/v1/services", ann).body["services"].empty());
  EXPECT_EQ(h->get("/api/v1/services/nope").status, 404);
}

TEST_F(Services, KeepsReplicasScalesOnMemoryAndExplainsEachDecision) {
  h->add_sim_nodes(1);
  auto r = h->post("/api/v1/services", service("chat", 1, 3));
  ASSERT_EQ(r.status, 201) << r.body.dump();
  EXPECT_EQ(r.body["desired"], 1);
  h->sync();
  auto s = show("chat");
  ASSERT_EQ(s["replicas"].size(), 1u) << s.dump();
  EXPECT_EQ(count(s, "protected", "running"), 1);
  EXPECT_TRUE(s["replicas"][0]["allocated"].get<bool>()) << s.dump();
  // The replica is a job that says which service it serves.
  const auto first = s["replicas"][0]["job"].get<long long>();
  auto j = h->get("/api/v1/jobs/" + std::to_string(first)).body;
  EXPECT_EQ(j["spec"]["service"], "chat");
  EXPECT_EQ(j["spec"]["service_tier"], "protected");
  EXPECT_EQ(j["spec"]["kind"], "inference");
  EXPECT_GT(j["spec"]["min_runtime"].get<long long>(), 0);

  // Memory pressure: out by one per decision, one cool-down apart, up to the maximum.
  memory("chat", 0.9);
  h->sync();
  h->sync();  // the new replica is submitted and placed
  s = show("chat");
  EXPECT_EQ(s["desired"], 2);
  EXPECT_EQ(count(s, "elastic", "running"), 1) << s.dump();
  ASSERT_EQ(s["decisions"].size(), 1u);
  EXPECT_EQ(s["decisions"][0]["from"], 1);
  EXPECT_EQ(s["decisions"][0]["to"], 2);
  EXPECT_NEAR(s["decisions"][0]["memory"].get<double>(), 0.9, 1e-6);
  EXPECT_NE(s["decisions"][0]["reason"].get<std::string>().find("GPU memory 90%"),
            std::string::npos);
  for (const auto& x : s["replicas"]) {
    if (x["tier"] == "elastic") {
      EXPECT_FALSE(x["allocated"].get<bool>()) << s.dump();
    }
  }
  h->advance(30);
  memory("chat", 0.9);
  h->sync();
  EXPECT_EQ(show("chat")["desired"], 2);  // inside the cool-down
  h->advance(31);
  memory("chat", 0.9);
  h->sync();
  h->sync();
  s = show("chat");
  EXPECT_EQ(s["desired"], 3);
  EXPECT_EQ(s["running"], 3);
  h->advance(61);
  memory("chat", 0.95);
  h->sync();
  EXPECT_EQ(show("chat")["desired"], 3);  // the maximum

  // Between the watermarks nothing changes; below the low one, in: an elastic replica goes.
  h->advance(61);
  memory("chat", 0.5);
  h->sync();
  EXPECT_EQ(show("chat")["desired"], 3);
  memory("chat", 0.1);
  h->sync();
  s = show("chat");
  EXPECT_EQ(s["desired"], 2);
  EXPECT_EQ(count(s, "protected", "running"), 1);
  EXPECT_EQ(count(s, "elastic", "running"), 1);
  ASSERT_EQ(s["decisions"].size(), 3u);
  EXPECT_NE(s["decisions"][2]["reason"].get<std::string>().find("in: GPU memory 10% used"),
            std::string::npos)
      << s["decisions"][2].dump();

  // A replica that ends is replaced.
  ASSERT_EQ(h->post("/api/v1/jobs/" + std::to_string(first) + "/cancel", json::object()).status,
            200);
  h->sync();
  h->sync();
  s = show("chat");
  EXPECT_EQ(count(s, "protected", "running"), 1) << s.dump();
  EXPECT_NE(s["replicas"][0]["job"].get<long long>(), first);

  // Listed; kept across a restart with its decisions and replicas.
  auto l = h->get("/api/v1/services").body["services"];
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0]["running"], 2);
  h->restart();
  h->sync();
  s = show("chat");
  EXPECT_EQ(s["desired"], 2);
  EXPECT_EQ(s["decisions"].size(), 3u);
  EXPECT_EQ(s["replicas"].size(), 2u) << s.dump();

  // Scale: the bounds hold the replicas wanted; delete stops every replica.
  r = h->post("/api/v1/services/chat/scale", {{"max_replicas", 1}, {"min_replicas", 1}});
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["desired"], 1);
  EXPECT_EQ(h->post("/api/v1/services/chat/scale", {{"min_replicas", 5}}).status, 400);
  EXPECT_EQ(h->post("/api/v1/services/chat/scale", {{"bogus", 5}}).status, 400);
  h->sync();
  s = show("chat");
  EXPECT_EQ(s["replicas"].size(), 1u) << s.dump();
  std::vector<long long> jobs;
  for (const auto& x : s["replicas"]) jobs.push_back(x["job"]);
  r = h->call("DELETE", "/api/v1/services/chat");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  for (auto id : jobs) {
    EXPECT_EQ(h->get("/api/v1/jobs/" + std::to_string(id)).body["state"], "cancelled");
  }
  h->sync();
  EXPECT_EQ(h->get("/api/v1/services/chat").status, 404);
  EXPECT_TRUE(h->get("/api/v1/services").body["services"].empty());
  h->restart();
  EXPECT_EQ(h->get("/api/v1/services/chat").status, 404);
}

TEST_F(Services, TheMinimumIsNeverPreemptedTheElasticReplicasAre) {
  h->add_sim_nodes(1);  // 8 GPUs
  auto s = two_running(4);
  // Another budget's funded 4-GPU job on the full node: it preempts the elastic replica, never
  // the protected one.
  json big = {{"idempotency_key", "b1"}, {"budget", "/lab/b"},         {"gpus", 4},
              {"min_runtime", 3600},     {"expected_duration", 86400}, {"command", {"train"}}};
  auto r = h->post("/api/v1/jobs", big);
  ASSERT_EQ(r.status, 201) << r.body.dump();
  for (int i = 0; i < 3; ++i) {
    h->advance(1);  // jobs started at this very second are never victims
    h->sync();
  }
  s = show("chat");
  EXPECT_EQ(count(s, "protected", "running"), 1) << s.dump();
  EXPECT_EQ(count(s, "elastic", "running"), 0) << s.dump();
  EXPECT_EQ(h->get("/api/v1/jobs/" + std::to_string(r.body["id"].get<long long>())).body["state"],
            "running")
      << h->get("/api/v1/jobs/" + std::to_string(r.body["id"].get<long long>()) + "/why").body;
  // The service still wants two: its elastic replica waits for room.
  EXPECT_EQ(s["desired"], 2);
  EXPECT_EQ(s["replicas"].size(), 2u) << s.dump();
}

// A protected replica's contract is renewed when it ends, while the budget can afford it: the
// minimum replicas stay protected for as long as they serve (docs/policy.md §15).
TEST_F(Services, AProtectedReplicasContractIsRenewedWhileItsBudgetCanAffordIt) {
  h->add_sim_nodes(1);
  auto body = service("chat", 1, 1);
  body["job"]["min_runtime"] = 600;
  ASSERT_EQ(h->post("/api/v1/services", body).status, 201);
  h->sync();
  auto s = show("chat");
  ASSERT_EQ(count(s, "protected", "running"), 1) << s.dump();
  const auto id = std::to_string(s["replicas"][0]["job"].get<long long>());
  const auto first = h->get("/api/v1/jobs/" + id).body;
  ASSERT_TRUE(first["allocated"].get<bool>()) << first.dump();
  const auto until = first["protected_until"].get<long long>();
  h->advance(until - h->now() + 1);
  h->sync();
  const auto renewed = h->get("/api/v1/jobs/" + id).body;
  EXPECT_TRUE(renewed["allocated"].get<bool>()) << renewed.dump();
  EXPECT_GE(renewed["protected_until"].get<long long>(), until + 600) << renewed.dump();
  const auto ev = h->get("/api/v1/jobs/" + id + "/events").body.dump();
  EXPECT_NE(ev.find("contract renewed: protected for another 10m"), std::string::npos) << ev;
}

TEST_F(Services, RollingRestartReplacesEachReplicaWithAsManyAvailable) {
  h->add_sim_nodes(1);
  auto s = two_running(1);
  std::set<long long> old;
  for (const auto& x : s["replicas"]) old.insert(x["job"].get<long long>());
  auto r = h->post("/api/v1/services/chat/restart", json::object());
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["restarting"], 2);
  EXPECT_EQ(h->post("/api/v1/services/nope/restart", json::object()).status, 404);
  EXPECT_EQ(h->post("/api/v1/services/chat/restart", {{"now", true}}).status, 400);
  memory("chat", 0.5);  // between the watermarks: no scaling meanwhile
  auto running = [](const json& v) {
    int n = 0;
    for (const auto& x : v["replicas"]) n += x["state"] == "running";
    return n;
  };
  int cycles = 0;
  for (; cycles < 12 && show("chat")["restarting"] != 0; ++cycles) {
    h->advance(1);
    h->sync();
    s = show("chat");
    EXPECT_GE(running(s), 2) << "cycle " << cycles << ": " << s.dump();  // make before break
    EXPECT_LE(s["replicas"].size(), 3u) << s.dump();                     // one new at a time
  }
  s = show("chat");
  EXPECT_EQ(s["restarting"], 0) << s.dump();
  EXPECT_GE(cycles, 2);  // one at a time: not both in one cycle
  EXPECT_EQ(running(s), 2);
  EXPECT_EQ(count(s, "protected", "running"), 1) << s.dump();
  EXPECT_EQ(count(s, "elastic", "running"), 1) << s.dump();
  for (const auto& x : s["replicas"]) EXPECT_FALSE(old.count(x["job"].get<long long>())) << s;
  for (auto id : old) {
    EXPECT_EQ(h->get("/api/v1/jobs/" + std::to_string(id)).body["state"], "cancelled");
  }
  EXPECT_NE(s["decisions"].back()["reason"].get<std::string>().find("rolling restart by"),
            std::string::npos)
      << s.dump();
}

// The replicas a rolling restart set out to replace are kept with the service: a server restarted
// half way through goes on replacing the old ones (without it, they would serve on forever).
TEST_F(Services, ARollingRestartGoesOnAfterTheServerRestarts) {
  h->add_sim_nodes(1);
  auto s = two_running(1);
  std::set<long long> old;
  for (const auto& x : s["replicas"]) old.insert(x["job"].get<long long>());
  ASSERT_EQ(h->post("/api/v1/services/chat/restart", json::object()).status, 200);
  memory("chat", 0.5);             // between the watermarks: no scaling meanwhile
  std::set<long long> left = old;  // old replicas still serving
  for (int cycles = 0; cycles < 6 && left.size() == old.size(); ++cycles) {
    h->advance(1);
    h->sync();  // the first new replica; once it serves, the first old one stops
    left.clear();
    for (auto id : old) {
      if (h->get("/api/v1/jobs/" + std::to_string(id)).body["state"] == "running") left.insert(id);
    }
  }
  ASSERT_EQ(left.size(), old.size() - 1);

  h->restart();
  h->sync();
  for (int cycles = 0; cycles < 12 && show("chat")["restarting"] != 0; ++cycles) {
    memory("chat", 0.5);
    h->advance(1);
    h->sync();
  }
  h->sync();
  s = show("chat");
  ASSERT_EQ(s["restarting"], 0) << s.dump();
  EXPECT_EQ(s["running"], 2) << s.dump();
  for (const auto& x : s["replicas"]) EXPECT_FALSE(old.count(x["job"].get<long long>())) << s;
  for (auto id : old) {
    EXPECT_EQ(h->get("/api/v1/jobs/" + std::to_string(id)).body["state"], "cancelled");
  }
  // Finished, it is no longer kept: another restart of the server replaces nothing.
  for (const auto& rec : h->store().services()) {
    EXPECT_FALSE(json::parse(rec.state_json).contains("replacing")) << rec.state_json;
  }
  h->restart();
  h->sync();
  s = show("chat");
  EXPECT_EQ(s["restarting"], 0) << s.dump();
  EXPECT_EQ(s["running"], 2) << s.dump();
}

TEST_F(Services, AReplicaThatFailsAtOnceIsReplacedAfterABackOff) {
  store::NodeRecord n;  // a real node: its agent (the test) reports what its jobs do
  n.name = "gpu1";
  n.cluster = "local";
  n.model = "H100";
  n.gpus = 8;
  ASSERT_TRUE(h->ctl().register_node(n).ok());
  ASSERT_EQ(h->post("/api/v1/services", service("chat", 1, 1)).status, 201);
  h->sync();
  auto fail_replica = [&] {
    auto s = show("chat");
    EXPECT_EQ(s["replicas"].size(), 1u) << s.dump();
    if (s["replicas"].empty()) return -1LL;
    const auto id = s["replicas"][0]["job"].get<long long>();
    const int run = h->get("/api/v1/jobs/" + std::to_string(id)).body["runs"].get<int>();
    EXPECT_EQ(h->ctl().agent_report("gpu1", id, run, "started", std::nullopt, std::nullopt).error,
              "");
    h->advance(2);
    EXPECT_EQ(h->ctl().agent_report("gpu1", id, run, "exited", 1, std::nullopt).state, "failed");
    return id;
  };
  // The replica's processes see which service they serve.
  auto j =
      h->get("/api/v1/jobs/" + std::to_string(show("chat")["replicas"][0]["job"].get<long long>()));
  EXPECT_EQ(j.body["spec"]["env"]["ALLOT_SERVICE"], "chat") << j.body.dump();
  const auto first = fail_replica();
  h->sync();
  EXPECT_TRUE(show("chat")["replicas"].empty());  // failed within a minute: 5 s back-off
  h->advance(4);
  h->sync();
  EXPECT_TRUE(show("chat")["replicas"].empty());
  h->advance(1);
  h->sync();
  const auto second = fail_replica();
  EXPECT_NE(second, first);
  h->advance(5);  // the second quick failure in a row: 10 s
  h->sync();
  EXPECT_TRUE(show("chat")["replicas"].empty());
  h->advance(5);
  h->sync();
  EXPECT_EQ(show("chat")["replicas"].size(), 1u);
}

TEST_F(Services, ScalesOnTheLoadItReports) {
  h->add_sim_nodes(1);
  auto body = service("asr", 1, 3);
  body["autoscale"]["load_high"] = 100;
  body["autoscale"]["load_low"] = 10;
  ASSERT_EQ(h->post("/api/v1/services", body).status, 201);
  h->sync();
  EXPECT_EQ(h->post("/api/v1/services/asr/load", {{"value", -1}}).status, 400);
  EXPECT_EQ(h->post("/api/v1/services/asr/load", {{"value", 1}, {"x", 1}}).status, 400);
  EXPECT_EQ(h->post("/api/v1/services/nope/load", {{"value", 1}}).status, 404);
  ASSERT_EQ(h->post("/api/v1/services/asr/load", {{"value", 250}}).status, 200);
  h->sync();
  auto s = show("asr");
  EXPECT_EQ(s["desired"], 2);
  ASSERT_EQ(s["decisions"].size(), 1u);
  EXPECT_NE(s["decisions"][0]["reason"].get<std::string>().find("load 250 per replica"),
            std::string::npos)
      << s.dump();
  // A report older than load_max_age is not used.
  h->advance(600);
  h->sync();
  h->sync();
  EXPECT_EQ(show("asr")["desired"], 2);
}

// A service token reports its service's load and can do nothing else: the token handed to the
// replicas never submits, cancels or reads work (docs/api.md, "Roles").
TEST_F(Services, AServiceTokenReportsItsLoadAndNothingElse) {
  h->add_sim_nodes(1);
  ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"members", {"ann"}}}).status, 200);
  const auto ann = h->token("ann", "user");
  const auto bob = h->token("bob", "user");
  auto body = service("asr", 1, 3);
  body["autoscale"]["load_high"] = 100;
  body["autoscale"]["load_low"] = 10;
  ASSERT_EQ(h->post("/api/v1/services", body, ann).status, 201);
  ASSERT_EQ(h->post("/api/v1/services", service("tts", 1, 1), ann).status, 201);
  h->sync();
  // Its owner mints it (subject: herself); someone who may not see the service cannot, and a
  // plain user may mint no other kind of token.
  const json mint = {{"name", "asr-load"}, {"role", "service"}, {"scope", "asr"}};
  EXPECT_EQ(h->post("/api/v1/tokens", mint, bob).status, 404);
  EXPECT_EQ(h->post("/api/v1/tokens", {{"name", "x"}, {"role", "user"}}, ann).status, 403);
  EXPECT_EQ(h->post("/api/v1/tokens", {{"name", "x"}, {"role", "service"}}, ann).status, 400);
  EXPECT_EQ(h->post("/api/v1/tokens", {{"name", "x"}, {"role", "service"}, {"scope", "nope"}}, ann)
                .status,
            404);
  EXPECT_EQ(h->post("/api/v1/tokens",
                    {{"name", "x"}, {"role", "service"}, {"scope", "asr"}, {"subject", "bob"}}, ann)
                .status,
            403);
  auto made = h->post("/api/v1/tokens", mint, ann);
  ASSERT_EQ(made.status, 201) << made.body.dump();
  EXPECT_EQ(made.body["subject"], "ann");
  const auto svc = made.body["token"].get<std::string>();
  // What it may do: report asr's load, which the autoscaler acts on.
  ASSERT_EQ(h->post("/api/v1/services/asr/load", {{"value", 250}}, svc).status, 200);
  h->sync();
  EXPECT_EQ(show("asr")["desired"], 2);
  EXPECT_EQ(h->post("/api/v1/services/asr/load", {{"value", -1}}, svc).status, 400);
  // Nothing else: another service's load, reading, submitting, cancelling, minting.
  auto other = h->post("/api/v1/services/tts/load", {{"value", 1}}, svc);
  EXPECT_EQ(other.status, 403);
  EXPECT_EQ(other.body["error"]["field"], "Authorization");
  EXPECT_EQ(h->get("/api/v1/services/asr", svc).status, 403);
  EXPECT_EQ(h->get("/api/v1/jobs", svc).status, 403);
  EXPECT_EQ(h->get("/api/v1/whoami", svc).status, 403);
  EXPECT_EQ(h->post("/api/v1/jobs", {{"command", {"x"}}, {"budget", "/lab/a"}}, svc).status, 403);
  EXPECT_EQ(h->call("DELETE", "/api/v1/services/asr", nullptr, svc).status, 403);
  EXPECT_EQ(h->post("/api/v1/tokens", mint, svc).status, 403);
  // Its maker lists and revokes it; another user neither sees nor revokes it.
  auto listed = h->get("/api/v1/tokens", ann);
  ASSERT_EQ(listed.status, 200);
  ASSERT_EQ(listed.body["tokens"].size(), 1u) << listed.body.dump();
  const auto id = std::to_string(listed.body["tokens"][0]["id"].get<long long>());
  EXPECT_EQ(h->get("/api/v1/tokens", bob).body["tokens"].size(), 0u);
  EXPECT_EQ(h->call("DELETE", "/api/v1/tokens/" + id, nullptr, bob).status, 404);
  // A service deleted and made again by someone else is not the token's any more.
  ASSERT_EQ(h->call("DELETE", "/api/v1/services/asr", nullptr, ann).status, 200);
  ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b"}, {"members", {"bob"}}}).status, 200);
  auto again = service("asr", 1, 1);
  again["budget"] = "/lab/b";
  ASSERT_EQ(h->post("/api/v1/services", again, bob).status, 201);
  EXPECT_EQ(h->post("/api/v1/services/asr/load", {{"value", 5}}, svc).status, 404);
  // Revoked: refused at once.
  EXPECT_EQ(h->call("DELETE", "/api/v1/tokens/" + id, nullptr, ann).status, 200);
  EXPECT_EQ(h->post("/api/v1/services/asr/load", {{"value", 5}}, svc).status, 401);
}

// A real node whose agent is the test: it reports what the replicas do, and their readiness.
class ReadyServices : public Services {
 protected:
  void SetUp() override {
    Services::SetUp();
    store::NodeRecord n;
    n.name = "gpu1";
    n.cluster = "local";
    n.model = "H100";
    n.gpus = 8;
    ASSERT_TRUE(h->ctl().register_node(n).ok());
    agent_tok = h->token("agent-gpu1", "agent", "gpu1");
  }
  json checked(const std::string& name, int mn, int mx, int ready_timeout = 60) {
    auto b = service(name, mn, mx);
    b["ready_command"] = {"test", "-e", "/srv/up"};
    b["ready_timeout"] = ready_timeout;
    return b;
  }
  // Service "chat" with a check, created and its first replica started: that replica's job.
  long long first_started(int mn, int mx, int ready_timeout) {
    EXPECT_EQ(h->post("/api/v1/services", checked("chat", mn, mx, ready_timeout)).status, 201);
    h->sync();
    start_all("chat");
    return show("chat")["replicas"][0]["job"].get<long long>();
  }
  int run_of(long long id) {
    return h->get("/api/v1/jobs/" + std::to_string(id)).body["runs"].get<int>();
  }
  // The agent says every replica not yet started has started.
  void start_all(const std::string& name) {
    h->sync();                      // the view is published before the cycle places new replicas
    const json shown = show(name);  // not a temporary in the range-for: it would die first
    for (const auto& r : shown["replicas"]) {
      const auto id = r["job"].get<long long>();
      if (h->get("/api/v1/jobs/" + std::to_string(id)).body["state"] != "starting") continue;
      auto x = h->ctl().agent_report("gpu1", id, run_of(id), "started", std::nullopt, std::nullopt);
      EXPECT_EQ(x.error, "");
      EXPECT_EQ(x.state, "running");
    }
    h->sync();
  }
  testing::Reply readiness(long long id, bool ready, const std::string& reason = "") {
    json one = {{"job", id}, {"run", run_of(id)}, {"event", "readiness"}, {"ready", ready}};
    if (!reason.empty()) one["reason"] = reason;
    return h->post("/api/v1/agent/nodes/gpu1/reports", {{"reports", {one}}}, agent_tok);
  }
  json replica(const json& s, long long id) {
    for (const auto& r : s["replicas"]) {
      if (r["job"].get<long long>() == id) return r;
    }
    return json();
  }
  std::string agent_tok;
};

TEST_F(ReadyServices, AReplicaServesOnlyOnceItsAgentSaysItIsReady) {
  ASSERT_EQ(h->post("/api/v1/services", checked("chat", 1, 1)).status, 201);
  h->sync();
  start_all("chat");
  auto s = show("chat");
  ASSERT_EQ(s["replicas"].size(), 1u) << s.dump();
  const auto id = s["replicas"][0]["job"].get<long long>();
  EXPECT_EQ(s["running"], 1);
  EXPECT_EQ(s["ready"], 0) << s.dump();
  EXPECT_FALSE(s["replicas"][0]["ready"].get<bool>());
  EXPECT_TRUE(s["replicas"][0]["ready_check"].get<bool>());
  EXPECT_EQ(s["replicas"][0]["ready_reason"], "no check reported yet");
  // The agent gets the check with the replica's assignment, and what the server knows (nothing).
  auto a = h->get("/api/v1/agent/nodes/gpu1/assignments", agent_tok).body;
  ASSERT_EQ(a["run"].size(), 1u) << a.dump();
  EXPECT_EQ(a["run"][0]["ready_check"]["command"], json({"test", "-e", "/srv/up"}));
  EXPECT_EQ(a["run"][0]["ready_check"]["interval_seconds"], 3);
  EXPECT_EQ(a["run"][0]["ready_check"]["timeout_seconds"], 5);
  EXPECT_TRUE(a["run"][0]["ready"].is_null());

  // Reports are validated before any is applied.
  auto bad = [&](json one, const std::string& field) {
    auto r = h->post("/api/v1/agent/nodes/gpu1/reports", {{"reports", {one}}}, agent_tok);
    EXPECT_EQ(r.status, 400) << one.dump() << " -> " << r.body.dump();
    EXPECT_EQ(r.body["error"]["field"], field) << r.body.dump();
  };
  const int run = run_of(id);
  bad({{"job", id}, {"run", run}, {"event", "readiness"}}, "reports[0].ready");
  bad({{"job", id}, {"run", run}, {"event", "readiness"}, {"ready", "yes"}}, "reports[0].ready");
  bad({{"job", id}, {"run", run}, {"event", "started"}, {"ready", true}}, "reports[0].ready");
  bad({{"job", id},
       {"run", run},
       {"event", "readiness"},
       {"ready", false},
       {"reason", std::string(257, 'x')}},
      "reports[0].reason");
  bad({{"job", id}, {"run", run}, {"event", "readiness"}, {"ready", true}, {"why", "x"}},
      "reports[0].why");
  EXPECT_EQ(show("chat")["ready"], 0);

  auto r = readiness(id, false, "ready_command exited with code 1");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["results"][0]["state"], "running") << r.body.dump();
  h->sync();
  s = show("chat");
  EXPECT_EQ(s["ready"], 0);
  EXPECT_EQ(s["replicas"][0]["ready_reason"], "ready_command exited with code 1") << s.dump();
  a = h->get("/api/v1/agent/nodes/gpu1/assignments", agent_tok).body;
  EXPECT_EQ(a["run"][0]["ready"], false) << a.dump();

  h->advance(7);
  ASSERT_EQ(readiness(id, true).status, 200);
  h->sync();
  s = show("chat");
  EXPECT_EQ(s["ready"], 1) << s.dump();
  EXPECT_TRUE(s["replicas"][0]["ready"].get<bool>());
  EXPECT_EQ(s["replicas"][0]["ready_since"], h->now());
  EXPECT_EQ(h->get("/api/v1/services").body["services"][0]["ready"], 1);
  a = h->get("/api/v1/agent/nodes/gpu1/assignments", agent_tok).body;
  EXPECT_EQ(a["run"][0]["ready"], true) << a.dump();

  // Another run, or a job without a check, is refused in its result.
  r = h->post(
      "/api/v1/agent/nodes/gpu1/reports",
      {{"reports", {{{"job", id}, {"run", run + 1}, {"event", "readiness"}, {"ready", true}}}}},
      agent_tok);
  EXPECT_EQ(r.body["results"][0]["error"], "stale run") << r.body.dump();
  // Not kept in the store: after a restart the server knows nothing, and says so to the agent.
  h->restart();
  h->sync();
  s = show("chat");
  EXPECT_EQ(s["running"], 1) << s.dump();
  EXPECT_EQ(s["ready"], 0) << s.dump();
  a = h->get("/api/v1/agent/nodes/gpu1/assignments", agent_tok).body;
  EXPECT_TRUE(a["run"][0]["ready"].is_null()) << a.dump();
  ASSERT_EQ(readiness(id, true).status, 200);
  h->sync();
  EXPECT_EQ(show("chat")["ready"], 1);
}

TEST_F(ReadyServices, ServicesWithoutACheckServeOnceRunningAndRefuseReadiness) {
  ASSERT_EQ(h->post("/api/v1/services", service("chat", 1, 1)).status, 201);
  h->sync();
  start_all("chat");
  auto s = show("chat");
  EXPECT_EQ(s["ready"], 1) << s.dump();
  EXPECT_FALSE(s["replicas"][0]["ready_check"].get<bool>());
  const auto id = s["replicas"][0]["job"].get<long long>();
  auto a = h->get("/api/v1/agent/nodes/gpu1/assignments", agent_tok).body;
  EXPECT_FALSE(a["run"][0].contains("ready_check")) << a.dump();
  auto r = readiness(id, false);
  EXPECT_NE(r.body["results"][0]["error"].get<std::string>().find("no readiness check"),
            std::string::npos)
      << r.body.dump();
}

TEST_F(ReadyServices, RollingRestartStopsAnOldReplicaOnlyOnceItsReplacementIsReady) {
  ASSERT_EQ(h->post("/api/v1/services", checked("chat", 1, 1)).status, 201);
  h->sync();
  start_all("chat");
  const auto old = show("chat")["replicas"][0]["job"].get<long long>();
  ASSERT_EQ(readiness(old, true).status, 200);
  h->sync();
  ASSERT_EQ(h->post("/api/v1/services/chat/restart", json::object()).status, 200);
  h->sync();
  auto s = show("chat");
  ASSERT_EQ(s["replicas"].size(), 2u) << s.dump();
  long long fresh = 0;
  for (const auto& r : s["replicas"]) {
    if (!r["replacing"].get<bool>()) fresh = r["job"].get<long long>();
  }
  ASSERT_NE(fresh, 0) << s.dump();
  // The new one runs but is not ready: the old one keeps serving, cycle after cycle.
  start_all("chat");
  ASSERT_EQ(readiness(fresh, false, "warming up").status, 200);
  for (int i = 0; i < 5; ++i) {
    h->advance(1);
    h->sync();
    s = show("chat");
    EXPECT_EQ(replica(s, old)["state"], "running") << "cycle " << i << ": " << s.dump();
    EXPECT_EQ(s["ready"], 1) << s.dump();
    EXPECT_EQ(s["replicas"].size(), 2u) << s.dump();
  }
  // Ready: now the old one goes.
  ASSERT_EQ(readiness(fresh, true).status, 200);
  h->sync();
  h->sync();
  s = show("chat");
  EXPECT_EQ(s["restarting"], 0) << s.dump();
  ASSERT_EQ(s["replicas"].size(), 1u) << s.dump();
  EXPECT_EQ(s["replicas"][0]["job"], fresh);
  EXPECT_EQ(h->get("/api/v1/jobs/" + std::to_string(old)).body["state"], "cancelled");
}

TEST_F(ReadyServices, TheAutoscalerCountsAndMeasuresReadyReplicasOnly) {
  const auto first = first_started(1, 3, 600);
  json gpus = json::array();
  for (int g = 0; g < 8; ++g) {
    gpus.push_back({{"index", g}, {"mem_used_mib", 72000}, {"mem_total_mib", 80000}});
  }
  h->ctl().set_node_telemetry("gpu1", json{{"time", h->now()}, {"gpus", gpus}}.dump());
  h->sync();
  // Memory is high, but no replica serves: nothing is measured, nothing decided.
  auto s = show("chat");
  EXPECT_EQ(s["desired"], 1) << s.dump();
  EXPECT_TRUE(s["memory"].is_null()) << s.dump();
  ASSERT_EQ(readiness(first, true).status, 200);
  h->advance(1);  // the autoscaler reads its figures once a second
  h->ctl().set_node_telemetry("gpu1", json{{"time", h->now()}, {"gpus", gpus}}.dump());
  h->sync();
  h->sync();
  s = show("chat");
  EXPECT_EQ(s["desired"], 2) << s.dump();
  start_all("chat");
  // The second replica runs but is not ready: the next scale-out waits for it.
  h->advance(40);
  h->ctl().contact("gpu1");  // a node silent too long goes down
  h->advance(21);
  h->ctl().contact("gpu1");
  h->ctl().set_node_telemetry("gpu1", json{{"time", h->now()}, {"gpus", gpus}}.dump());
  h->sync();
  s = show("chat");
  EXPECT_EQ(s["running"], 2) << s.dump();
  EXPECT_EQ(s["ready"], 1) << s.dump();
  EXPECT_EQ(s["desired"], 2) << s.dump();
}

TEST_F(ReadyServices, AReplicaNeverReadyWithinItsTimeoutIsRestartedAndTheDecisionSaysWhy) {
  const auto first = first_started(1, 1, 30);
  ASSERT_EQ(readiness(first, false, "ready_command exited with code 1").status, 200);
  // Time passes; the node's agent keeps in touch.
  auto pass = [&](int seconds) {
    for (; seconds > 0; seconds -= 10) {
      h->advance(std::min(seconds, 10));
      h->ctl().contact("gpu1");
      h->sync();
    }
  };
  pass(29);
  EXPECT_EQ(h->get("/api/v1/jobs/" + std::to_string(first)).body["state"], "running");
  pass(1);
  EXPECT_EQ(h->get("/api/v1/jobs/" + std::to_string(first)).body["state"], "cancelled");
  h->sync();
  auto s = show("chat");
  ASSERT_EQ(s["replicas"].size(), 1u) << s.dump();
  EXPECT_NE(s["replicas"][0]["job"], first);
  ASSERT_FALSE(s["decisions"].empty());
  const auto why = s["decisions"].back()["reason"].get<std::string>();
  EXPECT_NE(why.find("restart: replica " + std::to_string(first) + " not ready within 30s"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("last check: ready_command exited with code 1"), std::string::npos) << why;
  // A replica that was ready once and then not is not restarted for it.
  start_all("chat");
  const auto second = show("chat")["replicas"][0]["job"].get<long long>();
  ASSERT_EQ(readiness(second, true).status, 200);
  h->advance(1);
  ASSERT_EQ(readiness(second, false, "overloaded").status, 200);
  pass(60);
  EXPECT_EQ(h->get("/api/v1/jobs/" + std::to_string(second)).body["state"], "running");
}

}  // namespace
}  // namespace allot::server
