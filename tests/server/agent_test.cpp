// The server side of docs/agent-protocol.md over real HTTP, real SQLite and the scheduling loop on
// a test clock: job spec fields for the agent, registration, leases and node timeouts,
// assignments, reports (runs, lost, gangs), telemetry and logs.
#include <gtest/gtest.h>

#include <filesystem>

#include "harness.h"
#include "server/logs.h"
#include "server/telemetry.h"

namespace allot::server {
namespace {

using testing::Harness;
using testing::job;
using testing::json;
using testing::Reply;
using testing::TempDir;

class Agent : public ::testing::Test {
 protected:
  void SetUp() override { open(); }
  void open(ControllerOptions o = {}) {
    h.reset();
    h = std::make_unique<Harness>(dir.file("allot.db"), ApiOptions{}, 1'000'000, o);
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"members", {"ann"}}}).status, 200);
  }
  // Registers `name` as its agent would and returns the agent's token.
  std::string node(const std::string& name, const std::string& address = "",
                   const std::string& block = "") {
    json body = {{"name", name}, {"cluster", "c1"}, {"model", "H100"}, {"gpus", 8}};
    if (!address.empty()) body["address"] = address;
    if (!block.empty()) body["block"] = block;
    auto tok = h->token("agent-" + name, "agent", name);
    auto r = h->post("/api/v1/nodes", body, tok);
    EXPECT_EQ(r.status, 201) << r.body.dump();
    return tok;
  }
  Reply assignments(const std::string& name, const std::string& tok) {
    return h->get("/api/v1/agent/nodes/" + name + "/assignments", tok);
  }
  Reply report(const std::string& name, const std::string& tok, const json& one) {
    return h->post("/api/v1/agent/nodes/" + name + "/reports", {{"reports", {one}}}, tok);
  }
  std::string state(JobId id) {
    return h->get("/api/v1/jobs/" + std::to_string(id)).body["state"].get<std::string>();
  }
  // A job of 8 GPUs on each of 2 nodes, placed (the loop has run).
  JobId submit_gang(const std::string& key) {
    auto b = job(key, "/lab/a", 8);
    b["nodes"] = 2;
    const auto id = submit(b);
    h->sync();
    return id;
  }
  JobId submit(json body) {
    auto r = h->post("/api/v1/jobs", body);
    EXPECT_EQ(r.status, 201) << r.body.dump();
    return r.body.value("id", JobId{0});
  }
  TempDir dir;
  std::unique_ptr<Harness> h;
};

TEST_F(Agent, JobSpecFieldsForTheAgentAreValidatedAndKept) {
  auto body = job("e1", "/lab/a", 2);
  body["env"] = {{"SEED", "1"}, {"_x9", ""}};
  body["workdir"] = "/home/ann/exp";
  body["memory_mib"] = 65536;
  body["cpus"] = 16;
  body["container"] = "nvcr.io/nvidia/pytorch:24.05-py3";
  auto r = h->post("/api/v1/jobs", body);
  ASSERT_EQ(r.status, 201) << r.body.dump();
  EXPECT_EQ(r.body["spec"]["env"]["SEED"], "1");
  EXPECT_EQ(r.body["spec"]["workdir"], "/home/ann/exp");
  EXPECT_EQ(r.body["spec"]["memory_mib"], 65536);
  EXPECT_EQ(r.body["spec"]["cpus"], 16);
  EXPECT_EQ(r.body["spec"]["container"], "nvcr.io/nvidia/pytorch:24.05-py3");
  // The same request again is the same job (canonical form is stable).
  EXPECT_EQ(h->post("/api/v1/jobs", body).status, 200);
  // A spec without them has none of the new keys: specs stored before stay what a resubmit
  // makes.
  auto plain = h->post("/api/v1/jobs", job("e2"));
  ASSERT_EQ(plain.status, 201);
  for (const char* k : {"env", "workdir", "memory_mib", "cpus", "container"}) {
    EXPECT_FALSE(plain.body["spec"].contains(k)) << k;
  }
  auto frac = job("e3");
  frac["cpus"] = 2.5;
  EXPECT_EQ(h->post("/api/v1/jobs", frac).body["spec"]["cpus"], 2.5);

  struct Case {
    json extra;
    std::string field;
  };
  std::string long_value(4097, 'v');
  json many = json::object();
  for (int i = 0; i < 65; ++i) many["V" + std::to_string(i)] = "x";
  const std::vector<Case> cases = {
      {{{"env", {{"ALLOT_JOB_ID", "3"}}}}, "env.ALLOT_JOB_ID"},
      {{{"env", {{"CUDA_VISIBLE_DEVICES", "0"}}}}, "env.CUDA_VISIBLE_DEVICES"},
      {{{"env", {{"NVIDIA_VISIBLE_DEVICES", "all"}}}}, "env.NVIDIA_VISIBLE_DEVICES"},
      {{{"env", {{"9LIVES", "x"}}}}, "env.9LIVES"},
      {{{"env", {{"A-B", "x"}}}}, "env.A-B"},
      {{{"env", {{std::string(129, 'A'), "x"}}}}, "env."},
      {{{"env", {{"A", 1}}}}, "env.A"},
      {{{"env", {{"A", long_value}}}}, "env.A"},
      {{{"env", many}}, "env"},
      {{{"env", json::array()}}, "env"},
      {{{"workdir", "relative/dir"}}, "workdir"},
      {{{"workdir", "/" + std::string(1024, 'd')}}, "workdir"},
      {{{"memory_mib", -1}}, "memory_mib"},
      {{{"memory_mib", 16LL * 1024 * 1024 + 1}}, "memory_mib"},
      {{{"memory_mib", "64G"}}, "memory_mib"},
      {{{"cpus", 1025}}, "cpus"},
      {{{"cpus", -1}}, "cpus"},
      {{{"cpus", "16"}}, "cpus"},
      {{{"container", std::string(513, 'i')}}, "container"},
      {{{"container", "two words"}}, "container"},
  };
  const auto before = h->store().count_jobs();
  int n = 0;
  for (const auto& c : cases) {
    auto b = job("bad" + std::to_string(++n));
    for (const auto& [k, v] : c.extra.items()) b[k] = v;
    auto rep = h->post("/api/v1/jobs", b);
    EXPECT_EQ(rep.status, 400) << c.extra.dump();
    EXPECT_EQ(rep.body["error"]["field"].get<std::string>().rfind(c.field, 0), 0u)
        << c.extra.dump() << " -> " << rep.body.dump();
    EXPECT_FALSE(rep.body["error"]["reason"].get<std::string>().empty());
  }
  EXPECT_EQ(h->store().count_jobs(), before);
  // Limits are inclusive.
  auto edge = job("edge");
  edge["memory_mib"] = 16LL * 1024 * 1024;
  edge["cpus"] = 1024;
  edge["workdir"] = "/" + std::string(1023, 'd');
  EXPECT_EQ(h->post("/api/v1/jobs", edge).status, 201);
}

