// The web dashboard on the API's port (server/api_dashboard.cpp): its files with their content
// types, a strict Content-Security-Policy and revalidated caching; the app for UI paths; the
// API's JSON 404 kept; and the two read-only views it needs (GET /gpus, GET /queue).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "harness.h"
#include "server/web_assets.h"

namespace allot::server {
namespace {

using testing::Harness;
using testing::job;
using testing::TempDir;

std::string source_file(const std::string& rel) {
  std::ifstream in(std::string(ALLOT_SOURCE_DIR) + "/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Dashboard : public ::testing::Test {
 protected:
  void SetUp() override {
    h = std::make_unique<Harness>(dir.file("allot.db"));
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 3}}).status, 200);
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b"}, {"share", 1}}).status, 200);
  }
  httplib::Result fetch(const std::string& path, httplib::Headers headers = {}) {
    httplib::Client cli("127.0.0.1", h->port());
    return cli.Get(path, headers);
  }
  TempDir dir;
  std::unique_ptr<Harness> h;
};

TEST(WebAssets, EveryFileUnderWebIsCompiledInByteForByte) {
  const auto all = web_assets();
  ASSERT_GE(all.size(), 4u);
  bool index = false;
  for (const auto& a : all) {
    EXPECT_EQ(std::string(a.body), source_file("web" + std::string(a.path))) << a.path;
    index = index || a.path == "/index.html";
  }
  EXPECT_TRUE(index);
}

