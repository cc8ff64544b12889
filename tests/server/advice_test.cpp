// Right-sizing advice (server/advice.h): the interval classifier's and the summariser's rules,
// the recent-shapes history behind the submission hint, and GET /advice over real HTTP with its
// role rules, fed by agent telemetry posts on a test clock.
#include "server/advice.h"

#include <gtest/gtest.h>

#include "harness.h"
#include "server/shape_history.h"

namespace allot::server {
namespace {

using testing::Harness;
using testing::json;
using testing::TempDir;
using R = AdviceRules;

store::TelemetryRecord summary(double seconds, double util, std::int64_t peak, std::int64_t total,
                               double idle = 0, double starved = 0, double gpus = 1) {
  store::TelemetryRecord t;
  t.samples = static_cast<std::int64_t>(seconds);
  t.seconds = seconds;
  t.gpu_seconds = seconds * gpus;
  t.util_sum = util * static_cast<double>(t.samples);
  t.mem_peak_mib = peak;
  t.mem_total_mib = total;
  t.idle_seconds = idle;
  t.starved_seconds = starved;
  return t;
}

std::vector<std::string> reasons(const std::vector<AdviceItem>& items) {
  std::vector<std::string> out;
  for (const auto& i : items) out.push_back(i.reason);
  return out;
}

TEST(Advice, AnIntervalIsStarvedWhenLowGpuUseMeetsABusyPipelineAndIdleOtherwise) {
  // Low GPU use, CPU at its limit of 4 CPUs: starved (not idle, though below the idle line).
  EXPECT_TRUE(classify_interval(5, 380, 0, -1, -1, 4).starved);
  EXPECT_FALSE(classify_interval(5, 380, 0, -1, -1, 4).idle);
  // The same CPU with more CPUs allowed is not saturated: idle.
  EXPECT_TRUE(classify_interval(5, 380, 0, -1, -1, 16).idle);
  // No CPU limit: one core saturated is enough (a single-threaded loader).
  EXPECT_TRUE(classify_interval(30, 95, 0, -1, -1, 0).starved);
  // I/O wait, or the cgroup's I/O pressure, at the threshold.
  EXPECT_TRUE(classify_interval(30, 10, R::kStarvedIoPct, -1, -1, 0).starved);
  EXPECT_TRUE(classify_interval(30, 10, 0, -1, R::kStarvedIoPct, 0).starved);
  EXPECT_FALSE(classify_interval(30, 10, 0, -1, R::kStarvedIoPct - 1, 0).starved);
  // CPU pressure: tasks waiting for a CPU.
  EXPECT_TRUE(classify_interval(30, 10, 0, R::kStarvedCpuPressurePct, -1, 0).starved);
  // Busy GPUs are neither, whatever the pipeline does.
  EXPECT_FALSE(classify_interval(R::kStarvedUtilPct, 400, 90, 90, 90, 1).starved);
  EXPECT_FALSE(classify_interval(R::kIdleUtilPct, 0, 0, -1, -1, 0).idle);
  EXPECT_TRUE(classify_interval(R::kIdleUtilPct - 0.1, 0, 0, -1, -1, 0).idle);
}

TEST(Advice, AJobIsNamedForEachWasteAndAFullyUsedOneForNone) {
  const auto cat = core::GpuCatalog::standard();
  const json one = {{"gpus_per_node", 1}};
  const json eight = {{"gpus_per_node", 8}};
  const std::int64_t h100 = 81559;
  // Busy and needs its memory: nothing.
  EXPECT_TRUE(job_advice(summary(3600, 95, 70000, h100), one, cat).empty());
  // Too short to judge.
  EXPECT_TRUE(job_advice(summary(300, 0, 100, h100, 300), one, cat).empty());
  // Idle for at least half the time measured; not below it.
  EXPECT_EQ(reasons(job_advice(summary(3600, 40, 70000, h100, 1800), one, cat)),
            std::vector<std::string>{"idle"});
  EXPECT_TRUE(job_advice(summary(3600, 40, 70000, h100, 1799), one, cat).empty());
  // Starved.
  auto s = job_advice(summary(3600, 20, 70000, h100, 0, 2000), one, cat);
  ASSERT_EQ(reasons(s), std::vector<std::string>{"starved"});
  EXPECT_NE(s[0].hint.find("data pipeline"), std::string::npos) << s[0].hint;
  // One GPU, 4 GiB peak of 80: a MIG slice.
  auto m = job_advice(summary(3600, 90, 4000, h100), one, cat);
  ASSERT_EQ(reasons(m), std::vector<std::string>{"oversized-memory"});
  EXPECT_EQ(m[0].suggestion, "MIG 1g.10gb") << m[0].hint;
  // The same on an H200: the profile its GPUs offer, not an 80 GB GPU's name.
  auto m200 = job_advice(summary(3600, 90, 15000, 143771), one, cat);  // 16.1 GiB with headroom
  ASSERT_EQ(reasons(m200), std::vector<std::string>{"oversized-memory"});
  EXPECT_EQ(m200[0].suggestion, "MIG 1g.18gb") << m200[0].hint;
  // Eight GPUs whose memory peaked at two GPUs' worth (with headroom: 3): fewer GPUs.
  auto f = job_advice(summary(3600, 90, 2 * 75000, 8 * h100, 0, 0, 8), eight, cat);
  ASSERT_EQ(reasons(f), std::vector<std::string>{"oversized-memory"});
  EXPECT_EQ(f[0].suggestion, "3 GPUs") << f[0].hint;
  // Just over the memory share: not oversized.
  EXPECT_TRUE(
      job_advice(summary(3600, 90, static_cast<std::int64_t>(R::kMemoryShare * h100) + 1, h100),
                 one, cat)
          .empty());
  // The summary's rule min_seconds is the server's option.
  AdviceRules quick;
  quick.min_seconds = 10;
  EXPECT_EQ(reasons(job_advice(summary(20, 0, 70000, h100, 20), one, cat, quick)),
            std::vector<std::string>{"idle"});
}

MeasuredJob measured(JobId id, const json& spec, std::int64_t peak, std::int64_t total,
                     double seconds = 3600) {
  MeasuredJob m;
  m.job.id = id;
  m.job.budget = "/lab/a";
  m.job.spec_json = spec.dump();
  m.telemetry = summary(seconds, 90, peak, total);
  return m;
}

TEST(Advice, TheSubmissionHintNeedsEnoughRecentJobsOfTheShapeAllUsingLittle) {
  const json eight = {{"nodes", 1}, {"gpus_per_node", 8}, {"gpu_milli", 1000}};
  const json four = {{"nodes", 1}, {"gpus_per_node", 4}, {"gpu_milli", 1000}};
  const std::int64_t total = 8 * 81559;
  std::vector<MeasuredJob> recent;
  for (JobId id = 9; id >= 5; --id) recent.push_back(measured(id, eight, 100000, total));
  const auto h = submission_hint(eight, recent);
  EXPECT_NE(h.find("last 5 jobs of 8 GPUs"), std::string::npos) << h;
  EXPECT_NE(h.find("2 GPUs' worth"), std::string::npos) << h;
  // Another shape: none of these count.
  EXPECT_EQ(submission_hint(four, recent), "");
  // Fewer than kHintMinJobs measured long enough: no hint.
  std::vector<MeasuredJob> few(recent.begin(), recent.begin() + R::kHintMinJobs - 1);
  few.push_back(measured(4, eight, 100000, total, 60));
  EXPECT_EQ(submission_hint(eight, few), "");
  // One recent job used its memory: no hint.
  recent.insert(recent.begin(), measured(10, eight, total - 1, total));
  EXPECT_EQ(submission_hint(eight, recent), "");
}

TEST(Advice, ShapeHistoryKeepsTheNewestJobsPerBudgetAndShape) {
  ShapeHistory hist;
  const std::string eight = json{{"nodes", 1}, {"gpus_per_node", 8}}.dump();
  const std::string one = json{{"nodes", 1}, {"gpus_per_node", 1}}.dump();
  for (JobId id = 1; id <= 8; ++id) {
    store::TelemetryRecord d = summary(10, 90, static_cast<std::int64_t>(id) * 100, 1000);
    d.job = id;
    d.budget = "/lab/a";
    hist.add(d, eight);
    hist.add(d, eight);  // a second report adds up
  }
  auto r = hist.recent("/lab/a", eight);
  ASSERT_EQ(r.size(), ShapeHistory::kJobs);
  EXPECT_EQ(r.front().job.id, 8u);
  EXPECT_DOUBLE_EQ(r.front().telemetry.seconds, 20);
  EXPECT_EQ(r.front().telemetry.mem_peak_mib, 800);
  EXPECT_TRUE(hist.recent("/lab/a", one).empty());
  EXPECT_TRUE(hist.recent("/lab/b", eight).empty());
}

// Over HTTP: ann's idle, starved and small jobs are named; bob's busy one is not; who sees what.
class AdviceApi : public ::testing::Test {
 protected:
  void SetUp() override {
    ApiOptions api;
    api.advice.min_seconds = 60;
    h = std::make_unique<Harness>(dir.file("allot.db"), api, 1'000'000);
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"members", {"ann", "bob"}}}).status,
              200);
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b"}, {"members", {"cat"}}}).status, 200);
    agent = h->token("agent-n1", "agent", "n1");
    auto r = h->post("/api/v1/nodes",
                     {{"name", "n1"}, {"cluster", "c1"}, {"model", "H100"}, {"gpus", 8}}, agent);
    ASSERT_EQ(r.status, 201) << r.body.dump();
  }
  JobId start(json body, const std::string& as) {
    body["idempotency_key"] = "k" + std::to_string(++keys);
    auto r = h->post("/api/v1/jobs", body, h->token(as, "user"));
    EXPECT_EQ(r.status, 201) << r.body.dump();
    const auto id = r.body.value("id", JobId{0});
    h->sync();
    auto rep = h->post("/api/v1/agent/nodes/n1/reports",
                       {{"reports", {{{"job", id}, {"run", 1}, {"event", "started"}}}}}, agent);
    EXPECT_EQ(rep.status, 200) << rep.body.dump();
    return id;
  }
  json entry(JobId id, double util, std::int64_t mem, std::int64_t total, double cpu) {
    return {{"job", id},
            {"run", 1},
            {"samples", 10},
            {"seconds", 10},
            {"gpu_util_mean", util},
            {"gpu_util_peak", util},
            {"mem_used_peak_mib", mem},
            {"mem_total_mib", total},
            {"cpu_pct_mean", cpu},
            {"io_wait_pct_mean", 0}};
  }
  TempDir dir;
  std::unique_ptr<Harness> h;
  std::string agent;
  int keys = 0;
};