TEST_F(Agent, RegistrationKeepsWhatTheAgentTellsAndUpdatesIt) {
  auto tok = h->token("agent-n1", "agent", "n1");
  json body = {{"name", "n1"},
               {"cluster", "c1"},
               {"model", "H100"},
               {"gpus", 2},
               {"address", "10.0.0.1"},
               {"labels", {{"ib", "ndr"}}},
               {"devices",
                {{{"index", 0},
                  {"uuid", "GPU-aaa"},
                  {"name", "NVIDIA H100 80GB HBM3"},
                  {"memory_mib", 81559},
                  {"pci_bus_id", "00000000:18:00.0"},
                  {"mig", {{{"uuid", "MIG-1"}, {"profile", "1g.10gb"}, {"milli", 142}}}}},
                 {{"index", 1}, {"uuid", "GPU-bbb"}, {"memory_mib", 81559}}}},
               {"agent", {{"version", "0.1.0"}, {"backend", "fake"}, {"isolation", "none"}}}};
  auto r = h->post("/api/v1/nodes", body, tok);
  ASSERT_EQ(r.status, 201) << r.body.dump();
  EXPECT_EQ(r.body["lease_seconds"], 30);
  EXPECT_EQ(r.body["address"], "10.0.0.1");
  EXPECT_EQ(r.body["devices"][0]["mig"][0]["profile"], "1g.10gb");
  EXPECT_EQ(r.body["agent"]["backend"], "fake");
  // Again with the same shape: accepted, and what changed is kept.
  body["address"] = "10.0.0.9:22";
  body["agent"]["version"] = "0.2.0";
  body["agent"]["achieved"] = {{"jobs_as_owner", true},
                               {"cgroup_limits", false},
                               {"cgroup_why_not", "no cgroup v2 mounted"},
                               {"gpu_devices", "none"}};
  body["devices"] = json::array();
  r = h->post("/api/v1/nodes", body, tok);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  auto g = h->get("/api/v1/nodes/n1", tok);
  ASSERT_EQ(g.status, 200);
  EXPECT_EQ(g.body["address"], "10.0.0.9:22");
  EXPECT_EQ(g.body["agent"]["version"], "0.2.0");
  EXPECT_EQ(g.body["agent"]["achieved"], body["agent"]["achieved"]);
  EXPECT_TRUE(g.body["devices"].empty());
  EXPECT_TRUE(g.body["telemetry"].is_null());
  // Survives a restart (it is in the store, not only in memory).
  h->restart();
  EXPECT_EQ(h->get("/api/v1/nodes/n1", tok).body["agent"]["version"], "0.2.0");
  // Another shape is a conflict that names it.
  body["gpus"] = 4;
  r = h->post("/api/v1/nodes", body, tok);
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.body["error"]["field"], "name");
  body["gpus"] = 2;
  // Malformed agent fields: 400 naming the field, nothing changes.
  struct Case {
    json patch;
    std::string field;
  };
  const std::vector<Case> cases = {
      {{{"address", "10.0.0.1 ; rm"}}, "address"},
      {{{"address", std::string(256, 'a')}}, "address"},
      {{{"devices", {{{"index", 0}, {"colour", "red"}}}}}, "devices[0].colour"},
      {{{"devices", {{{"uuid", "x"}}}}}, "devices[0].index"},
      {{{"devices", {{{"index", 64}}}}}, "devices[0].index"},
      {{{"devices", {{{"index", 0}, {"mig", {{{"profile", "1g"}}}}}}}}, "devices[0].mig[0].milli"},
      {{{"devices", json::array({1})}}, "devices[0]"},
      {{{"agent", {{"version", 1}}}}, "agent.version"},
      {{{"agent", {{"kernel", "6.1"}}}}, "agent.kernel"},
      {{{"agent", "x"}}, "agent"},
      {{{"agent", {{"achieved", {{"jobs_as_owner", "yes"}}}}}}, "agent.achieved.jobs_as_owner"},
      {{{"agent", {{"achieved", {{"jobs_as_owner", true}}}}}}, "agent.achieved.cgroup_limits"},
      {{{"agent",
         {{"achieved",
           {{"jobs_as_owner", true}, {"cgroup_limits", true}, {"gpu_devices", "bpf"}}}}}},
       "agent.achieved.gpu_devices"},
      {{{"agent", {{"achieved", {{"root", true}}}}}}, "agent.achieved.root"},
  };
  for (const auto& c : cases) {
    auto b = body;
    for (const auto& [k, v] : c.patch.items()) b[k] = v;
    auto rep = h->post("/api/v1/nodes", b, tok);
    EXPECT_EQ(rep.status, 400) << c.patch.dump();
    EXPECT_EQ(rep.body["error"]["field"], c.field) << c.patch.dump() << " -> " << rep.body.dump();
  }
  EXPECT_EQ(h->get("/api/v1/nodes/n1", tok).body["address"], "10.0.0.9:22");
  // The list carries the same fields.
  auto l = h->get("/api/v1/nodes");
  ASSERT_EQ(l.body["nodes"].size(), 1u);
  EXPECT_EQ(l.body["nodes"][0]["agent"]["version"], "0.2.0");
}

// Found by fuzz_agent_messages: a GPU count past 2^32 was narrowed before its range check.
TEST_F(Agent, RegistrationRefusesAGpuCountPast32Bits) {
  auto tok = h->token("agent-w1", "agent", "w1");
  auto r =
      h->post("/api/v1/nodes", {{"name", "w1"}, {"model", "H100"}, {"gpus", 4294967304LL}}, tok);
  EXPECT_EQ(r.status, 400) << r.body.dump();
  EXPECT_EQ(r.body["error"]["field"], "gpus");
}

