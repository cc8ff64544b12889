// The four metrics of the report: availability, occupancy and impact by hand on a small history,
// then through GET /report on a running server.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include "harness.h"

namespace allot::server {
namespace {

using testing::Harness;
using testing::job;
using testing::json;
using testing::TempDir;

store::NodeRecord node(const std::string& name, int gpus, core::Time registered) {
  store::NodeRecord n;
  n.name = name;
  n.cluster = "c";
  n.model = "H100";
  n.gpus = gpus;
  n.registered_at = registered;
  return n;
}

TEST(Metrics, AvailabilityOccupancyAndImpactByTheHour) {
  MetricsInput in;
  in.from = 0;
  in.to = 7200;
  in.nodes = {node("n1", 8, 0), node("n2", 4, 1800)};  // n2: no history, healthy since 1800
  in.health = {{"n1", 0, "healthy", false, 8, ""}, {"n1", 3600, "draining", false, 8, "ops"}};
  in.ledger = {{0, 1, "ann", "/a", "c", 0, 3600, 8000, true},
               {0, 2, "bob", "/b", "c", 3600, 5400, 2000, false}};
  in.jobs = {{"/a", 0, 3600, 8}, {"/b", 1800, 9000, 4}};
  in.fractions = {{"/a", {{"c", 0.5}}}, {"/b", {{"c", 0.5}}}};
  const auto m = compute_metrics(in);
  const auto& c = m.clusters.at("c");
  EXPECT_DOUBLE_EQ(c.total, 8 * 7200 + 4 * 5400);
  EXPECT_DOUBLE_EQ(c.available, 8 * 3600 + 4 * 5400);
  EXPECT_DOUBLE_EQ(c.allocated, 8 * 3600);
  EXPECT_DOUBLE_EQ(c.unallocated, 2 * 1800);
  EXPECT_DOUBLE_EQ(m.all.occupancy(), (8.0 * 3600 + 2 * 1800) / (8 * 3600 + 4 * 5400));
  // /a: owed min(half of 36000, its 28800 demand) in hour 0, nothing in hour 1; got all of it.
  const auto& a = m.budgets.at("/a");
  EXPECT_DOUBLE_EQ(a.owed, 18000);
  EXPECT_DOUBLE_EQ(a.delivered, 28800);
  EXPECT_DOUBLE_EQ(a.impact(), 1.0);
  // /b: owed 7200 in each hour (capped by demand, then by its half of 14400); got 3600 in hour 1.
  const auto& b = m.budgets.at("/b");
  EXPECT_DOUBLE_EQ(b.owed, 14400);
  EXPECT_DOUBLE_EQ(b.demand, 4 * 1800 + 4 * 3600);
  EXPECT_DOUBLE_EQ(b.impact(), 0.25);
  EXPECT_DOUBLE_EQ(m.impact_mean, 0.625);
  EXPECT_DOUBLE_EQ(m.impact_min, 0.25);
  EXPECT_EQ(m.impact_min_budget, "/b");
  EXPECT_EQ(m.budgets_owed, 2);
  EXPECT_EQ(m.budgets_at_95, 1);
  // Ancestors sum their leaves.
  EXPECT_DOUBLE_EQ(m.budgets.at("/").owed, 18000 + 14400);
  EXPECT_DOUBLE_EQ(m.budgets.at("/").impact(), (18000.0 + 3600) / (18000 + 14400));
}

TEST(Metrics, CordonedAndDownNodesAreNotAvailableAndNothingOwedIsImpactOne) {
  MetricsInput in;
  in.from = 1000;
  in.to = 2000;
  in.nodes = {node("n1", 8, 0)};
  in.health = {{"n1", 0, "healthy", false, 8, ""},
               {"n1", 1200, "healthy", true, 8, ""},  // cordoned
               {"n1", 1400, "down", false, 8, "no heartbeat for 45 s"},
               {"n1", 1600, "healthy", false, 8, "back"}};
  in.fractions = {{"/a", {{"c", 1.0}}}};
  const auto m = compute_metrics(in);
  EXPECT_DOUBLE_EQ(m.all.total, 8 * 1000);
  EXPECT_DOUBLE_EQ(m.all.available, 8 * (200 + 400));
  EXPECT_EQ(m.budgets_owed, 0);
  EXPECT_DOUBLE_EQ(m.budgets.at("/a").impact(), 1.0);
}

TEST(Metrics, ReportShowsTheFourMetrics) {
  TempDir dir;
  Harness h(dir.file("a.db"));
  ASSERT_EQ(h.post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 1}}).status, 200);
  ASSERT_EQ(h.post("/api/v1/budgets", {{"path", "/lab/b"}, {"share", 1}}).status, 200);
  h.add_sim_nodes(2);  // 16 GPUs
  const auto t0 = h.now();
  auto a = job("a", "/lab/a", 8);
  a["expected_duration"] = 7200;
  a["min_runtime"] = 600;  // allocated (0 would be free, unallocated work)
  ASSERT_EQ(h.post("/api/v1/jobs", a).status, 201);
  h.sync();
  h.advance(3600);
  ASSERT_EQ(h.post("/api/v1/nodes/local-n1/drain", json::object()).status, 200);
  h.advance(3600);
  auto r = h.get("/api/v1/report?from=" + std::to_string(t0) + "&to=" + std::to_string(h.now()));
  ASSERT_EQ(r.status, 200) << r.body.dump();
  // local-n1 was available for one of the two hours.
  EXPECT_DOUBLE_EQ(r.body["availability"]["value"].get<double>(), 0.75);
  // 8 GPUs for 2 h of 24 available GPU-hours.
  EXPECT_NEAR(r.body["occupancy"]["value"].get<double>(), 16.0 / 24, 1e-9);
  EXPECT_NEAR(r.body["occupancy"]["allocated"].get<double>(), 16.0 / 24, 1e-9);
  EXPECT_DOUBLE_EQ(r.body["occupancy"]["unallocated"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(r.body["clusters"]["local"]["availability"].get<double>(), 0.75);
  // /lab/a asked for 8 GPUs, was owed min(half of the available, 8) each hour and got them.
  EXPECT_EQ(r.body["impact"]["budgets_owed"], 1);
  EXPECT_DOUBLE_EQ(r.body["impact"]["mean"].get<double>(), 1.0);
  const auto rows = r.body["budgets"];
  for (const auto& b : rows) {
    if (b["budget"] == "/lab/a") {
      EXPECT_DOUBLE_EQ(b["impact"].get<double>(), 1.0);
      EXPECT_DOUBLE_EQ(b["demand_gpu_seconds"].get<double>(), 8.0 * 7200);
      EXPECT_DOUBLE_EQ(b["owed_capped_gpu_seconds"].get<double>(), 8.0 * 3600 + 4.0 * 3600);
      // One definition of owed: the report's owed is the capped figure impact counts.
      EXPECT_DOUBLE_EQ(b["owed_gpu_seconds"].get<double>(), 8.0 * 3600 + 4.0 * 3600);
    }
    if (b["budget"] == "/lab/b") {
      EXPECT_TRUE(b["impact"].is_null()) << "owed nothing: no demand";
    }
  }
  EXPECT_TRUE(r.body["utilization"]["value"].is_null());
  EXPECT_EQ(r.body["utilization"]["jobs_without_telemetry"], 1);
}

}  // namespace
}  // namespace allot::server