json named(const json& report, JobId id) {
  for (const auto& j : report["jobs"]) {
    if (j["id"] == id) return j;
  }
  return nullptr;
}

std::vector<std::string> reasons_of(const json& j) {
  std::vector<std::string> out;
  if (!j.is_object()) return out;
  for (const auto& a : j["advice"]) out.push_back(a["reason"]);
  return out;
}

TEST_F(AdviceApi, AdviseNamesEachWastefulJobWithItsReasonAndFollowsTheRoleRules) {
  const std::int64_t h100 = 81559;
  auto spec = [](int gpus, double cpus) {
    json b = {{"budget", "/lab/a"}, {"gpus_per_node", gpus}};
    if (cpus > 0) b["cpus"] = cpus;
    return b;
  };
  const auto idle = start(spec(1, 0), "ann");
  const auto starved = start(spec(1, 2), "ann");
  const auto small = start(spec(1, 0), "ann");
  const auto busy = start(spec(2, 0), "bob");
  for (int i = 0; i < 9; ++i) {
    h->advance(10);
    auto r =
        h->post("/api/v1/agent/nodes/n1/telemetry",
                {{"time", h->now()},
                 {"jobs",
                  {entry(idle, 2, 60000, h100, 1), entry(starved, 8, 60000, h100, 199),
                   entry(small, 90, 3000, h100, 50), entry(busy, 97, 2 * 75000, 2 * h100, 100)}}},
                agent);
    ASSERT_EQ(r.status, 200) << r.body.dump();
    ASSERT_EQ(r.body["accepted"], 4) << r.body.dump();
  }
  auto a = h->get("/api/v1/advice");
  ASSERT_EQ(a.status, 200) << a.body.dump();
  EXPECT_EQ(reasons_of(named(a.body, idle)), std::vector<std::string>{"idle"}) << a.body.dump();
  EXPECT_EQ(reasons_of(named(a.body, starved)), std::vector<std::string>{"starved"});
  EXPECT_EQ(reasons_of(named(a.body, small)), std::vector<std::string>{"oversized-memory"});
  EXPECT_TRUE(named(a.body, busy).is_null()) << a.body.dump();
  ASSERT_EQ(a.body["budgets"].size(), 1u);
  const auto& b = a.body["budgets"][0];
  EXPECT_EQ(b["budget"], "/lab/a");
  EXPECT_EQ(b["jobs_measured"], 4);
  EXPECT_EQ(b["jobs_named"], 3);
  EXPECT_NEAR(b["idle_gpu_hours"].get<double>(), 90.0 / 3600, 1e-9);
  // The job's own telemetry carries the same advice (allot show, the dashboard).
  auto t = h->get("/api/v1/jobs/" + std::to_string(starved) + "/telemetry");
  ASSERT_EQ(t.body["advice"].size(), 1u) << t.body.dump();
  EXPECT_EQ(t.body["advice"][0]["reason"], "starved");
  // Users see their own; bob's busy job is not advice, so bob sees none; ann may not ask for bob.
  auto ann = h->get("/api/v1/advice", h->token("ann", "user"));
  ASSERT_EQ(ann.status, 200);
  EXPECT_EQ(ann.body["jobs"].size(), 3u);
  EXPECT_EQ(h->get("/api/v1/advice?user=bob", h->token("ann", "user")).status, 403);
  auto bob = h->get("/api/v1/advice", h->token("bob", "user"));
  EXPECT_TRUE(bob.body["jobs"].empty()) << bob.body.dump();
  EXPECT_EQ(bob.body["budgets"][0]["jobs_measured"], 1);
  // A manager of /lab/b sees nothing of /lab/a; of /lab all of it; filters narrow.
  EXPECT_TRUE(h->get("/api/v1/advice", h->token("mb", "manager", "/lab/b")).body["jobs"].empty());
  EXPECT_EQ(h->get("/api/v1/advice", h->token("ml", "manager", "/lab")).body["jobs"].size(), 3u);
  EXPECT_EQ(h->get("/api/v1/advice?budget=/lab/b").body["jobs"].size(), 0u);
  EXPECT_EQ(h->get("/api/v1/advice?user=ann").body["jobs"].size(), 3u);
  // Bad input names the field.
  EXPECT_EQ(h->get("/api/v1/advice?budget=lab").body["error"]["field"], "budget");
  EXPECT_EQ(h->get("/api/v1/advice?days=0").body["error"]["field"], "days");
  EXPECT_EQ(h->get("/api/v1/advice?since=1").body["error"]["field"], "since");
  EXPECT_EQ(h->get("/api/v1/advice", agent).status, 403);
}