// docs/policy.md §6 and §9: a session inside its owner's interactive allowance says so when it
// starts; any stop of an interactive job comes with a notice before the SIGTERM.
TEST_F(Agent, InteractiveSessionsAreProtectedAndWarnedBeforeAStop) {
  ControllerOptions on;  // the rules are off by default (docs/design/0010): the measured setting
  on.policy.interactive_gpus_per_user = 8;
  on.policy.interactive_stop_grace = 300;
  open(on);
  auto t1 = node("n1");
  auto inside = job("notebook", "/lab/a", 4);
  inside["kind"] = "interactive";
  inside["min_runtime"] = 3600;
  const auto protected_id = submit(inside);
  auto free = job("shell", "/lab/a", 4);
  free["kind"] = "interactive";
  free["min_runtime"] = 0;
  const auto free_id = submit(free);
  h->sync();
  auto ev = h->get("/api/v1/jobs/" + std::to_string(protected_id) + "/events").body["events"];
  const std::string started = ev.back()["reason"];
  EXPECT_NE(started.find("interactive allowance: neither demoted nor preempted for 8h"),
            std::string::npos)
      << started;
  // A drain stops the unprotected one at once (minimum runtime 0), with notice.
  ASSERT_EQ(h->post("/api/v1/nodes/n1/drain", json::object()).status, 200);
  h->sync();
  EXPECT_EQ(state(free_id), "preempting");
  EXPECT_NE(state(protected_id), "preempting") << "drained at its contract, not before";
  auto a = assignments("n1", t1);
  ASSERT_EQ(a.body["stop"].size(), 1u) << a.body.dump();
  EXPECT_EQ(a.body["stop"][0],
            json({{"job", free_id}, {"run", 1}, {"grace_seconds", 30}, {"notice_seconds", 270}}));
  ev = h->get("/api/v1/jobs/" + std::to_string(free_id) + "/events").body["events"];
  const std::string stopping = ev.back()["reason"];
  EXPECT_NE(stopping.find("warned now ($ALLOT_STOP_NOTICE), will be stopped 270 s after this "
                          "event (SIGTERM"),
            std::string::npos)
      << stopping;
}

TEST_F(Agent, AssignmentsCarryTheWholeRunAndGangRendezvous) {
  auto t1 = node("n1", "10.0.0.1:22", "b1");
  auto t2 = node("n2", "10.0.0.2", "b1");
  auto body = job("gang", "/lab/a", 8);
  body["nodes"] = 2;
  body["name"] = "train";
  body["command"] = {"python", "train.py"};
  body["env"] = {{"SEED", "7"}};
  body["workdir"] = "/home/ann";
  body["memory_mib"] = 1024;
  body["cpus"] = 4;
  body["resumable"] = true;
  body["kind"] = "batch";
  const auto id = submit(body);
  h->sync();
  auto a1 = assignments("n1", t1);
  auto a2 = assignments("n2", t2);
  ASSERT_EQ(a1.status, 200) << a1.body.dump();
  EXPECT_EQ(a1.body["lease_seconds"], 30);
  EXPECT_EQ(a1.body["server_time"], h->now());
  ASSERT_EQ(a1.body["run"].size(), 1u);
  ASSERT_EQ(a2.body["run"].size(), 1u);
  const auto& r1 = a1.body["run"][0];
  const auto& r2 = a2.body["run"][0];
  EXPECT_EQ(r1["job"], id);
  EXPECT_EQ(r1["run"], 1);
  EXPECT_EQ(r1["state"], "starting");
  EXPECT_EQ(r1["gpus"].size(), 8u);
  EXPECT_EQ(r1["gpu_milli"], 1000);
  EXPECT_EQ(r1["command"], json({"python", "train.py"}));
  EXPECT_EQ(r1["env"]["SEED"], "7");
  EXPECT_EQ(r1["workdir"], "/home/ann");
  EXPECT_EQ(r1["memory_mib"], 1024);
  EXPECT_EQ(r1["cpus"], 4);
  EXPECT_EQ(r1["container"], "");
  EXPECT_EQ(r1["owner"], "root");
  EXPECT_EQ(r1["budget"], "/lab/a");
  EXPECT_EQ(r1["name"], "train");
  EXPECT_EQ(r1["kind"], "batch");
  EXPECT_EQ(r1["resumable"], true);
  EXPECT_EQ(r1["grace_seconds"], 30);
  // Ranks follow the placement; both nodes see the same gang and rendezvous.
  EXPECT_EQ(r1["nodes"], r2["nodes"]);
  ASSERT_EQ(r1["nodes"].size(), 2u);
  EXPECT_NE(r1["rank"], r2["rank"]);
  const std::string rank0 = r1["nodes"][0];
  const std::string host = rank0 == "n1" ? "10.0.0.1" : "10.0.0.2";  // without n1's :22
  const std::string port = std::to_string(20000 + id % 10000);
  EXPECT_EQ(r1["rendezvous"], host + ":" + port);
  EXPECT_EQ(r2["rendezvous"], host + ":" + port);
  EXPECT_EQ((rank0 == "n1" ? r1 : r2)["rank"], 0);
  // An unknown query parameter is refused; another node's assignments are not this agent's.
  EXPECT_EQ(h->get("/api/v1/agent/nodes/n1/assignments?x=1", t1).status, 400);
  EXPECT_EQ(assignments("n1", t2).status, 403);
  EXPECT_EQ(h->get("/api/v1/agent/nodes/zz/assignments").status, 404);

  // A drain stops it: both nodes get a stop with the run and the grace; the GPUs are given back
  // only once both have stopped.
  ASSERT_EQ(h->post("/api/v1/nodes/n1/drain", json::object()).status, 200);
  h->sync();
  EXPECT_EQ(state(id), "preempting");
  a1 = assignments("n1", t1);
  a2 = assignments("n2", t2);
  EXPECT_TRUE(a1.body["run"].empty());
  ASSERT_EQ(a1.body["stop"].size(), 1u);
  EXPECT_EQ(a1.body["stop"][0], json({{"job", id}, {"run", 1}, {"grace_seconds", 30}}));
  ASSERT_EQ(a2.body["stop"].size(), 1u);
  auto r = report("n1", t1, {{"job", id}, {"run", 1}, {"event", "preempted"}});
  EXPECT_EQ(r.body["results"][0]["state"], "preempting");
  h->sync();
  EXPECT_TRUE(assignments("n1", t1).body["stop"].empty());
  EXPECT_EQ(assignments("n2", t2).body["stop"].size(), 1u);
  r = report("n2", t2,
             {{"job", id}, {"run", 1}, {"event", "exited"}, {"exit_code", 143}, {"signal", 15}});
  EXPECT_EQ(r.body["results"][0]["state"], "requeued") << r.body.dump();
  // A late report about run 1 changes nothing.
  r = report("n2", t2, {{"job", id}, {"run", 1}, {"event", "preempted"}});
  EXPECT_EQ(r.body["results"][0]["state"], "requeued");
  EXPECT_EQ(state(id), "requeued");
}