TEST(WebAssets, ContentTypesByExtension) {
  EXPECT_EQ(content_type_for("/index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(content_type_for("/app.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(content_type_for("/pages/queue.js"), "text/javascript; charset=utf-8");
  EXPECT_EQ(content_type_for("/style.css"), "text/css; charset=utf-8");
  EXPECT_EQ(content_type_for("/logo.svg"), "image/svg+xml");
  EXPECT_EQ(content_type_for("/blob"), "application/octet-stream");
}

TEST_F(Dashboard, ServesTheAppWithoutATokenAndWithStrictHeaders) {
  auto r = fetch("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(r->body, source_file("web/index.html"));
  const auto csp = r->get_header_value("Content-Security-Policy");
  EXPECT_EQ(csp, std::string(kDashboardCsp));
  EXPECT_NE(csp.find("default-src 'none'"), std::string::npos);
  EXPECT_NE(csp.find("script-src 'self'"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos);
  EXPECT_EQ(csp.find("unsafe-eval"), std::string::npos);
  EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos);
  EXPECT_EQ(r->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_EQ(r->get_header_value("Cache-Control"), "no-cache");
  EXPECT_FALSE(r->get_header_value("ETag").empty());
  // No cookie is ever set: the token travels as a header the app adds, so no CSRF surface.
  EXPECT_FALSE(r->has_header("Set-Cookie"));

  auto js = fetch("/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(js->body, source_file("web/app.js"));
  auto css = fetch("/style.css");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->get_header_value("Content-Type"), "text/css; charset=utf-8");
  // The bundle's stylesheet (uPlot's), and not the sources or the npm project it is built from.
  auto bundled = fetch("/app.css");
  ASSERT_TRUE(bundled);
  EXPECT_EQ(bundled->status, 200);
  EXPECT_EQ(bundled->get_header_value("Content-Type"), "text/css; charset=utf-8");
  EXPECT_EQ(bundled->body, source_file("web/app.css"));
  for (const char* path : {"/src/app.ts", "/package.json", "/build.mjs", "/tsconfig.json"}) {
    auto r = fetch(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << path;
  }
}

TEST_F(Dashboard, AnUnchangedFileIsRevalidatedWithA304) {
  auto r = fetch("/app.js");
  ASSERT_TRUE(r);
  const auto etag = r->get_header_value("ETag");
  auto again = fetch("/app.js", {{"If-None-Match", etag}});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 304);
  EXPECT_TRUE(again->body.empty());
  auto other = fetch("/app.js", {{"If-None-Match", "\"stale\""}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200);
  EXPECT_NE(fetch("/style.css")->get_header_value("ETag"), etag);
}

TEST_F(Dashboard, UiPathsFallBackToTheAppAndApiPathsKeepTheirJson404) {
  for (const char* path : {"/queue", "/jobs/17", "/nodes", "/budgets", "/me", "/a/b/c"}) {
    auto r = fetch(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_EQ(r->body, source_file("web/index.html")) << path;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8") << path;
  }
  // A file name that is not there is a 404, not the app (a stale script would run the page).
  auto missing = fetch("/old-bundle.js");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->get_header_value("Content-Type"), "application/json");
  for (const char* path : {"/api/v1/nope", "/api/v1", "/api", "/api/other"}) {
    auto r = fetch(path, {{"Authorization", "Bearer " + h->admin()}});
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json") << path;
    auto body = nlohmann::json::parse(r->body, nullptr, false);
    EXPECT_EQ(body["error"]["field"], "path") << path << " " << r->body;
  }
  // The API and /metrics are still answered by their routes.
  EXPECT_EQ(h->get("/api/v1/whoami").status, 200);
  EXPECT_EQ(h->get("/api/v1/whoami", "-").status, 401);
  auto m = fetch("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->status, 200);  // needs a token
  EXPECT_NE(m->body, source_file("web/index.html"));
}

TEST_F(Dashboard, GpusViewGivesEachGpusStateAndHeldGpusPerBudget) {
  h->add_sim_nodes(2);
  ASSERT_EQ(h->post("/api/v1/jobs", job("a1", "/lab/a", 8)).status, 201);
  auto b = job("b1", "/lab/b", 4);
  ASSERT_EQ(h->post("/api/v1/jobs", b).status, 201);
  h->sync();
  ASSERT_EQ(h->post("/api/v1/nodes/local-n1/cordon", nlohmann::json::object()).status, 200);
  auto r = h->get("/api/v1/gpus");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  ASSERT_EQ(r.body["nodes"].size(), 2u);
  std::map<std::string, int> states;
  int held = 0;
  for (const auto& n : r.body["nodes"]) {
    ASSERT_EQ(n["gpus"].size(), 8u);
    for (const auto& g : n["gpus"]) {
      ++states[g["state"].get<std::string>()];
      if (g["milli"].get<int>() > 0) {
        ++held;
        EXPECT_EQ(g["jobs"].size(), 1u);  // the admin sees every job
      }
    }
  }
  EXPECT_EQ(held, 12);
  EXPECT_EQ(states["allocated"] + states["unallocated"], 12);
  // The cordoned node's free GPUs are draining, whichever node that is.
  EXPECT_EQ(states["idle"] + states["draining"], 4);
  ASSERT_EQ(r.body["by_model"].size(), 1u);
  EXPECT_EQ(r.body["by_model"][0]["model"], "H100");
  const auto& bud = r.body["budgets"];
  EXPECT_EQ(
      bud["/lab/a"]["allocated_milli"].get<int>() + bud["/lab/a"]["unallocated_milli"].get<int>(),
      8000);
  EXPECT_EQ(bud["/lab"]["allocated_milli"].get<int>() + bud["/lab"]["unallocated_milli"].get<int>(),
            12000);
  EXPECT_EQ(bud["/"]["allocated_milli"].get<int>() + bud["/"]["unallocated_milli"].get<int>(),
            12000);

  // A user sees the GPUs' states but no job of anyone else.
  ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b"}, {"members", {"bo"}}}).status, 200);
  const auto bo = h->token("bo", "user");
  auto u = h->get("/api/v1/gpus", bo);
  ASSERT_EQ(u.status, 200);
  int hidden = 0, shown = 0;
  for (const auto& n : u.body["nodes"]) {
    for (const auto& g : n["gpus"]) {
      hidden += g["other_jobs"].get<int>();
      shown += static_cast<int>(g["jobs"].size());
    }
  }
  EXPECT_EQ(hidden, 12);
  EXPECT_EQ(shown, 0);  // job 2 is root's, in bo's budget: a user sees only its own jobs
  EXPECT_TRUE(u.body["budgets"].contains("/lab/b"));
  EXPECT_FALSE(u.body["budgets"].contains("/lab/a"));
  EXPECT_EQ(h->get("/api/v1/gpus?x=1").status, 400);
}

// Fragmentation: idle GPUs that no waiting job can use. One node of 8 GPUs runs a 5-GPU job;
// a 4-GPU job waits, so the 3 free GPUs are fragmented.
TEST_F(Dashboard, GpusViewCountsIdleGpusNoWaitingJobCanUse) {
  h->add_sim_nodes(1);
  ASSERT_EQ(h->post("/api/v1/jobs", job("five", "/lab/a", 5)).status, 201);
  h->sync();
  auto idle = h->get("/api/v1/gpus");
  ASSERT_EQ(idle.status, 200) << idle.body.dump();
  ASSERT_EQ(idle.body["clusters"].size(), 1u) << idle.body.dump();
  EXPECT_EQ(idle.body["clusters"][0]["free_gpus"], 3);
  EXPECT_EQ(idle.body["clusters"][0]["largest_waiting_per_node"], 0);
  EXPECT_EQ(idle.body["clusters"][0]["fragmented_gpus"], 0);  // nothing waits: none is stranded

  ASSERT_EQ(h->post("/api/v1/jobs", job("four", "/lab/a", 4)).status, 201);
  h->sync();
  auto r = h->get("/api/v1/gpus");
  ASSERT_EQ(r.status, 200);
  const auto& c = r.body["clusters"][0];
  EXPECT_EQ(c["name"], r.body["nodes"][0]["cluster"]);
  EXPECT_EQ(c["free_gpus"], 3);
  EXPECT_EQ(c["largest_waiting_per_node"], 4);
  EXPECT_EQ(c["fragmented_gpus"], 3) << r.body.dump();
  EXPECT_GE(r.body["explained_at"].get<core::Time>(), idle.body["explained_at"].get<core::Time>());
}

// A draining node is empty once each job reaches its drain deadline (its minimum runtime, or its
// protection's end): that, not the jobs' expected end, is its ETA. A cordoned node keeps its
// jobs to their end.
TEST_F(Dashboard, GpusViewGivesADrainingNodeItsDrainDeadline) {
  h->add_sim_nodes(2);
  for (const char* k : {"long1", "long2"}) {
    auto j = job(k, "/lab/a", 8);
    j["min_runtime"] = 600;
    j["expected_duration"] = 36000;
    ASSERT_EQ(h->post("/api/v1/jobs", j).status, 201);
  }
  h->sync();
  const core::Time started = h->now();
  ASSERT_EQ(h->post("/api/v1/nodes/local-n0/drain", nlohmann::json::object()).status, 200);
  ASSERT_EQ(h->post("/api/v1/nodes/local-n1/cordon", nlohmann::json::object()).status, 200);
  auto r = h->get("/api/v1/gpus");
  ASSERT_EQ(r.status, 200) << r.body.dump();
  std::map<std::string, nlohmann::json> eta;
  for (const auto& n : r.body["nodes"]) eta[n["name"]] = n["drain_eta"];
  ASSERT_TRUE(eta["local-n0"].is_number()) << r.body.dump();
  // The allocated job's protection ends 600 s after its start (its contract is counted from the
  // simulated start, the same second here).
  EXPECT_EQ(eta["local-n0"].get<core::Time>(), started + 600);
  EXPECT_EQ(eta["local-n1"].get<core::Time>(), started + 36000);
}

TEST_F(Dashboard, QueueViewRanksWaitingJobsWithReasonsAndFilters) {
  h->add_sim_nodes(1);
  ASSERT_EQ(h->post("/api/v1/jobs", job("run", "/lab/a", 8)).status, 201);
  ASSERT_EQ(h->post("/api/v1/jobs", job("w1", "/lab/a", 8)).status, 201);
  auto inter = job("w2", "/lab/b", 8);
  inter["kind"] = "interactive";
  ASSERT_EQ(h->post("/api/v1/jobs", inter).status, 201);
  h->sync();
  auto q = h->get("/api/v1/queue");
  ASSERT_EQ(q.status, 200) << q.body.dump();
  ASSERT_EQ(q.body["jobs"].size(), 2u);
  EXPECT_EQ(q.body["waiting"], 2);
  std::int64_t counted = 0;
  for (const auto& [code, n] : q.body["by_reason"].items()) counted += n.get<std::int64_t>();
  EXPECT_EQ(counted, 2);
  EXPECT_LT(q.body["jobs"][0]["rank"].get<int>(), q.body["jobs"][1]["rank"].get<int>());
  for (const auto& j : q.body["jobs"]) {
    EXPECT_FALSE(j["explanation"].get<std::string>().empty());
    EXPECT_NE(j["code"], "not-yet-considered");
    // The same reason GET /jobs/{id}/why gives.
    auto why = h->get("/api/v1/jobs/" + std::to_string(j["id"].get<int>()) + "/why");
    EXPECT_EQ(j["code"], why.body["code"]);
    EXPECT_EQ(j["rank"], why.body["rank"]);
  }
  auto k = h->get("/api/v1/queue?kind=interactive");
  ASSERT_EQ(k.body["jobs"].size(), 1u);
  EXPECT_EQ(k.body["jobs"][0]["budget"], "/lab/b");
  EXPECT_EQ(k.body["jobs"][0]["kind"], "interactive");
  auto bb = h->get("/api/v1/queue?budget=/lab/a");
  ASSERT_EQ(bb.body["jobs"].size(), 1u);
  EXPECT_EQ(bb.body["jobs"][0]["id"], 2);
  EXPECT_EQ(h->get("/api/v1/queue?owner=nobody").body["jobs"].size(), 0u);
  auto lim = h->get("/api/v1/queue?limit=1");
  EXPECT_EQ(lim.body["jobs"].size(), 1u);
  EXPECT_TRUE(lim.body["truncated"].get<bool>());

  // A job submitted after the last explaining cycle is listed, after the ranked ones.
  ASSERT_EQ(h->post("/api/v1/jobs", job("late", "/lab/a", 8)).status, 201);
  auto late = h->get("/api/v1/queue");
  ASSERT_EQ(late.body["jobs"].size(), 3u);
  EXPECT_EQ(late.body["jobs"][2]["code"], "not-yet-considered");

  // A user sees only its own waiting jobs; the counts by reason stay the whole queue's.
  ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b"}, {"members", {"bo"}}}).status, 200);
  const auto bo = h->token("bo", "user");
  auto u = h->get("/api/v1/queue", bo);
  ASSERT_EQ(u.status, 200);
  EXPECT_EQ(u.body["jobs"].size(), 0u);
  EXPECT_EQ(h->get("/api/v1/queue?owner=root", bo).status, 403);

  for (const char* bad :
       {"kind=huge", "limit=0", "limit=1001", "budget=lab", "owner=a%20b", "colour=red"}) {
    auto r = h->get(std::string("/api/v1/queue?") + bad);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_FALSE(r.body["error"]["field"].get<std::string>().empty()) << bad;
  }
}

}  // namespace
}  // namespace allot::server
