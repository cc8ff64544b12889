// The control plane end to end in-process: real SQLite, real HTTP on loopback, the scheduling loop
// on a test clock, simulated nodes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "server/lifecycle.h"

namespace allot::server {
namespace {

using testing::Harness;
using testing::job;
using testing::json;
using testing::TempDir;

TEST(Lifecycle, LegalAndIllegalTransitions) {
  using S = JobStatus;
  EXPECT_TRUE(can_transition(S::Pending, S::Starting));
  EXPECT_TRUE(can_transition(S::Starting, S::Running));
  EXPECT_TRUE(can_transition(S::Running, S::Preempting));
  EXPECT_TRUE(can_transition(S::Preempting, S::Requeued));
  EXPECT_TRUE(can_transition(S::Preempting, S::Preempted));
  EXPECT_TRUE(can_transition(S::Requeued, S::Starting));
  EXPECT_TRUE(can_transition(S::Running, S::Succeeded));
  EXPECT_TRUE(can_transition(S::Running, S::Cancelled));
  EXPECT_FALSE(can_transition(S::Pending, S::Running));
  EXPECT_FALSE(can_transition(S::Pending, S::Succeeded));
  EXPECT_FALSE(can_transition(S::Succeeded, S::Running));
  EXPECT_FALSE(can_transition(S::Cancelled, S::Cancelled));
  EXPECT_FALSE(can_transition(S::Running, S::Requeued));
  EXPECT_FALSE(can_transition(S::Preempted, S::Pending));
  for (const char* s : {"pending", "starting", "running", "preempting", "requeued", "preempted",
                        "succeeded", "failed", "cancelled"}) {
    ASSERT_TRUE(parse_job_status(s));
    EXPECT_STREQ(to_string(*parse_job_status(s)), s);
  }
}

class Api : public ::testing::Test {
 protected:
  void SetUp() override {
    h = std::make_unique<Harness>(dir.file("allot.db"));
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 1}}).status, 200);
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b"}, {"share", 1}}).status, 200);
  }
  TempDir dir;
  std::unique_ptr<Harness> h;
};

TEST_F(Api, SubmitRunsOnSimulatedNodeAndSucceeds) {
  h->add_sim_nodes(2);
  auto body = job("k1");
  body["expected_duration"] = 100;
  body["min_runtime"] = 60;
  auto r = h->post("/api/v1/jobs", body);
  ASSERT_EQ(r.status, 201) << r.body.dump();
  const auto id = r.body["id"].get<JobId>();
  EXPECT_EQ(r.body["state"], "pending");
  h->sync();
  auto s = h->get("/api/v1/jobs/" + std::to_string(id));
  EXPECT_EQ(s.body["state"], "running");
  EXPECT_EQ(s.body["placement"].size(), 8u);
  EXPECT_TRUE(s.body["allocated"].get<bool>());
  h->advance(150);
  h->sync();
  s = h->get("/api/v1/jobs/" + std::to_string(id));
  EXPECT_EQ(s.body["state"], "succeeded");
  EXPECT_EQ(s.body["exit_code"], 0);
  auto ev = h->get("/api/v1/jobs/" + std::to_string(id) + "/events");
  std::vector<std::string> to;
  for (const auto& e : ev.body["events"]) to.push_back(e["to"]);
  EXPECT_EQ(to, (std::vector<std::string>{"pending", "starting", "running", "succeeded"}));
  auto ledger = h->store().ledger_for_job(id);
  ASSERT_EQ(ledger.size(), 1u);
  EXPECT_EQ(ledger[0].milli_seconds(), 8000 * 150);
  EXPECT_TRUE(ledger[0].allocated);
  auto u = h->get("/api/v1/usage?from=0&to=" + std::to_string(h->now()));
  ASSERT_EQ(u.status, 200) << u.body.dump();
  bool found = false;
  for (const auto& row : u.body["rows"]) {
    if (row["budget"] == "/lab/a") {
      EXPECT_DOUBLE_EQ(row["allocated_gpu_seconds"].get<double>(), 8.0 * 150);
      found = true;
    }
  }
  EXPECT_TRUE(found);
  auto rep = h->get("/api/v1/report?from=" + std::to_string(h->now() - 1000) +
                    "&to=" + std::to_string(h->now()));
  ASSERT_EQ(rep.status, 200) << rep.body.dump();
}