TEST_F(Agent, ReportsAreAboutOneRunAndLostRequeues) {
  auto t1 = node("n1");
  auto body = job("r", "/lab/a", 8);
  body["resumable"] = true;
  const auto id = submit(body);
  h->sync();
  ASSERT_EQ(state(id), "starting");
  // Validation before anything: run is required, events and codes are checked.
  auto bad = [&](const json& one, const std::string& field) {
    auto r = report("n1", t1, one);
    EXPECT_EQ(r.status, 400) << one.dump();
    EXPECT_EQ(r.body["error"]["field"], field) << one.dump() << " -> " << r.body.dump();
  };
  bad({{"job", id}, {"event", "started"}}, "reports[0].run");
  bad({{"job", id}, {"run", 0}, {"event", "started"}}, "reports[0].run");
  bad({{"job", id}, {"run", 1}, {"event", "exited"}}, "reports[0].exit_code");
  bad({{"job", id}, {"run", 1}, {"event", "exited"}, {"exit_code", 1}, {"signal", 0}},
      "reports[0].signal");
  bad({{"job", id}, {"run", 1}, {"event", "started"}, {"colour", 1}}, "reports[0].colour");
  bad({{"job", -1}, {"run", 1}, {"event", "started"}}, "reports[0].job");
  EXPECT_EQ(state(id), "starting");

  auto r = report("n1", t1, {{"job", id}, {"run", 2}, {"event", "started"}});
  EXPECT_EQ(r.body["results"][0], json({{"job", id}, {"error", "stale run"}}));
  EXPECT_EQ(state(id), "starting");
  r = report("n1", t1, {{"job", id}, {"run", 1}, {"event", "started"}});
  EXPECT_EQ(r.body["results"][0]["state"], "running");
  r = report("n1", t1, {{"job", id}, {"run", 1}, {"event", "started"}});  // idempotent
  EXPECT_EQ(r.body["results"][0]["state"], "running");
  h->advance(60);
  // The agent restarted and no longer has it: lost, requeued (resumable), charged up to now.
  r = report("n1", t1, {{"job", id}, {"run", 1}, {"event", "lost"}});
  EXPECT_EQ(r.body["results"][0]["state"], "requeued") << r.body.dump();
  EXPECT_EQ(h->store().ledger_for_job(id).at(0).milli_seconds(), 8000 * 60);
  h->sync();
  EXPECT_EQ(state(id), "starting");
  auto a = assignments("n1", t1);
  ASSERT_EQ(a.body["run"].size(), 1u);
  EXPECT_EQ(a.body["run"][0]["run"], 2);
  // The old run's exit does not end the new one.
  r = report("n1", t1, {{"job", id}, {"run", 1}, {"event", "exited"}, {"exit_code", 1}});
  EXPECT_EQ(r.body["results"][0]["error"], "stale run");
  EXPECT_EQ(state(id), "starting");
  r = report("n1", t1,
             {{"job", id}, {"run", 2}, {"event", "exited"}, {"exit_code", 137}, {"signal", 9}});
  EXPECT_EQ(r.body["results"][0]["state"], "failed");
  auto ev = h->get("/api/v1/jobs/" + std::to_string(id) + "/events").body["events"];
  EXPECT_NE(ev.back()["reason"].get<std::string>().find("signal 9"), std::string::npos)
      << ev.dump();
  // Repeating the final report changes nothing.
  r = report("n1", t1, {{"job", id}, {"run", 2}, {"event", "exited"}, {"exit_code", 137}});
  EXPECT_EQ(r.body["results"][0]["state"], "failed");

  // A job that is not resumable ends as preempted when lost.
  const auto id2 = submit(job("r2", "/lab/a", 8));
  h->sync();
  r = report("n1", t1, {{"job", id2}, {"run", 1}, {"event", "lost"}});
  EXPECT_EQ(r.body["results"][0]["state"], "preempted");
  EXPECT_EQ(
      report("n1", t1, {{"job", 999}, {"run", 1}, {"event", "lost"}}).body["results"][0]["error"],
      "not a job on node n1");

  // The earlier run's last bytes still come from the node that held it (recorded when it
  // started); a node that never held it may not write them.
  auto t2 = node("n2");
  auto up = [&](const std::string& n, const std::string& tok) {
    return h->raw("POST",
                  "/api/v1/agent/nodes/" + n + "/logs?job=" + std::to_string(id) +
                      "&run=1&stream=stdout&offset=0",
                  "last words\n", tok);
  };
  EXPECT_EQ(up("n1", t1).status, 200);
  auto forged = up("n2", t2);
  EXPECT_EQ(forged.status, 403) << forged.body.dump();
  EXPECT_EQ(forged.body["error"]["field"], "job");
  // A job that does not exist answers the same: the agent learns nothing of other jobs.
  auto ghost = h->raw("POST", "/api/v1/agent/nodes/n2/logs?job=999999&run=1&stream=stdout&offset=0",
                      "x", t2);
  EXPECT_EQ(ghost.status, 403);
  EXPECT_EQ(ghost.body["error"]["reason"], "job 999999 run 1 is not on node n2");
  EXPECT_EQ(forged.body["error"]["reason"],
            "job " + std::to_string(id) + " run 1 is not on node n2");
  // Nor do reports tell another node a job's state.
  EXPECT_EQ(report("n2", t2, {{"job", id}, {"run", 2}, {"event", "lost"}}).body["results"][0],
            json({{"job", id}, {"error", "not a job on node n2"}}));
}

// Agents write under a current lease: a node may upload a run's logs and report on it while it
// holds the run, and for agent_write_grace_seconds (300) after the run ended; later, the same
// 403 (logs) or error (reports) as for a run it never held, and nothing is written.
TEST_F(Agent, UploadsForARunEndedPastTheGraceAreRefused) {
  auto t1 = node("n1");
  const auto id = submit(job("g1", "/lab/a", 8));
  h->sync();
  auto up = [&](const std::string& text, std::int64_t offset) {
    return h->raw("POST",
                  "/api/v1/agent/nodes/n1/logs?job=" + std::to_string(id) +
                      "&run=1&stream=stdout&offset=" + std::to_string(offset),
                  text, t1);
  };
  // Held: starting, then running.
  EXPECT_EQ(up("one\n", 0).status, 200);
  report("n1", t1, {{"job", id}, {"run", 1}, {"event", "started"}});
  h->advance(60);
  EXPECT_EQ(up("two\n", 4).status, 200);
  auto r = report("n1", t1, {{"job", id}, {"run", 1}, {"event", "exited"}, {"exit_code", 0}});
  ASSERT_EQ(r.body["results"][0]["state"], "succeeded") << r.body.dump();
  // Ended, within the grace: the last bytes and a repeated report are taken.
  h->advance(299);
  EXPECT_EQ(up("three\n", 8).status, 200);
  r = report("n1", t1, {{"job", id}, {"run", 1}, {"event", "exited"}, {"exit_code", 0}});
  EXPECT_EQ(r.body["results"][0]["state"], "succeeded") << r.body.dump();
  // Past it: refused as if the node never held the run, and the log is unchanged.
  h->advance(2);
  auto late = up("forged\n", 14);
  EXPECT_EQ(late.status, 403) << late.body.dump();
  EXPECT_EQ(late.body["error"]["reason"], "job " + std::to_string(id) + " run 1 is not on node n1");
  r = report("n1", t1, {{"job", id}, {"run", 1}, {"event", "exited"}, {"exit_code", 1}});
  EXPECT_EQ(r.body["results"][0], json({{"job", id}, {"error", "not a job on node n1"}}));
  EXPECT_EQ(state(id), "succeeded");
  httplib::Client cli("127.0.0.1", h->port());
  auto logs = cli.Get(("/api/v1/jobs/" + std::to_string(id) + "/logs").c_str(),
                      httplib::Headers{{"Authorization", "Bearer " + h->admin()}});
  ASSERT_TRUE(logs);
  EXPECT_EQ(logs->body, "one\ntwo\nthree\n");
}

