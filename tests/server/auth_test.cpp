// Who may do what: a table of (role, request, expected status) over a real server, and TLS.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "harness.h"

namespace allot::server {
namespace {

using testing::Harness;
using testing::job;
using testing::json;
using testing::TempDir;

struct Row {
  std::string who;
  std::string method;
  std::string path;
  json body;
  int status;
};

TEST(AuthMatrix, EachRoleCanDoWhatItShouldAndNothingElse) {
  TempDir dir;
  Harness h(dir.file("a.db"));
  ASSERT_EQ(h.post("/api/v1/budgets", {{"path", "/lab/a"}, {"members", {"ann"}}}).status, 200);
  ASSERT_EQ(h.post("/api/v1/budgets", {{"path", "/lab/b"}, {"members", {"bob"}}}).status, 200);
  ASSERT_EQ(h.post("/api/v1/nodes", {{"name", "gpu1"}, {"model", "H100"}, {"gpus", 8}}).status,
            201);
  ASSERT_EQ(h.post("/api/v1/nodes", {{"name", "gpu2"}, {"model", "H100"}, {"gpus", 8}}).status,
            201);
  std::map<std::string, std::string> tok = {
      {"admin", h.admin()},
      {"mgr", h.token("mgr", "manager", "/lab")},
      {"mgr_b", h.token("mgr_b", "manager", "/lab/b")},
      {"ann", h.token("ann", "user")},
      {"bob", h.token("bob", "user")},
      {"agent1", h.token("agent1", "agent", "gpu1")},
      {"agent2", h.token("agent2", "agent", "gpu2")},
      {"carl", h.token("carl", "user")},  // an owner of /lab/b
      {"nobody", "allot_0000000000000000000000000000000000000000"},
      {"none", "-"},
  };
  ASSERT_EQ(h.post("/api/v1/budgets", {{"path", "/lab/b"}, {"owners", {"carl"}}}).status, 200);
  // Job 1: ann's in /lab/a; job 2: bob's in /lab/b.
  ASSERT_EQ(h.post("/api/v1/jobs", job("j1", "/lab/a"), tok["ann"]).status, 201);
  ASSERT_EQ(h.post("/api/v1/jobs", job("j2", "/lab/b"), tok["bob"]).status, 201);
  int n = 0;
  auto sub = [&](const std::string& budget) { return job("m" + std::to_string(++n), budget); };
  const std::vector<Row> rows = {
      // identity
      {"admin", "GET", "/api/v1/whoami", {}, 200},
      {"agent1", "GET", "/api/v1/whoami", {}, 200},
      {"nobody", "GET", "/api/v1/whoami", {}, 401},
      {"none", "GET", "/api/v1/jobs", {}, 401},
      {"none", "GET", "/api/v1/health", {}, 200},
      // submit
      {"admin", "POST", "/api/v1/jobs", sub("/lab/a"), 201},
      {"mgr", "POST", "/api/v1/jobs", sub("/lab/a"), 201},
      {"mgr_b", "POST", "/api/v1/jobs", sub("/lab/a"), 403},
      {"mgr_b", "POST", "/api/v1/jobs", sub("/lab/b"), 201},
      {"ann", "POST", "/api/v1/jobs", sub("/lab/a"), 201},
      {"ann", "POST", "/api/v1/jobs", sub("/lab/b"), 403},
      {"bob", "POST", "/api/v1/jobs", sub("/lab/a"), 403},
      {"agent1", "POST", "/api/v1/jobs", sub("/lab/a"), 403},
      // see jobs
      {"admin", "GET", "/api/v1/jobs/1", {}, 200},
      {"mgr", "GET", "/api/v1/jobs/1", {}, 200},
      {"mgr_b", "GET", "/api/v1/jobs/1", {}, 404},
      {"mgr_b", "GET", "/api/v1/jobs/2", {}, 200},
      {"ann", "GET", "/api/v1/jobs/1", {}, 200},
      {"ann", "GET", "/api/v1/jobs/2", {}, 404},
      {"ann", "GET", "/api/v1/jobs/1/why", {}, 200},
      {"bob", "GET", "/api/v1/jobs/1/events", {}, 404},
      {"agent1", "GET", "/api/v1/jobs/1", {}, 404},
      {"ann", "GET", "/api/v1/jobs?owner=bob", {}, 403},
      {"agent1", "GET", "/api/v1/jobs", {}, 403},
      // cancel
      {"bob", "POST", "/api/v1/jobs/1/cancel", json::object(), 404},
      {"mgr_b", "POST", "/api/v1/jobs/1/cancel", json::object(), 404},
      {"agent1", "POST", "/api/v1/jobs/1/cancel", json::object(), 404},
      {"ann", "POST", "/api/v1/jobs/1/cancel", json::object(), 200},
      {"mgr_b", "POST", "/api/v1/jobs/2/cancel", json::object(), 200},
      // budgets
      {"ann", "GET", "/api/v1/budgets", {}, 200},
      {"agent1", "GET", "/api/v1/budgets", {}, 403},
      {"admin", "POST", "/api/v1/budgets", {{"path", "/lab"}, {"share", 2}}, 200},
      {"mgr", "POST", "/api/v1/budgets", {{"path", "/lab"}, {"share", 5}}, 403},
      {"mgr", "POST", "/api/v1/budgets", {{"path", "/lab/a"}, {"share", 2}}, 200},
      {"mgr_b", "POST", "/api/v1/budgets", {{"path", "/lab/a"}, {"share", 3}}, 403},
      {"mgr_b", "POST", "/api/v1/budgets", {{"path", "/lab/b/x"}, {"share", 1}}, 200},
      {"ann", "POST", "/api/v1/budgets", {{"path", "/lab/a"}, {"share", 9}}, 403},
      {"agent1", "POST", "/api/v1/budgets", {{"path", "/lab/a"}, {"share", 9}}, 403},
      {"mgr", "GET", "/api/v1/budgets/audit?path=/lab", {}, 200},
      {"mgr_b", "GET", "/api/v1/budgets/audit?path=/lab", {}, 403},
      {"ann", "GET", "/api/v1/budgets/audit", {}, 403},
      // usage and reports
      {"admin", "GET", "/api/v1/usage", {}, 200},
      {"mgr", "GET", "/api/v1/usage?budget=/lab", {}, 200},
      {"mgr_b", "GET", "/api/v1/usage?budget=/lab", {}, 403},
      {"mgr_b", "GET", "/api/v1/usage?budget=/lab/b&by=user", {}, 200},
      {"ann", "GET", "/api/v1/usage?budget=/lab/a", {}, 200},  // her own budget's standing
      {"ann", "GET", "/api/v1/usage?budget=/lab/b", {}, 403},
      {"ann", "GET", "/api/v1/usage?budget=/lab", {}, 403},  // her siblings' too: no
      {"ann", "GET", "/api/v1/report", {}, 200},             // defaults to /lab/a
      {"bob", "GET", "/api/v1/report?budget=/lab/a", {}, 403},
      {"agent1", "GET", "/api/v1/report", {}, 403},
      {"mgr", "GET", "/api/v1/report?budget=/lab", {}, 200},
      // nodes
      {"ann", "GET", "/api/v1/nodes", {}, 200},
      {"agent1", "GET", "/api/v1/nodes", {}, 403},
      {"agent1", "GET", "/api/v1/nodes/gpu1", {}, 200},
      {"agent1", "GET", "/api/v1/nodes/gpu2", {}, 403},
      {"ann", "POST", "/api/v1/nodes", {{"name", "gpu3"}, {"model", "H100"}, {"gpus", 8}}, 403},
      {"mgr", "POST", "/api/v1/nodes/gpu1/drain", json::object(), 403},
      {"ann", "POST", "/api/v1/nodes/gpu1/cordon", json::object(), 403},
      {"agent1", "POST", "/api/v1/nodes/gpu1/drain", json::object(), 403},
      {"admin", "POST", "/api/v1/nodes/gpu1/drain", json::object(), 200},
      {"admin", "POST", "/api/v1/nodes/gpu1/undrain", json::object(), 200},
      {"agent1", "POST", "/api/v1/nodes/gpu1/heartbeat", json::object(), 200},
      {"agent2", "POST", "/api/v1/nodes/gpu1/heartbeat", json::object(), 403},
      {"ann", "POST", "/api/v1/nodes/gpu1/heartbeat", json::object(), 403},
      // the agent protocol
      {"agent1", "GET", "/api/v1/agent/nodes/gpu1/assignments", {}, 200},
      {"agent2", "GET", "/api/v1/agent/nodes/gpu1/assignments", {}, 403},
      {"ann", "GET", "/api/v1/agent/nodes/gpu1/assignments", {}, 403},
      {"mgr", "POST", "/api/v1/agent/nodes/gpu1/reports", {{"reports", json::array()}}, 403},
      {"agent2", "POST", "/api/v1/agent/nodes/gpu1/reports", {{"reports", json::array()}}, 403},
      {"agent1", "POST", "/api/v1/agent/nodes/gpu1/reports", {{"reports", json::array()}}, 200},
      {"agent1", "POST", "/api/v1/agent/nodes/gpu1/telemetry", json::object(), 200},
      {"agent2", "POST", "/api/v1/agent/nodes/gpu1/telemetry", json::object(), 403},
      {"ann", "POST", "/api/v1/agent/nodes/gpu1/telemetry", json::object(), 403},
      {"admin", "POST", "/api/v1/agent/nodes/gpu1/telemetry", json::object(), 200},
      // logs: the agent passes auth, then job 1 has not run on gpu1 (403, as for no such job)
      {"agent1", "POST", "/api/v1/agent/nodes/gpu1/logs?job=1&run=1&stream=stdout&offset=0",
       json::object(), 403},
      {"agent2", "POST", "/api/v1/agent/nodes/gpu1/logs?job=1&run=1&stream=stdout&offset=0",
       json::object(), 403},
      {"mgr", "POST", "/api/v1/agent/nodes/gpu1/logs?job=1&run=1&stream=stdout&offset=0",
       json::object(), 403},
      // a job's telemetry and logs follow its visibility
      {"admin", "GET", "/api/v1/jobs/1/telemetry", {}, 200},
      {"mgr", "GET", "/api/v1/jobs/1/telemetry", {}, 200},
      {"ann", "GET", "/api/v1/jobs/1/telemetry", {}, 200},
      {"bob", "GET", "/api/v1/jobs/1/telemetry", {}, 404},
      {"mgr_b", "GET", "/api/v1/jobs/1/telemetry", {}, 404},
      {"agent1", "GET", "/api/v1/jobs/1/telemetry", {}, 404},
      {"ann", "GET", "/api/v1/jobs/1/logs", {}, 200},
      {"mgr", "GET", "/api/v1/jobs/1/logs", {}, 200},
      {"bob", "GET", "/api/v1/jobs/1/logs", {}, 404},
      {"agent1", "GET", "/api/v1/jobs/1/logs", {}, 404},
      {"none", "GET", "/api/v1/jobs/1/logs", {}, 401},
      // tokens
      {"admin", "GET", "/api/v1/tokens", {}, 200},
      {"mgr", "GET", "/api/v1/tokens", {}, 200},  // its members' user tokens only
      {"ann", "GET", "/api/v1/tokens", {}, 200},  // her own service tokens only
      {"agent1", "GET", "/api/v1/tokens", {}, 403},
      {"ann", "POST", "/api/v1/tokens", {{"name", "x"}, {"role", "admin"}}, 403},
      {"ann", "POST", "/api/v1/tokens", {{"name", "x"}}, 403},  // permission before validation
      {"agent1", "POST", "/api/v1/tokens", {{"colour", 1}}, 403},
      {"agent1", "DELETE", "/api/v1/tokens/1", {}, 403},
      {"admin", "POST", "/api/v1/tokens", {{"name", "carl"}, {"role", "user"}}, 201},
      // minting a token for another principal is an administrator's; a manager mints user
      // tokens for itself
      {"mgr",
       "POST",
       "/api/v1/tokens",
       {{"name", "ann-laptop"}, {"role", "user"}, {"subject", "ann"}},
       403},
      {"mgr",
       "POST",
       "/api/v1/tokens",
       {{"name", "mgr-laptop"}, {"role", "user"}, {"subject", "mgr"}},
       201},
      {"mgr", "POST", "/api/v1/tokens", {{"name", "x"}}, 400},
      {"mgr_b",
       "POST",
       "/api/v1/tokens",
       {{"name", "ann-2"}, {"role", "user"}, {"subject", "ann"}},
       403},
      {"mgr", "POST", "/api/v1/tokens", {{"name", "zed"}, {"role", "user"}}, 403},
      {"mgr",
       "POST",
       "/api/v1/tokens",
       {{"name", "m2"}, {"role", "manager"}, {"scope", "/lab"}},
       403},
      {"mgr", "POST", "/api/v1/tokens", {{"name", "root2"}, {"role", "admin"}}, 403},
      // budget owners manage their budget like a manager scoped there
      {"carl", "GET", "/api/v1/jobs/2", {}, 200},
      {"carl", "GET", "/api/v1/jobs/1", {}, 404},
      {"carl", "GET", "/api/v1/usage?budget=/lab/b", {}, 200},
      {"carl", "GET", "/api/v1/usage?budget=/lab", {}, 403},
      {"carl", "GET", "/api/v1/budgets/audit?path=/lab/b", {}, 200},
      {"carl", "POST", "/api/v1/budgets", {{"path", "/lab/b/y"}, {"share", 2}}, 200},
      {"carl", "POST", "/api/v1/budgets", {{"path", "/lab/b"}, {"share", 9}}, 403},
      {"carl", "POST", "/api/v1/budgets", {{"path", "/lab/a/z"}, {"share", 1}}, 403},
      {"carl", "POST", "/api/v1/jobs", sub("/lab/b/y"), 201},
      {"carl",
       "POST",
       "/api/v1/tokens",
       {{"name", "bob-2"}, {"role", "user"}, {"subject", "bob"}},
       403},
      {"carl",
       "POST",
       "/api/v1/tokens",
       {{"name", "carl-ci"}, {"role", "user"}, {"subject", "carl"}},
       201},
      // budget removal: within what one manages, refused while jobs wait or run there
      {"ann", "DELETE", "/api/v1/budgets?path=/lab/a", {}, 403},
      {"agent1", "DELETE", "/api/v1/budgets?path=/lab/a", {}, 403},
      {"mgr_b", "DELETE", "/api/v1/budgets?path=/lab/a", {}, 403},
      {"carl", "DELETE", "/api/v1/budgets?path=/lab/b/y", {}, 409},  // carl's job waits there
      {"mgr_b", "DELETE", "/api/v1/budgets?path=/lab/b/x", {}, 200},
      {"mgr_b", "DELETE", "/api/v1/budgets?path=/lab/b/x", {}, 404},
      {"mgr", "DELETE", "/api/v1/budgets?path=/lab", {}, 403},  // its own scope
      {"admin", "DELETE", "/api/v1/budgets", {}, 400},
      {"admin", "DELETE", "/api/v1/budgets?path=/", {}, 400},
      // revoking: a manager its members' user tokens (others are not found)
      {"mgr_b", "DELETE", "/api/v1/tokens/4", {}, 404},  // ann's, not in /lab/b
      {"mgr", "DELETE", "/api/v1/tokens/2", {}, 404},    // a manager token
      {"mgr", "DELETE", "/api/v1/tokens/4", {}, 200},    // ann's
      {"ann", "GET", "/api/v1/whoami", {}, 401},
  };
  for (const auto& r : rows) {
    auto rep = h.call(r.method, r.path, r.body.is_null() ? nullptr : &r.body, tok.at(r.who));
    EXPECT_EQ(rep.status, r.status) << r.who << " " << r.method << " " << r.path << " "
                                    << r.body.dump() << " -> " << rep.body.dump();
  }
  // A revoked token stops working at once.
  auto created = h.post("/api/v1/tokens", {{"name", "dan"}, {"role", "user"}});
  ASSERT_EQ(created.status, 201);
  auto dan = created.body["token"].get<std::string>();
  EXPECT_EQ(h.get("/api/v1/whoami", dan).status, 200);
  EXPECT_EQ(
      h.call("DELETE", "/api/v1/tokens/" + std::to_string(created.body["id"].get<int>())).status,
      200);
  EXPECT_EQ(h.get("/api/v1/whoami", dan).status, 401);
  // An id beyond any integer is simply not a token (not a server error).
  EXPECT_EQ(h.call("DELETE", "/api/v1/tokens/99999999999999999999").status, 404);
  // Tokens are stored hashed.
  for (const auto& t : h.store().tokens()) EXPECT_NE(t.hash, dan);
}

// Who sees which budgets: members their budgets, what is below and the ancestors; managers and
// owners their subtree; admins everything. Nodes are visible to every person.
TEST(AuthMatrix, BudgetVisibility) {
  TempDir dir;
  Harness h(dir.file("a.db"));
  for (const char* p : {"/lab/a", "/lab/b/x", "/lab/b/y", "/other/c"}) {
    ASSERT_EQ(h.post("/api/v1/budgets", {{"path", p}, {"share", 1}}).status, 200);
  }
  ASSERT_EQ(h.post("/api/v1/budgets", {{"path", "/lab/a"}, {"members", {"ann"}}}).status, 200);
  ASSERT_EQ(h.post("/api/v1/budgets", {{"path", "/lab/b"}, {"members", {"ann"}}}).status, 200);
  ASSERT_EQ(h.post("/api/v1/budgets", {{"path", "/other"}, {"owners", {"olga"}}}).status, 200);
  auto seen = [&](const std::string& tok) {
    std::set<std::string> out;
    auto r = h.get("/api/v1/budgets", tok);
    EXPECT_EQ(r.status, 200) << r.body.dump();
    for (const auto& b : r.body["budgets"]) out.insert(b["path"].get<std::string>());
    return out;
  };
  using S = std::set<std::string>;
  EXPECT_EQ(seen(h.token("ann", "user")),
            (S{"/", "/lab", "/lab/a", "/lab/b", "/lab/b/x", "/lab/b/y"}));
  EXPECT_EQ(seen(h.token("bob", "user")), (S{}));
  EXPECT_EQ(seen(h.token("mgr", "manager", "/lab/b")),
            (S{"/", "/lab", "/lab/b", "/lab/b/x", "/lab/b/y"}));
  EXPECT_EQ(seen(h.token("olga", "user")), (S{"/", "/other", "/other/c"}));
  EXPECT_EQ(seen(h.admin()).size(), 8u);
  // Owners show in the tree.
  const auto tree = h.get("/api/v1/budgets").body;
  for (const auto& b : tree["budgets"]) {
    if (b["path"] == "/other") {
      EXPECT_EQ(b["owners"], json({"olga"}));
    }
  }
  ASSERT_EQ(h.post("/api/v1/nodes", {{"name", "g1"}, {"model", "H100"}, {"gpus", 8}}).status, 201);
  EXPECT_EQ(h.get("/api/v1/nodes", h.token("bob2", "user")).body["nodes"].size(), 1u);
}

TEST(Tls, ServesHttpsWithCertificateAndKey) {
  TempDir dir;
  const auto cert = dir.file("cert.pem"), key = dir.file("key.pem");
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " +
                          cert + " -days 1 -subj /CN=127.0.0.1 >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ApiOptions o;
  o.tls_cert = cert;
  o.tls_key = key;
  Harness h(dir.file("a.db"), o);
  httplib::SSLClient tls("127.0.0.1", h.port());
  tls.set_ca_cert_path(cert.c_str());
  tls.enable_server_certificate_verification(false);  // CN=127.0.0.1 has no subjectAltName
  auto r = Harness::send(tls, "GET", "/api/v1/whoami", "", h.admin());
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body["role"], "admin");
  httplib::Client plain("127.0.0.1", h.port());
  auto p = Harness::send(plain, "GET", "/api/v1/whoami", "", h.admin());
  EXPECT_NE(p.status, 200);
}

}  // namespace
}  // namespace allot::server