TEST_F(Api, WhyExplainsWaitingJobsAndListFilters) {
  h->add_sim_nodes(1);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(h->post("/api/v1/jobs", job("k" + std::to_string(i))).status, 201);
  h->sync();
  auto w = h->get("/api/v1/jobs/3/why");
  ASSERT_EQ(w.status, 200);
  EXPECT_FALSE(w.body["explanation"].get<std::string>().empty());
  EXPECT_NE(w.body["code"], "running");
  auto l = h->get("/api/v1/jobs?state=pending");
  EXPECT_EQ(l.body["jobs"].size(), 2u);
  l = h->get("/api/v1/jobs?state=running&budget=/lab");
  EXPECT_EQ(l.body["jobs"].size(), 1u);
  l = h->get("/api/v1/jobs?limit=1&order=desc");
  ASSERT_EQ(l.body["jobs"].size(), 1u);
  EXPECT_EQ(l.body["jobs"][0]["id"], 3);
  EXPECT_EQ(l.body["next"], 3);
  EXPECT_EQ(h->get("/api/v1/jobs?state=bogus").status, 400);
  EXPECT_EQ(h->get("/api/v1/jobs?colour=red").status, 400);
}

TEST_F(Api, IdempotentSubmit) {
  auto a = h->post("/api/v1/jobs", job("same"));
  auto b = h->post("/api/v1/jobs", job("same"));
  ASSERT_EQ(a.status, 201);
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(a.body["id"], b.body["id"]);
  auto c = h->post("/api/v1/jobs", job("same", "/lab/b"));
  EXPECT_EQ(c.status, 409);
  EXPECT_EQ(c.body["error"]["field"], "idempotency_key");
  EXPECT_EQ(h->store().count_jobs(), 1);
}