TEST_F(Agent, GangEndsOnTheFirstFailureOrWhenEveryNodeSucceeded) {
  auto t1 = node("n1");
  auto t2 = node("n2");
  auto gang = [&](const std::string& key) {
    auto b = job(key, "/lab/a", 8);
    b["nodes"] = 2;
    return submit(b);
  };
  const auto ok = gang("ok");
  h->sync();
  report("n1", t1, {{"job", ok}, {"run", 1}, {"event", "started"}});
  report("n2", t2, {{"job", ok}, {"run", 1}, {"event", "started"}});
  h->advance(10);
  auto r = report("n1", t1, {{"job", ok}, {"run", 1}, {"event", "exited"}, {"exit_code", 0}});
  EXPECT_EQ(r.body["results"][0]["state"], "running");
  h->sync();
  EXPECT_TRUE(assignments("n1", t1).body["run"].empty()) << "n1's part is done";
  EXPECT_EQ(assignments("n2", t2).body["run"].size(), 1u);
  auto ev = h->get("/api/v1/jobs/" + std::to_string(ok) + "/events").body["events"];
  EXPECT_NE(ev.back()["reason"].get<std::string>().find("1 of 2"), std::string::npos);
  r = report("n2", t2, {{"job", ok}, {"run", 1}, {"event", "exited"}, {"exit_code", 0}});
  EXPECT_EQ(r.body["results"][0]["state"], "succeeded");
  EXPECT_EQ(h->get("/api/v1/jobs/" + std::to_string(ok)).body["exit_code"], 0);

  const auto bad = gang("bad");
  h->sync();
  report("n1", t1, {{"job", bad}, {"run", 1}, {"event", "started"}});
  r = report("n2", t2, {{"job", bad}, {"run", 1}, {"event", "exited"}, {"exit_code", 2}});
  EXPECT_EQ(r.body["results"][0]["state"], "failed");
  h->sync();
  EXPECT_TRUE(assignments("n1", t1).body["run"].empty()) << "the other part is to be killed";
}

TEST_F(Agent, SilentNodesGoDownAndComeBackOnTheirNextCall) {
  ControllerOptions bad;
  bad.lease_seconds = 30;
  bad.node_timeout_seconds = 35;
  EXPECT_EQ(validate(bad).error().field, "node_timeout_seconds");
  bad.node_timeout_seconds = 36;
  EXPECT_TRUE(validate(bad).ok());

  auto t1 = node("n1");
  auto t2 = node("n2");
  h->add_sim_nodes(1, "sim");
  auto res = job("res", "/lab/a", 8);
  res["resumable"] = true;
  res["clusters"] = {"c1"};
  auto plain = job("plain", "/lab/a", 8);
  plain["clusters"] = {"c1"};
  const auto a = submit(res);
  const auto b = submit(plain);
  h->sync();
  ASSERT_EQ(state(a), "starting");
  ASSERT_EQ(state(b), "starting");
  std::string on_a = h->get("/api/v1/jobs/" + std::to_string(a)).body["placement"][0]["node"];
  auto tok = [&](const std::string& n) { return n == "n1" ? t1 : t2; };
  report(on_a, tok(on_a), {{"job", a}, {"run", 1}, {"event", "started"}});
  // The other node keeps calling (any agent call counts); the first falls silent.
  const std::string quiet = on_a, talker = on_a == "n1" ? "n2" : "n1";
  for (int i = 0; i < 5; ++i) {
    h->advance(10);
    ASSERT_EQ(assignments(talker, tok(talker)).status, 200);
    h->sync();
  }
  EXPECT_EQ(h->get("/api/v1/nodes/" + talker).body["health"], "healthy");
  auto q = h->get("/api/v1/nodes/" + quiet).body;
  EXPECT_EQ(q["health"], "down");
  EXPECT_EQ(q["health_reason"].get<std::string>().rfind("no heartbeat for ", 0), 0u) << q.dump();
  EXPECT_EQ(h->get("/api/v1/nodes/sim-n0").body["health"], "healthy") << "simulated: never";
  // Its job was lost: requeued (resumable) and placed again on the node that is alive, or
  // preempted.
  const auto lost = quiet == on_a ? a : b;
  const auto other = lost == a ? b : a;
  EXPECT_TRUE(state(lost) == "requeued" || state(lost) == "starting" || state(lost) == "preempted")
      << state(lost);
  EXPECT_NE(state(other), "requeued");
  // The silent node calls again: healthy.
  EXPECT_EQ(h->post("/api/v1/nodes/" + quiet + "/heartbeat", json::object(), tok(quiet))
                .body["lease_seconds"],
            30);
  EXPECT_EQ(h->get("/api/v1/nodes/" + quiet).body["health"], "healthy");
  // One an operator marked down stays down whatever the agent says.
  ASSERT_TRUE(h->ctl().set_node(quiet, "down", "by ops", std::nullopt).ok());
  h->post("/api/v1/nodes/" + quiet + "/heartbeat", {{"health", "healthy"}}, tok(quiet));
  assignments(quiet, tok(quiet));
  EXPECT_EQ(h->get("/api/v1/nodes/" + quiet).body["health"], "down");
  EXPECT_EQ(h->get("/api/v1/nodes/" + quiet).body["health_reason"], "by ops");
  // The history of health changes is kept with times.
  int downs = 0;
  for (const auto& e : h->store().node_health(h->now() + 1)) downs += e.health == "down";
  EXPECT_EQ(downs, 2);
}

TEST_F(Agent, AfterARestartEveryNodeHasAFreshTimeout) {
  auto t1 = node("n1");
  h->advance(40);  // 40 of 45 s silent
  h->restart();
  h->advance(40);
  h->sync();
  EXPECT_EQ(h->get("/api/v1/nodes/n1").body["health"], "healthy");
  h->advance(10);
  h->sync();
  EXPECT_EQ(h->get("/api/v1/nodes/n1").body["health"], "down");
  // Marked down by the timeout before a restart, it still comes back on its next call after it.
  h->restart();
  EXPECT_EQ(assignments("n1", t1).status, 200);
  EXPECT_EQ(h->get("/api/v1/nodes/n1").body["health"], "healthy");
}