TEST_F(AdviceApi, ASubmissionLikeRecentSmallJobsGetsAHintAndIsQueuedAllTheSame) {
  const std::int64_t h100 = 81559;
  const json one = {{"budget", "/lab/a"}, {"gpus_per_node", 1}};
  const json two = {{"budget", "/lab/a"}, {"gpus_per_node", 2}};
  std::vector<JobId> small;
  for (int i = 0; i < 3; ++i) small.push_back(start(one, "ann"));
  const auto busy = start(two, "bob");
  for (int i = 0; i < 7; ++i) {
    h->advance(10);
    json jobs = {entry(busy, 97, 2 * 75000, 2 * h100, 100)};
    for (auto id : small) jobs.push_back(entry(id, 90, 20000 + 1000 * i, h100, 100));
    auto r =
        h->post("/api/v1/agent/nodes/n1/telemetry", {{"time", h->now()}, {"jobs", jobs}}, agent);
    ASSERT_EQ(r.status, 200) << r.body.dump();
  }
  // ann's last 3 one-GPU jobs peaked at 26000 MiB of 81559 (32%).
  auto with_key = [](json b, const char* k) {
    b["idempotency_key"] = k;
    return b;
  };
  auto s = h->post("/api/v1/jobs", with_key(one, "again1"), h->token("ann", "user"));
  ASSERT_EQ(s.status, 201) << s.body.dump();
  EXPECT_NE(s.body.value("hint", "").find("last 3 jobs of 1 GPU used at most 32%"),
            std::string::npos)
      << s.body.dump();
  // The budget's two-GPU shape has one job, which used its memory: no hint.
  auto s2 = h->post("/api/v1/jobs", with_key(two, "again2"), h->token("bob", "user"));
  ASSERT_EQ(s2.status, 201);
  EXPECT_FALSE(s2.body.contains("hint")) << s2.body.dump();
}

}  // namespace
}  // namespace allot::server