TEST_F(Api, BadRequestsNameTheFieldAndChangeNothing) {
  struct Case {
    std::string body;
    int status;
    std::string field;
  };
  std::vector<Case> cases = {
      {"not json", 400, "body"},
      {"[1,2]", 400, "body"},
      {R"({"budget":"/lab/a"})", 400, "idempotency_key"},
      {R"({"idempotency_key":"x","budget":"/lab/a","colour":"red"})", 400, "colour"},
      {R"({"idempotency_key":"x"})", 400, "budget"},
      {R"({"idempotency_key":"x","budget":"/nope"})", 400, "budget"},
      {R"({"idempotency_key":"x","budget":"/lab"})", 400, "budget"},  // not a leaf
      {R"({"idempotency_key":"x","budget":"/lab/a","gpus_per_node":0})", 400, "gpus_per_node"},
      {R"({"idempotency_key":"x","budget":"/lab/a","gpus_per_node":"8"})", 400, "gpus_per_node"},
      {R"({"idempotency_key":"x","budget":"/lab/a","min_runtime":999999})", 400, "min_runtime"},
      {R"({"idempotency_key":"x","budget":"/lab/a","priority":"max"})", 400, "priority"},
      {R"({"idempotency_key":"x","budget":"/lab/a","models":["Z9"]})", 400, "models"},
      {R"({"idempotency_key":"x","budget":"/lab/a","clusters":["mars"]})", 400, "clusters"},
      {R"({"idempotency_key":"x","budget":"/lab/a","kind":"debug","gpus_per_node":8})", 400,
       "gpus"},
      {R"({"idempotency_key":")" + std::string(200, 'k') + R"(","budget":"/lab/a"})", 400,
       "idempotency_key"},
  };
  for (const auto& c : cases) {
    auto r = h->raw("POST", "/api/v1/jobs", c.body, h->admin());
    EXPECT_EQ(r.status, c.status) << c.body;
    EXPECT_NE(r.body["error"]["field"].get<std::string>().find(c.field), std::string::npos)
        << c.body << " -> " << r.body.dump();
  }
  auto big = h->raw("POST", "/api/v1/jobs", std::string(2 << 20, ' '), h->admin());
  EXPECT_EQ(big.status, 413);
  {
    // Without a usable token the body is not waited for: 401 once the head is there.
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(h->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const std::string head =
        "POST /api/v1/jobs HTTP/1.1\r\nAuthorization: Bearer nope\r\nContent-Length: "
        "900000\r\n\r\n";
    ASSERT_EQ(send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
    char buf[1024];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0);
    const std::string out(buf, static_cast<std::size_t>(n));
    EXPECT_EQ(out.rfind("HTTP/1.1 401", 0), 0u) << out;
    EXPECT_NE(out.find("\"field\":\"Authorization\""), std::string::npos) << out;
    close(fd);
  }
  EXPECT_EQ(h->store().count_jobs(), 0);
  EXPECT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/c"}, {"share", -1}}).status, 400);
  EXPECT_EQ(h->post("/api/v1/budgets", {{"path", "lab"}, {"share", 1}}).status, 400);
  EXPECT_EQ(h->post("/api/v1/nodes", {{"name", "x"}, {"model", "H100"}, {"gpus", 100}}).status,
            400);
  EXPECT_EQ(h->post("/api/v1/nodes", {{"name", "x"}, {"model", "Z9"}, {"gpus", 8}}).status, 400);
  EXPECT_TRUE(h->store().nodes().empty());
  EXPECT_EQ(h->get("/api/v1/nope").status, 404);
}

TEST_F(Api, CancelAndIllegalTransitions) {
  h->add_sim_nodes(1);
  ASSERT_EQ(h->post("/api/v1/jobs", job("a")).status, 201);
  ASSERT_EQ(h->post("/api/v1/jobs", job("b")).status, 201);
  h->sync();
  EXPECT_EQ(h->post("/api/v1/jobs/2/cancel", json::object()).body["state"], "cancelled");
  EXPECT_EQ(h->post("/api/v1/jobs/1/cancel", {{"reason", "oops"}}).body["state"], "cancelled");
  EXPECT_EQ(h->post("/api/v1/jobs/1/cancel", json::object()).status, 409);
  EXPECT_EQ(h->post("/api/v1/jobs/99/cancel", json::object()).status, 404);
  EXPECT_EQ(h->store().ledger_for_job(1).size(), 0u);  // cancelled at the same second it started
}

TEST_F(Api, AgentProtocolOnARealNode) {
  ASSERT_EQ(h->post("/api/v1/nodes",
                    {{"name", "gpu1"}, {"cluster", "c1"}, {"model", "H100"}, {"gpus", 8}})
                .status,
            201);
  auto agent = h->token("gpu1", "agent", "gpu1");
  auto body = job("x", "/lab/a", 4);
  body["command"] = {"python", "train.py"};
  ASSERT_EQ(h->post("/api/v1/jobs", body).status, 201);
  h->sync();
  auto a = h->get("/api/v1/agent/nodes/gpu1/assignments", agent);
  ASSERT_EQ(a.status, 200) << a.body.dump();
  ASSERT_EQ(a.body["run"].size(), 1u);
  EXPECT_EQ(a.body["run"][0]["gpus"].size(), 4u);
  EXPECT_EQ(a.body["run"][0]["command"][1], "train.py");
  EXPECT_EQ(h->get("/api/v1/jobs/1").body["state"], "starting");
  auto r = h->post("/api/v1/agent/nodes/gpu1/reports",
                   {{"reports", {{{"job", 1}, {"run", 1}, {"event", "started"}}}}}, agent);
  EXPECT_EQ(r.body["results"][0]["state"], "running");
  h->advance(30);
  r = h->post("/api/v1/agent/nodes/gpu1/reports",
              {{"reports", {{{"job", 1}, {"run", 1}, {"event", "exited"}, {"exit_code", 3}}}}},
              agent);
  EXPECT_EQ(r.body["results"][0]["state"], "failed");
  EXPECT_EQ(h->get("/api/v1/jobs/1").body["exit_code"], 3);
  EXPECT_EQ(h->store().ledger_for_job(1).at(0).milli_seconds(), 4000 * 30);
  // Malformed reports change nothing.
  EXPECT_EQ(h->post("/api/v1/agent/nodes/gpu1/reports",
                    {{"reports", {{{"job", 1}, {"run", 1}, {"event", "exploded"}}}}}, agent)
                .status,
            400);
  EXPECT_EQ(
      h->post("/api/v1/nodes/gpu1/heartbeat", {{"health", "unhealthy"}, {"reason", "xid"}}, agent)
          .status,
      200);
  EXPECT_EQ(h->get("/api/v1/nodes/gpu1").body["health"], "unhealthy");
}

TEST_F(Api, DrainAndUndrain) {
  h->add_sim_nodes(1);
  EXPECT_EQ(h->post("/api/v1/nodes/local-n0/drain", {{"reason", "maintenance"}}).body["health"],
            "draining");
  ASSERT_EQ(h->post("/api/v1/jobs", job("a")).status, 201);
  h->sync();
  EXPECT_EQ(h->get("/api/v1/jobs/1").body["state"], "pending");
  EXPECT_EQ(h->get("/api/v1/jobs/1/why").body["code"], "no-healthy-nodes");
  EXPECT_EQ(h->post("/api/v1/nodes/local-n0/undrain", json::object()).body["health"], "healthy");
  h->sync();
  EXPECT_EQ(h->get("/api/v1/jobs/1").body["state"], "running");
  EXPECT_EQ(h->post("/api/v1/nodes/nope/drain", json::object()).status, 404);
}

TEST_F(Api, BudgetTreeAndAudit) {
  ASSERT_EQ(
      h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 3}, {"members", {"ann"}}}).status,
      200);
  auto t = h->get("/api/v1/budgets");
  ASSERT_EQ(t.status, 200);
  bool found = false;
  for (const auto& b : t.body["budgets"]) {
    if (b["path"] == "/lab/a") {
      EXPECT_EQ(b["share"], 3.0);
      EXPECT_EQ(b["members"][0], "ann");
      found = true;
    }
  }
  EXPECT_TRUE(found);
  auto a = h->get("/api/v1/budgets/audit?path=/lab/a");
  ASSERT_EQ(a.status, 200);
  ASSERT_GE(a.body["entries"].size(), 2u);
  EXPECT_EQ(a.body["entries"][1]["field"], "share");
  EXPECT_EQ(a.body["entries"][1]["old"], "1.0");
  EXPECT_EQ(a.body["entries"][1]["new"], "3.0");
  EXPECT_EQ(a.body["entries"][1]["actor"], "root");
  // The acting token, not only its subject: the first one the harness made.
  EXPECT_EQ(a.body["entries"][1]["actor_token"], 1);
}

