// GET /metrics and the event log against a live server (tests/server/harness.h): the values of
// a few series after known events (submit, start, preempt, drain), `promtool check metrics` on
// the live text, who may scrape, the listener without a token, and the event log read back.
#include "server/prometheus.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "harness.h"
#include "server/event_log.h"

namespace allot::server::testing {
namespace {

// Every sample line as "name{labels}" -> value.
std::map<std::string, double> parse_samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

struct Scrape {
  int status = 0;
  std::string body, content_type;
};

Scrape scrape_at(int port, const std::string& token) {
  httplib::Client cli("127.0.0.1", port);
  httplib::Headers h;
  if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
  auto r = cli.Get("/metrics", h);
  if (!r) return {};
  return {r->status, r->body, r->get_header_value("Content-Type")};
}

std::vector<json> read_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object()) << "not a JSON object: " << line;
    out.push_back(j);
  }
  return out;
}

class Prometheus : public ::testing::Test {
 protected:
  void SetUp() override {
    metrics = std::make_shared<ServerMetrics>();
    auto log = EventLog::open(dir.file("events.jsonl"));
    ASSERT_TRUE(log.ok());
    ApiOptions api;
    api.prometheus = metrics;
    ControllerOptions base;
    base.observers = {metrics, log.value()};
    h = std::make_unique<Harness>(dir.file("allot.db"), api, 1'000'000, base);
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 1}}).status, 200);
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b"}, {"share", 1}}).status, 200);
    h->add_sim_nodes(1);
  }
  std::map<std::string, double> samples() {
    auto s = scrape_at(h->port(), h->admin());
    EXPECT_EQ(s.status, 200);
    return parse_samples(s.body);
  }
  // Job 1: /lab/a without a minimum runtime (unallocated); then job 2: /lab/b with one
  // (allocated), which takes job 1's GPUs.
  void submit_start_preempt() {
    auto a = job("a1", "/lab/a");
    a["resumable"] = true;  // back to the queue when stopped
    ASSERT_EQ(h->post("/api/v1/jobs", a).status, 201);
    h->sync();
    ASSERT_EQ(h->get("/api/v1/jobs/1").body["state"], "running");
    h->advance(100);
    auto b = job("b1", "/lab/b");
    b["min_runtime"] = 600;
    b["expected_duration"] = 100000;  // simulated: runs until stopped
    b["kind"] = "interactive";
    ASSERT_EQ(h->post("/api/v1/jobs", b).status, 201);
    h->sync();
    h->sync();
    ASSERT_EQ(h->get("/api/v1/jobs/2").body["state"], "running");
    ASSERT_EQ(h->get("/api/v1/jobs/1").body["state"], "requeued");
  }
  TempDir dir;
  std::shared_ptr<ServerMetrics> metrics;
  std::unique_ptr<Harness> h;
};