TEST_F(Agent, TelemetryKeepsSummariesFlagsAndTheLatestGpuSample) {
  auto t1 = node("n1");
  auto body = job("t", "/lab/a", 2);
  body["cpus"] = 4;
  const auto id = submit(body);
  h->sync();
  report("n1", t1, {{"job", id}, {"run", 1}, {"event", "started"}});
  auto post = [&](const json& b) { return h->post("/api/v1/agent/nodes/n1/telemetry", b, t1); };
  // Malformed: refused with the field, nothing kept.
  struct Case {
    json body;
    std::string field;
  };
  const std::vector<Case> cases = {
      {{{"gpus", {{{"index", 0}, {"util_pct", 101}}}}}, "gpus[0].util_pct"},
      {{{"gpus", {{{"util_pct", 1}}}}}, "gpus[0].index"},
      {{{"gpus", {{{"index", 0}, {"fan", 1}}}}}, "gpus[0].fan"},
      {{{"gpus", {{{"index", 0}, {"healthy", "yes"}}}}}, "gpus[0].healthy"},
      {{{"jobs", {{{"job", id}, {"run", 1}, {"seconds", 10}}}}}, "jobs[0].samples"},
      {{{"jobs",
         {{{"job", id}, {"run", 1}, {"samples", 10}, {"seconds", 10}, {"io_wait_pct_mean", 120}}}}},
       "jobs[0].io_wait_pct_mean"},
      {{{"jobs", {{{"job", id}, {"samples", 10}, {"seconds", 10}}}}}, "jobs[0].run"},
      {{{"time", "now"}}, "time"},
      {{{"extra", 1}}, "extra"},
  };
  for (const auto& c : cases) {
    auto r = post(c.body);
    EXPECT_EQ(r.status, 400) << c.body.dump();
    EXPECT_EQ(r.body["error"]["field"], c.field) << c.body.dump() << " -> " << r.body.dump();
  }
  EXPECT_TRUE(h->store().telemetry(id).empty());
  // 11 minutes of 10 s posts: idle GPUs (5%), 12 GiB peak of 2 x 80 GiB, CPU pinned at 4 CPUs.
  for (int i = 0; i < 66; ++i) {
    h->advance(10);
    auto r = post({{"time", h->now()},
                   {"gpus",
                    {{{"index", 0},
                      {"util_pct", 5},
                      {"mem_used_mib", 6144},
                      {"mem_total_mib", 81559},
                      {"healthy", true}}}},
                   {"jobs",
                    {{{"job", id},
                      {"run", 1},
                      {"samples", 10},
                      {"seconds", 10},
                      {"gpu_util_mean", 5},
                      {"gpu_util_peak", 9},
                      {"mem_used_peak_mib", 2 * 6144},
                      {"mem_total_mib", 2 * 81920},
                      {"cpu_pct_mean", 399},
                      {"io_wait_pct_mean", 1}},
                     {{"job", 424242}, {"run", 1}, {"samples", 1}, {"seconds", 1}}}}});
    ASSERT_EQ(r.status, 200) << r.body.dump();
    EXPECT_EQ(r.body["accepted"], 1);
    EXPECT_EQ(r.body["ignored"][0]["job"], 424242);
  }
  auto t = h->get("/api/v1/jobs/" + std::to_string(id) + "/telemetry");
  ASSERT_EQ(t.status, 200) << t.body.dump();
  EXPECT_EQ(t.body["current"]["samples"], 660);
  EXPECT_DOUBLE_EQ(t.body["current"]["seconds"].get<double>(), 660);
  EXPECT_DOUBLE_EQ(t.body["current"]["gpu_seconds"].get<double>(), 2 * 660);
  EXPECT_NEAR(t.body["current"]["utilization"].get<double>(), 0.05, 1e-9);
  EXPECT_DOUBLE_EQ(t.body["current"]["gpu_util_peak"].get<double>(), 9);
  EXPECT_EQ(t.body["current"]["mem_used_peak_mib"], 2 * 6144);
  EXPECT_EQ(t.body["total"]["samples"], 660);
  // A point per post, for the dashboard's sparklines.
  ASSERT_EQ(t.body["samples"].size(), 66u);
  EXPECT_EQ(t.body["samples"].back()["time"], h->now());
  EXPECT_EQ(t.body["samples"].back()["gpu_util_pct"], 5.0);
  EXPECT_EQ(t.body["samples"].back()["mem_used_mib"], 2 * 6144);
  std::map<std::string, std::string> flags;
  for (const auto& f : t.body["flags"]) flags[f["flag"]] = f["hint"];
  ASSERT_TRUE(flags.count("idle")) << t.body.dump();
  ASSERT_TRUE(flags.count("oversized-memory")) << t.body.dump();
  // 6 GiB per GPU x 1.1 fits the 1g.10gb slice.
  EXPECT_NE(flags["oversized-memory"].find("1g.10gb"), std::string::npos)
      << flags["oversized-memory"];
  ASSERT_TRUE(flags.count("input-bound")) << t.body.dump();
  EXPECT_NE(flags["input-bound"].find("CPU"), std::string::npos);
  // The node's latest GPU sample is on the node.
  auto n = h->get("/api/v1/nodes/n1").body;
  EXPECT_EQ(n["telemetry"]["gpus"][0]["util_pct"], 5.0);
  EXPECT_EQ(n["telemetry"]["time"], h->now());
  // The report's utilization: measured use over measured GPU-time; simulated jobs unmeasured.
  h->add_sim_nodes(1, "sim");
  auto s = job("sim", "/lab/a", 1);
  s["clusters"] = {"sim"};
  submit(s);
  h->sync();
  h->advance(60);
  auto rep = h->get("/api/v1/report?from=" + std::to_string(h->now() - 3600) +
                    "&to=" + std::to_string(h->now()));
  ASSERT_EQ(rep.status, 200) << rep.body.dump();
  EXPECT_NEAR(rep.body["utilization"]["value"].get<double>(), 0.05, 1e-9);
  EXPECT_EQ(rep.body["utilization"]["jobs_measured"], 1);
  EXPECT_EQ(rep.body["utilization"]["jobs_without_telemetry"], 1);
  for (const auto& b : rep.body["budgets"]) {
    if (b["budget"] == "/lab/a") {
      EXPECT_NEAR(b["utilization"].get<double>(), 0.05, 1e-9);
      EXPECT_EQ(b["jobs_without_telemetry"], 1);
    }
  }
}