TEST_F(Api, BudgetRemovalWaitsForItsJobsAndIsAudited) {
  ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b/x"}, {"share", 1}}).status, 200);
  ASSERT_EQ(h->post("/api/v1/jobs", job("q", "/lab/b/x")).status, 201);
  auto r = h->call("DELETE", "/api/v1/budgets?path=/lab/b");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(r.body["error"]["field"], "path");
  EXPECT_NE(r.body["error"]["reason"].get<std::string>().find("1 job is queued or running"),
            std::string::npos)
      << r.body.dump();
  ASSERT_EQ(h->post("/api/v1/jobs/1/cancel", json::object()).status, 200);
  r = h->call("DELETE", "/api/v1/budgets?path=/lab/b");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_EQ(r.body["removed"], json({"/lab/b/x", "/lab/b"}));
  auto has = [&](const std::string& path) {
    const auto tree = h->get("/api/v1/budgets").body;
    for (const auto& b : tree["budgets"]) {
      if (b["path"] == path) return true;
    }
    return false;
  };
  EXPECT_FALSE(has("/lab/b"));
  EXPECT_FALSE(has("/lab/b/x"));
  EXPECT_TRUE(has("/lab/a"));
  auto audit = h->get("/api/v1/budgets/audit?path=/lab/b").body["entries"];
  ASSERT_GE(audit.size(), 2u);
  EXPECT_EQ(audit[0]["field"], "removed");
  EXPECT_EQ(audit[0]["actor"], "root");
  EXPECT_EQ(audit[0]["actor_token"], 1);
  EXPECT_EQ(h->post("/api/v1/jobs", job("z", "/lab/b/x")).body["error"]["field"], "budget");
  h->restart();
  EXPECT_FALSE(has("/lab/b"));
  EXPECT_EQ(h->call("DELETE", "/api/v1/budgets?path=/lab/b").status, 404);
  // The path can be made again.
  ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b"}, {"share", 2}}).status, 200);
  EXPECT_TRUE(has("/lab/b"));
  EXPECT_EQ(h->post("/api/v1/jobs", job("z2", "/lab/b")).status, 201);
}

TEST_F(Api, RestartRebuildsRunningJobsQueueAndUsage) {
  h->add_sim_nodes(2);
  for (int i = 0; i < 3; ++i) {
    auto b = job("r" + std::to_string(i));
    b["min_runtime"] = 3600;
    b["expected_duration"] = 7200;
    ASSERT_EQ(h->post("/api/v1/jobs", b).status, 201);
  }
  h->sync();
  auto before = h->get("/api/v1/jobs/1");
  ASSERT_EQ(before.body["state"], "running");
  ASSERT_EQ(h->get("/api/v1/jobs/3").body["state"], "pending");
  h->advance(100);
  h->restart();
  auto after = h->get("/api/v1/jobs/1");
  EXPECT_EQ(after.body["state"], "running");
  EXPECT_EQ(after.body["placement"], before.body["placement"]);
  EXPECT_EQ(after.body["protected_until"], before.body["protected_until"])
      << "the contract runs from the original start, not from the restart";
  EXPECT_EQ(h->get("/api/v1/jobs/2").body["state"], "running");
  // The open segment up to the restart was written to the ledger.
  EXPECT_EQ(h->store().ledger_for_job(1).at(0).milli_seconds(), 8000 * 100);
  h->sync();
  EXPECT_EQ(h->get("/api/v1/jobs/3").body["state"], "pending");  // no double placement
  EXPECT_EQ(h->get("/api/v1/jobs/3/why").status, 200);
  h->advance(7200);
  h->sync();
  EXPECT_EQ(h->get("/api/v1/jobs/1").body["state"], "succeeded");
}

// Ids continue after a restart: a new submit never reuses an existing job's id.
TEST_F(Api, IdsContinueAfterRestart) {
  h->add_sim_nodes(1);
  ASSERT_EQ(h->post("/api/v1/jobs", job("a")).status, 201);
  h->sync();
  h->restart();
  auto n = h->post("/api/v1/jobs", job("b"));
  EXPECT_EQ(n.body["id"], 2) << n.body.dump();
}

}  // namespace
}  // namespace allot::server