TEST_F(Prometheus, ValuesAfterSubmitStartAndPreempt) {
  submit_start_preempt();
  h->advance(5);
  h->sync();
  auto m = samples();
  EXPECT_EQ(m["allot_submissions_total{budget=\"/lab/a\",kind=\"batch\"}"], 1);
  EXPECT_EQ(m["allot_submissions_total{budget=\"/lab/b\",kind=\"interactive\"}"], 1);
  EXPECT_EQ(m["allot_preemptions_total{reason=\"unallocated\"}"], 1);
  EXPECT_EQ(m["allot_preemptions_total{reason=\"over_allocation\"}"], 0);
  EXPECT_EQ(m["allot_drains_total{reason=\"draining\"}"], 0);
  EXPECT_EQ(m["allot_budget_gpus{budget=\"/lab/b\",class=\"allocated\"}"], 8);
  EXPECT_EQ(m["allot_budget_gpus{budget=\"/lab/a\",class=\"unallocated\"}"], 0);
  EXPECT_EQ(m["allot_cluster_gpus{cluster=\"local\",model=\"H100\",state=\"allocated\"}"], 8);
  EXPECT_EQ(m["allot_cluster_gpus{cluster=\"local\",model=\"H100\",state=\"idle\"}"], 0);
  // Job 1 ran 100 s on 8 GPUs, unallocated, before it was stopped.
  EXPECT_EQ(m["allot_budget_delivered_gpu_seconds_total{budget=\"/lab/a\",class=\"unallocated\"}"],
            800);
  EXPECT_EQ(m["allot_jobs{state=\"running\"}"], 1);
  EXPECT_EQ(m["allot_jobs{state=\"requeued\"}"], 1);
  // Job 1 waits for the reason the API gives for it.
  const std::string code = h->get("/api/v1/jobs/1/why").body["code"];
  EXPECT_EQ(m["allot_jobs_pending{reason=\"" + code + "\",kind=\"batch\"}"], 1) << code;
  // Both started at once after joining the queue: two waits of 0 s, one per kind.
  EXPECT_EQ(m["allot_queue_wait_seconds_count{kind=\"batch\"}"], 1);
  EXPECT_EQ(m["allot_queue_wait_seconds_count{kind=\"interactive\"}"], 1);
  EXPECT_EQ(m["allot_queue_wait_seconds_bucket{kind=\"interactive\",le=\"1\"}"], 1);
  EXPECT_EQ(m["allot_job_transitions_total{from=\"running\",to=\"preempting\"}"], 1);
  EXPECT_GE(m["allot_scheduling_cycle_duration_seconds_count"], 3);
  EXPECT_GE(m["allot_store_commit_duration_seconds_count"], 3);
  EXPECT_EQ(m["allot_node_health{node=\"local-n0\",cluster=\"local\",state=\"healthy\"}"], 1);
  EXPECT_EQ(m["allot_api_requests_total{method=\"POST\",route=\"/api/v1/budgets\",code=\"200\"}"],
            2);
  EXPECT_EQ(m["allot_api_requests_total{method=\"POST\",route=\"/api/v1/jobs\",code=\"201\"}"], 2);
  // Each budget is entitled to half of the 8 GPUs; /lab/a asks for 8, so it is owed 4.
  EXPECT_EQ(m["allot_budget_entitled_gpus{budget=\"/lab/a\"}"], 4);
  EXPECT_EQ(m["allot_budget_owed_gpus{budget=\"/lab/a\"}"], 4);
  EXPECT_EQ(m["allot_budget_queue_rank{budget=\"/lab/a\"}"], 1);

  // A drain of the node stops job 2 once its minimum runtime is reached.
  ASSERT_EQ(h->post("/api/v1/nodes/local-n0/drain", {{"reason", "maintenance"}}).status, 200);
  h->advance(700);
  h->sync();
  m = samples();
  EXPECT_EQ(m["allot_drains_total{reason=\"draining\"}"], 1);
  EXPECT_EQ(m["allot_node_health{node=\"local-n0\",cluster=\"local\",state=\"draining\"}"], 1);
  EXPECT_EQ(m["allot_cluster_gpus{cluster=\"local\",model=\"H100\",state=\"draining\"}"], 8);
  EXPECT_EQ(m["allot_budget_gpus{budget=\"/lab/b\",class=\"allocated\"}"], 0);
}

TEST_F(Prometheus, PromtoolAcceptsTheLiveOutput) {
  submit_start_preempt();
  // A GPU sample from the node's agent, so that the DCGM-named series are in the output.
  h->ctl().set_node_telemetry("local-n0", json{{"time", h->now()},
                                               {"gpus",
                                                {{{"index", 0},
                                                  {"util_pct", 87.5},
                                                  {"mem_used_mib", 1000},
                                                  {"mem_total_mib", 81920},
                                                  {"temp_c", 61},
                                                  {"power_w", 350.5},
                                                  {"healthy", true}}}}}
                                              .dump());
  auto s = scrape_at(h->port(), h->admin());
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(s.content_type, kPrometheusContentType);
  auto m = parse_samples(s.body);
  const std::string gpu =
      "{gpu=\"0\",UUID=\"\",device=\"nvidia0\",model=\"H100\",Hostname=\"local-n0\","
      "cluster=\"local\"}";
  EXPECT_EQ(m["DCGM_FI_DEV_GPU_UTIL" + gpu], 87.5);
  EXPECT_EQ(m["DCGM_FI_DEV_FB_FREE" + gpu], 80920);
  EXPECT_EQ(m["allot_gpu_healthy" + gpu], 1);

  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool is not installed (Debian package prometheus; scripts/install-deps)";
  }
  const auto file = dir.file("metrics.txt");
  std::ofstream(file) << s.body;
  const auto out = dir.file("promtool.out");
  const int rc = std::system(("promtool check metrics < " + file + " > " + out + " 2>&1").c_str());
  std::ifstream in(out);
  std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << said;
}