TEST(TelemetryFlags, SmallestFitAndRules) {
  const auto cat = core::GpuCatalog::standard();
  // On an H100 or A100 of 80 GB (the driver reports 79.6 GiB): its profiles.
  const double h100 = 81559.0 / 1024;
  EXPECT_EQ(smallest_fit(9, cat, h100)->name, "MIG 1g.10gb");
  EXPECT_EQ(smallest_fit(11, cat, h100)->name, "P100");         // 16 GiB, before 1g.20gb
  EXPECT_EQ(smallest_fit(17, cat, h100)->name, "MIG 1g.20gb");  // less compute than 2g.20gb
  EXPECT_EQ(smallest_fit(33, cat, h100)->name, "MIG 3g.40gb");
  EXPECT_EQ(smallest_fit(79, cat, h100)->name, "H100");
  EXPECT_EQ(smallest_fit(100, cat, h100)->name, "H200");
  EXPECT_FALSE(smallest_fit(300, cat, h100));
  // An H200 (140.4 GiB) is offered its own profiles, never an 80 GB GPU's names.
  const double h200 = 143771.0 / 1024;
  EXPECT_EQ(smallest_fit(9, cat, h200)->name, "P100");
  EXPECT_EQ(smallest_fit(17, cat, h200)->name, "MIG 1g.18gb");
  EXPECT_EQ(smallest_fit(33, cat, h200)->name, "MIG 1g.35gb");  // past V100's 32
  EXPECT_EQ(smallest_fit(60, cat, h200)->name, "MIG 3g.71gb");
  // H100 NVL (94 GB, 93.6 GiB), A100 40 GB, B200.
  EXPECT_EQ(smallest_fit(11, cat, 95830.0 / 1024)->name, "MIG 1g.12gb");
  EXPECT_EQ(smallest_fit(45, cat, 95830.0 / 1024)->name, "MIG 3g.47gb");
  EXPECT_EQ(smallest_fit(4, cat, 40)->name, "MIG 1g.5gb");
  EXPECT_EQ(smallest_fit(40, cat, 180)->name, "MIG 1g.45gb");
  // A GPU already split (an instance's memory) or of a size nothing splits: whole models only.
  EXPECT_EQ(smallest_fit(9, cat, 9.75)->name, "P100");
  EXPECT_EQ(smallest_fit(9, cat, 48)->name, "P100");
  EXPECT_EQ(smallest_fit(9, cat, 0)->name, "P100");
  EXPECT_EQ(core::mig_profile_memory_gb("3g.40gb"), 40);
  EXPECT_EQ(core::mig_profile_memory_gb("1g.10gb+me"), 10);
  EXPECT_EQ(core::mig_profile_memory_gb("7g.141gb"), 141);
  EXPECT_EQ(core::mig_profile_memory_gb("mystery"), 0);
  EXPECT_EQ(core::mig_profile_memory_gb("1g.gb"), 0);
  store::TelemetryRecord t;
  t.samples = 100;
  t.seconds = 100;
  t.util_sum = 90 * 100.0;
  t.mem_peak_mib = 70 * 1024;
  t.mem_total_mib = 80 * 1024;
  json spec = {{"gpus_per_node", 1}};
  EXPECT_TRUE(telemetry_flags(t, spec, cat).empty()) << "busy and needs its 80 GiB";
  t.io_sum = 30 * 100.0;
  t.util_sum = 40 * 100.0;
  auto f = telemetry_flags(t, spec, cat);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].flag, "input-bound");
  t.seconds = 30;  // too short to say
  EXPECT_TRUE(telemetry_flags(t, spec, cat).empty());
}

// A gang's node that has not said its part started is told "starting" even once another node
// made the job running: seen late (an agent that polls), the run is launched there, not reported
// lost (which ended the whole gang: found by the multi-host test).
TEST_F(Agent, AGangNodeThatHasNotStartedIsStillToldToStart) {
  auto t1 = node("n1");
  auto t2 = node("n2");
  const auto id = submit_gang("g");
  EXPECT_EQ(assignments("n1", t1).body["run"][0]["state"], "starting");
  EXPECT_EQ(report("n1", t1, {{"job", id}, {"run", 1}, {"event", "started"}}).status, 200);
  h->sync();
  EXPECT_EQ(state(id), "running");
  EXPECT_EQ(assignments("n1", t1).body["run"][0]["state"], "running");
  EXPECT_EQ(assignments("n2", t2).body["run"][0]["state"], "starting") << "n2 has not started";
  EXPECT_EQ(report("n2", t2, {{"job", id}, {"run", 1}, {"event", "started"}}).status, 200);
  h->sync();
  EXPECT_EQ(assignments("n2", t2).body["run"][0]["state"], "running");
  EXPECT_EQ(state(id), "running");
}

// Which nodes of a running gang started is not stored: after a restart every node is told
// "starting" until it says "started" again, so that a node that never saw the run launches it
// rather than report it lost (and end the whole gang).
TEST_F(Agent, AfterARestartAGangNodeIsToldToStartUntilItSaysItStarted) {
  auto t1 = node("n1");
  auto t2 = node("n2");
  const auto id = submit_gang("r");
  EXPECT_EQ(report("n1", t1, {{"job", id}, {"run", 1}, {"event", "started"}}).status, 200);
  h->sync();
  ASSERT_EQ(state(id), "running");
  ASSERT_EQ(assignments("n1", t1).body["run"][0]["state"], "running");
  ASSERT_EQ(assignments("n2", t2).body["run"][0]["state"], "starting");
  h->restart();
  EXPECT_EQ(state(id), "running");
  EXPECT_EQ(assignments("n2", t2).body["run"][0]["state"], "starting") << "it never started";
  EXPECT_EQ(assignments("n1", t1).body["run"][0]["state"], "starting") << "not known any more";
  EXPECT_EQ(report("n1", t1, {{"job", id}, {"run", 1}, {"event", "started"}}).status, 200);
  h->sync();
  EXPECT_EQ(assignments("n1", t1).body["run"][0]["state"], "running");
  EXPECT_EQ(assignments("n2", t2).body["run"][0]["state"], "starting");
  EXPECT_EQ(state(id), "running");
  const auto runs = h->get("/api/v1/jobs/" + std::to_string(id)).body["runs"];
  EXPECT_EQ(runs, 1) << "a repeated start report starts nothing";
}

// The same for a gang that no node had started before the restart: the first node's report
// makes it running, and the other is still told to start.
TEST_F(Agent, AfterARestartAGangNoNodeStartedKeepsItsOtherNodeStarting) {
  auto t1 = node("n1");
  auto t2 = node("n2");
  const auto id = submit_gang("s");
  ASSERT_EQ(state(id), "starting");
  h->restart();
  EXPECT_EQ(report("n1", t1, {{"job", id}, {"run", 1}, {"event", "started"}}).status, 200);
  h->sync();
  EXPECT_EQ(state(id), "running");
  EXPECT_EQ(assignments("n1", t1).body["run"][0]["state"], "running");
  EXPECT_EQ(assignments("n2", t2).body["run"][0]["state"], "starting") << "n2 has not started";
}

TEST_F(Agent, LogsAreAppendedByOffsetAndReadBack) {
  auto t1 = node("n1");
  auto t2 = node("n2");
  const auto id = submit_gang("l");
  const std::string rank0 = assignments("n1", t1).body["run"][0]["nodes"][0].get<std::string>();
  const auto tok0 = rank0 == "n1" ? t1 : t2;
  const auto other = rank0 == "n1" ? "n2" : "n1";
  const auto tok1 = rank0 == "n1" ? t2 : t1;
  auto up = [&](const std::string& node, const std::string& tok, const std::string& q,
                const std::string& data) {
    return h->raw("POST", "/api/v1/agent/nodes/" + node + "/logs?job=" + std::to_string(id) + q,
                  data, tok);
  };
  EXPECT_EQ(up(rank0, tok0, "&run=1&stream=stdout&offset=0", "hello ").body["length"], 6);
  EXPECT_EQ(up(rank0, tok0, "&run=1&stream=stdout&offset=3", "lo world\n").body["length"], 12);
  EXPECT_EQ(up(rank0, tok0, "&run=1&stream=stdout&offset=0", "hello ").body["length"], 12)
      << "already there: skipped";
  auto gap = up(rank0, tok0, "&run=1&stream=stdout&offset=20", "x");
  EXPECT_EQ(gap.status, 409);
  EXPECT_EQ(gap.body["error"]["field"], "offset");
  EXPECT_NE(gap.body["error"]["reason"].get<std::string>().find("12"), std::string::npos);
  EXPECT_EQ(up(other, tok1, "&run=1&stream=stderr&offset=0", "oops\n").status, 200);
  // Bad queries name the parameter; a node outside the run may not write to it.
  EXPECT_EQ(up(rank0, tok0, "&run=1&stream=stdlog&offset=0", "x").body["error"]["field"], "stream");
  EXPECT_EQ(up(rank0, tok0, "&stream=stdout&offset=0", "x").body["error"]["field"], "run");
  // A run the job never had answers like another node's run or a job that does not exist.
  EXPECT_EQ(up(rank0, tok0, "&run=2&stream=stdout&offset=0", "x").status, 403);
  EXPECT_EQ(up(rank0, tok0, "&run=1&stream=stdout", "x").body["error"]["field"], "offset");
  EXPECT_EQ(up(rank0, tok0, "&run=1&stream=stdout&offset=0&colour=1", "x").status, 400);
  EXPECT_EQ(up(rank0, tok1, "&run=1&stream=stdout&offset=0", "x").status, 403);
  // The files are where the contract says.
  EXPECT_TRUE(std::filesystem::exists(
      dir.file("allot.db.logs/" + std::to_string(id) + "/1." + rank0 + ".stdout")));

  httplib::Client cli("127.0.0.1", h->port());
  httplib::Headers auth = {{"Authorization", "Bearer " + h->admin()}};
  auto get = [&](const std::string& q) {
    return cli.Get(("/api/v1/jobs/" + std::to_string(id) + "/logs" + q).c_str(), auth);
  };
  auto g = get("");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 200);
  EXPECT_EQ(g->body, "hello world\n");
  EXPECT_EQ(g->get_header_value("Allot-Next-Offset"), "12");
  EXPECT_EQ(g->get_header_value("Allot-Node"), rank0) << "default: the rank-0 node";
  EXPECT_EQ(g->get_header_value("Allot-Complete"), "false");
  g = get("?offset=6");
  EXPECT_EQ(g->body, "world\n");
  g = get("?stream=stderr&node=" + std::string(other));
  EXPECT_EQ(g->body, "oops\n");
  EXPECT_EQ(get("?offset=99")->status, 400);
  EXPECT_EQ(get("?stream=x")->status, 400);
  EXPECT_EQ(get("?run=5")->status, 400);
  // The run ends; complete once the agent marks the stream final (or after the settle time).
  report("n1", t1, {{"job", id}, {"run", 1}, {"event", "exited"}, {"exit_code", 1}});
  EXPECT_EQ(get("?offset=12")->get_header_value("Allot-Complete"), "false");
  EXPECT_EQ(up(rank0, tok0, "&run=1&stream=stdout&offset=12&final=true", "bye\n").status, 200);
  g = get("?offset=12");
  EXPECT_EQ(g->body, "bye\n");
  EXPECT_EQ(g->get_header_value("Allot-Complete"), "true") << "everything is in this reply";
  g = get("?offset=16");
  EXPECT_EQ(g->get_header_value("Allot-Complete"), "true");
  EXPECT_EQ(get("?stream=stderr&node=" + std::string(other) + "&offset=5")
                ->get_header_value("Allot-Complete"),
            "false");
  h->advance(31);
  EXPECT_EQ(get("?stream=stderr&node=" + std::string(other) + "&offset=5")
                ->get_header_value("Allot-Complete"),
            "true");
  // Visible to whoever sees the job, no one else.
  auto ann = h->token("ann", "user");
  EXPECT_EQ(h->get("/api/v1/jobs/" + std::to_string(id) + "/logs", ann).status, 404);
}

TEST(LogStore, KeepsTheFirstAndTheLatestBytesOfLongStreams) {
  TempDir dir;
  LogLimits lim;
  lim.head = 10;
  lim.tail = 10;
  lim.chunk = 4;
  lim.max_append = 100;
  LogStore logs(dir.file("logs"), lim);
  std::string all;
  for (int i = 0; i < 20; ++i) {
    std::string part = std::to_string(i % 10) + std::string(2, static_cast<char>('a' + i));
    auto r = logs.append(7, 1, "n1", "stdout", static_cast<std::int64_t>(all.size()), part, false);
    ASSERT_TRUE(r.ok());
    all += part;
    EXPECT_EQ(r.value(), static_cast<std::int64_t>(all.size()));
  }
  ASSERT_EQ(all.size(), 60u);
  auto head = logs.read(7, 1, "n1", "stdout", 0, 10);
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head.value().data, all.substr(0, 10));
  // From the middle: what was dropped is skipped, and `start` says where the bytes begin.
  auto mid = logs.read(7, 1, "n1", "stdout", 20, 100);
  ASSERT_TRUE(mid.ok());
  EXPECT_GE(mid.value().start, 60 - 10 - 4);
  EXPECT_LE(mid.value().start, 50);
  EXPECT_EQ(mid.value().data, all.substr(static_cast<std::size_t>(mid.value().start)));
  EXPECT_EQ(mid.value().next, 60);
  // Reading from 0 runs through the head and jumps the gap.
  auto whole = logs.read(7, 1, "n1", "stdout", 0, 1000);
  EXPECT_EQ(whole.value().data.substr(0, 10), all.substr(0, 10));
  EXPECT_EQ(whole.value().next, 60);
  // On disk: the head plus the chunks of the tail, nothing more.
  std::uintmax_t bytes = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.file("logs"))) {
    if (e.is_regular_file()) bytes += e.file_size();
  }
  EXPECT_LE(bytes, 10u + 10u + 4u);
  // A fresh store (a restart) finds the same length and accepts the next byte only there.
  LogStore again(dir.file("logs"), lim);
  EXPECT_EQ(again.append(7, 1, "n1", "stdout", 61, "x", false).error().field, "offset");
  EXPECT_EQ(again.append(7, 1, "n1", "stdout", 60, "x", false).value(), 61);
}

}  // namespace
}  // namespace allot::server