TEST_F(Prometheus, OnlyAdminAndMetricsTokensScrape) {
  auto mt = h->post("/api/v1/tokens", {{"name", "prom"}, {"role", "metrics"}});
  ASSERT_EQ(mt.status, 201) << mt.body.dump();
  const std::string metrics_token = mt.body["token"];
  EXPECT_EQ(scrape_at(h->port(), metrics_token).status, 200);
  EXPECT_EQ(scrape_at(h->port(), "").status, 401);
  EXPECT_EQ(scrape_at(h->port(), h->token("alice", "user")).status, 403);
  // A metrics token reads nothing else.
  auto r = h->get("/api/v1/jobs", metrics_token);
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.body["error"]["field"], "Authorization");
  EXPECT_EQ(h->post("/api/v1/jobs", job("m1"), metrics_token).status, 403);
  // Every other route, read or write, refuses it.
  for (const auto& route : ApiServer::routes()) {
    if (route.path == "/metrics" || route.path == "/api/v1/health") continue;
    std::string path = std::regex_replace(route.path, std::regex(R"(\{[a-z_]+\})"), "1");
    auto r = h->raw(route.method, path, "{}", metrics_token);
    EXPECT_EQ(r.status, 403) << route.method << " " << path << ": " << r.body.dump();
  }
  EXPECT_EQ(h->post("/api/v1/tokens", {{"name", "p2"}, {"role", "metrics"}, {"scope", "/lab"}})
                .body["error"]["field"],
            "scope");
}

TEST_F(Prometheus, ListenerServesWithoutAToken) {
  MetricsListener listener(metrics, h->store(), h->ctl());
  auto port = listener.start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  auto s = scrape_at(port.value(), "");
  EXPECT_EQ(s.status, 200);
  EXPECT_NE(s.body.find("# TYPE allot_cluster_gpus gauge"), std::string::npos);
  httplib::Client cli("127.0.0.1", port.value());
  auto other = cli.Get("/api/v1/jobs");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);  // only /metrics is served there
  listener.stop();
}

TEST_F(Prometheus, EventLogReadsBackTransitionsStopsAndBudgetChanges) {
  submit_start_preempt();
  ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b"}, {"share", 3}}).status, 200);
  ASSERT_EQ(h->post("/api/v1/nodes/local-n0/drain", {{"reason", "maintenance"}}).status, 200);
  h->advance(700);
  h->sync();
  h.reset();  // stops the loop: every line is written
  auto lines = read_lines(dir.file("events.jsonl"));
  std::vector<std::string> job1;
  json preemption, drain, share, node;
  for (const auto& l : lines) {
    ASSERT_TRUE(l.contains("time") && l.contains("event")) << l.dump();
    if (l["event"] == "job" && l["job"] == 1) job1.push_back(l["to"]);
    if (l.value("stop", "") == "preemption") preemption = l;
    if (l.value("stop", "") == "drain") drain = l;
    if (l["event"] == "budget" && l["field"] == "share" && l["budget"] == "/lab/b") share = l;
    if (l["event"] == "node" && l["health"] == "draining") node = l;
  }
  EXPECT_EQ(job1,
            (std::vector<std::string>{"pending", "starting", "running", "preempting", "requeued"}));
  EXPECT_EQ(preemption["job"], 1);
  EXPECT_EQ(preemption["for_job"], 2);
  EXPECT_EQ(preemption["stop_reason"], "unallocated");
  EXPECT_EQ(preemption["budget"], "/lab/a");
  EXPECT_EQ(preemption["owner"], "root");
  EXPECT_EQ(preemption["time"], rfc3339(1'000'100));
  EXPECT_EQ(drain["job"], 2);
  EXPECT_EQ(drain["stop_reason"], "draining");
  EXPECT_EQ(drain["kind"], "interactive");
  EXPECT_EQ(share["old"], "1.0");
  EXPECT_EQ(share["new"], "3.0");
  EXPECT_EQ(share["actor"], "root");
  EXPECT_EQ(node["node"], "local-n0");
  EXPECT_EQ(node["reason"], "maintenance");
}

// The metric families a scrape declares (# TYPE lines): name -> type.
std::map<std::string, std::string> families(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    std::istringstream words(line.substr(7));
    std::string name, type;
    words >> name >> type;
    out[name] = type;
  }
  return out;
}

// The metric names an expression uses: allot_* and DCGM_FI_*, a histogram's series by family.
std::set<std::string> metric_names(const std::string& expr,
                                   const std::map<std::string, std::string>& fams) {
  static const std::regex name(R"((allot_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+))");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(expr.begin(), expr.end(), name); it != std::sregex_iterator();
       ++it) {
    std::string n = (*it)[1];
    for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
      if (n.size() > suffix.size() &&
          n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
        const auto base = n.substr(0, n.size() - suffix.size());
        if (fams.count(base) && fams.at(base) == "histogram") n = base;
      }
    }
    out.insert(n);
  }
  return out;
}

TEST_F(Prometheus, GrafanaDashboardUsesOnlyExportedMetrics) {
  submit_start_preempt();
  h->ctl().set_node_telemetry(
      "local-n0", json{{"time", h->now()}, {"gpus", {{{"index", 0}, {"util_pct", 50}}}}}.dump());
  const auto fams = families(scrape_at(h->port(), h->admin()).body);
  ASSERT_GT(fams.size(), 20u);
  std::ifstream in(std::string(ALLOT_SOURCE_DIR) + "/deploy/grafana/allot.json");
  ASSERT_TRUE(in) << "deploy/grafana/allot.json is missing";
  auto dash = json::parse(in, nullptr, false);
  ASSERT_FALSE(dash.is_discarded()) << "deploy/grafana/allot.json is not valid JSON";
  ASSERT_TRUE(dash["panels"].is_array());
  int graphs = 0;
  std::set<std::string> used;
  for (const auto& p : dash["panels"]) {
    if (p["type"] == "row") continue;
    ++graphs;
    const std::string title = p.value("title", "");
    ASSERT_TRUE(p.contains("targets") && !p["targets"].empty()) << title << ": no query";
    for (const auto& t : p["targets"]) {
      const std::string expr = t.value("expr", "");
      auto names = metric_names(expr, fams);
      EXPECT_FALSE(names.empty()) << title << ": '" << expr << "' names no allot or DCGM metric";
      for (const auto& n : names) {
        EXPECT_TRUE(fams.count(n)) << title << ": '" << n << "' is not exported";
        used.insert(n);
      }
    }
  }
  EXPECT_GE(graphs, 15);
  for (const auto& v : dash["templating"]["list"]) {
    if (v["type"] != "query") continue;
    for (const auto& n : metric_names(v.value("definition", ""), fams)) {
      EXPECT_TRUE(fams.count(n)) << "variable " << v["name"] << ": '" << n << "' is not exported";
    }
  }
  // The issue's list: each is on the dashboard.
  for (const char* n :
       {"allot_budget_gpus", "allot_budget_delivered_gpu_seconds_total",
        "allot_budget_owed_gpu_seconds_total", "allot_budget_queue_rank", "allot_cluster_gpus",
        "allot_jobs_pending", "allot_queue_wait_seconds", "allot_preemptions_total",
        "allot_drains_total", "allot_scheduling_cycle_duration_seconds", "allot_submissions_total",
        "allot_api_request_duration_seconds", "allot_store_commit_duration_seconds",
        "allot_node_health", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"}) {
    EXPECT_TRUE(used.count(n)) << n << " is on no panel";
  }
}

TEST(EventLog, RefusesAFileItCannotOpen) {
  auto log = EventLog::open("/nonexistent-dir/events.jsonl");
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.error().field, "event_log");
}

TEST(EventLog, TimesAreRfc3339Utc) {
  EXPECT_EQ(rfc3339(0), "1970-01-01T00:00:00Z");
  EXPECT_EQ(rfc3339(1'800'000'000), "2027-01-15T08:00:00Z");
}

TEST(StopReason, ClassifiesTheLoopsReasons) {
  bool drain = true;
  EXPECT_EQ(stop_reason("preempted for job 24 after running 5m: it ran unallocated (beyond its "
                        "budget or with minimum runtime 0), so any funded job may take its GPUs",
                        drain),
            "unallocated");
  EXPECT_FALSE(drain);
  EXPECT_EQ(stop_reason("preempted for job 3 after running 2h: it was past its minimum runtime "
                        "and /a stands at 150% of its allocation against 20% for /b",
                        drain),
            "over_allocation");
  EXPECT_EQ(stop_reason("node n1 is draining (draining: maintenance) and the job reached its "
                        "minimum runtime; requeued",
                        drain),
            "draining");
  EXPECT_TRUE(drain);
  EXPECT_EQ(stop_reason("node n1 went down; requeued", drain), "node_down");
  EXPECT_EQ(stop_reason("lost on n1 (its agent no longer runs it)", drain), "lost");
}

}  // namespace
}  // namespace allot::server::testing
