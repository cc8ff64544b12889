// GET /report's computation called directly (server/report.h), without HTTP: a controller over a
// real store supplies the budget tree and the nodes, the test supplies the ledger.
#include "server/report.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "harness.h"
#include "store/sqlite_store.h"

namespace allot::server {
namespace {

using testing::json;
using testing::TempDir;

// Two leaf budgets of equal share under /lab and two simulated 8-GPU nodes in cluster "local".
class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::open_sqlite(dir_.file("r.db"));
    ASSERT_TRUE(s.ok()) << s.error().message();
    store_ = std::move(s.value());
    ControllerOptions o;
    o.clock = [this] { return now_.load(); };
    o.tick = std::chrono::hours(1);  // cycles only on sync() and events
    o.min_cycle_interval = std::chrono::hours(1);
    ctl_ = std::make_unique<Controller>(*store_, o);
    ASSERT_TRUE(ctl_->start().ok());
    ASSERT_TRUE(ctl_->set_budget("/lab/a", 1.0, std::nullopt, "root").ok());
    ASSERT_TRUE(ctl_->set_budget("/lab/b", 1.0, std::nullopt, "root").ok());
    for (int i = 0; i < 2; ++i) {
      store::NodeRecord n;
      n.name = "local-n" + std::to_string(i);
      n.cluster = "local";
      n.model = "H100";
      n.gpus = 8;
      n.simulated = true;
      ASSERT_TRUE(ctl_->register_node(n).ok());
    }
    ctl_->sync();
  }
  void TearDown() override {
    if (ctl_) ctl_->stop();
  }

  static store::LedgerEntry entry(const std::string& budget, core::Time start, core::Time end,
                                  std::int64_t milli, bool allocated) {
    return {0, 1, "ann", budget, "local", start, end, milli, allocated};
  }
  static const json& row(const json& report, const std::string& budget) {
    for (const auto& b : report["budgets"]) {
      if (b["budget"] == budget) return b;
    }
    static const json none;
    ADD_FAILURE() << "no row for " << budget << " in " << report.dump();
    return none;
  }

  TempDir dir_;
  std::atomic<core::Time> now_{1'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> ctl_;
};

TEST_F(ReportTest, DeliveredIsOwedAgainstWhatTheLedgerSaysAndRollsUpToAncestors) {
  const core::Time t0 = now_;
  const core::Time t1 = t0 + 3600;
  now_ = t1;
  // /lab/a held 8 GPUs all hour (allocated); /lab/b 4 GPUs for half of it (unallocated).
  const std::vector<store::LedgerEntry> ledger = {entry("/lab/a", t0, t1, 8000, true),
                                                  entry("/lab/b", t0, t0 + 1800, 4000, false)};
  auto r = budget_report(*store_, *ctl_->snapshot(), t0, t1, "/", ledger);
  ASSERT_TRUE(r.ok()) << r.error().message();
  const auto& out = r.value();
  EXPECT_EQ(out["from"], t0);
  EXPECT_EQ(out["to"], t1);
  // Each leaf's share is half of the 16 GPUs for the hour; with no job asking (the ledger alone)
  // it is owed nothing: owed is capped at demand (core/owed.h), the share is not.
  const auto& a = row(out, "/lab/a");
  EXPECT_DOUBLE_EQ(a["share_gpu_seconds"].get<double>(), 8.0 * 3600);
  EXPECT_DOUBLE_EQ(a["owed_gpu_seconds"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(a["owed_gpu_seconds"].get<double>(), a["owed_capped_gpu_seconds"].get<double>());
  EXPECT_DOUBLE_EQ(a["allocated_gpu_seconds"].get<double>(), 8.0 * 3600);
  EXPECT_DOUBLE_EQ(a["unallocated_gpu_seconds"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(a["delivered_fraction"].get<double>(), 1.0);
  const auto& b = row(out, "/lab/b");
  EXPECT_DOUBLE_EQ(b["allocated_gpu_seconds"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(b["unallocated_gpu_seconds"].get<double>(), 4.0 * 1800);
  EXPECT_DOUBLE_EQ(b["delivered_fraction"].get<double>(), 0);
  const auto& lab = row(out, "/lab");
  EXPECT_DOUBLE_EQ(lab["allocated_gpu_seconds"].get<double>(), 8.0 * 3600);
  EXPECT_DOUBLE_EQ(lab["unallocated_gpu_seconds"].get<double>(), 4.0 * 1800);
  // Both nodes were healthy all hour; 8 GPU-hours and 2 half-hours were assigned of 16.
  EXPECT_DOUBLE_EQ(out["availability"]["value"].get<double>(), 1.0);
  EXPECT_NEAR(out["occupancy"]["value"].get<double>(), (8.0 * 3600 + 4.0 * 1800) / (16.0 * 3600),
              1e-9);
  EXPECT_NEAR(out["occupancy"]["allocated"].get<double>(), 0.5, 1e-9);
  // No telemetry: utilization is unknown, and both jobs are counted as unmeasured (one job id).
  EXPECT_TRUE(out["utilization"]["value"].is_null());
  EXPECT_EQ(out["utilization"]["jobs_without_telemetry"], 1);
}

TEST_F(ReportTest, AScopeShowsOnlyTheBudgetsWithinIt) {
  const core::Time t0 = now_;
  now_ = t0 + 3600;
  auto r = budget_report(*store_, *ctl_->snapshot(), t0, t0 + 3600, "/lab/a",
                         {entry("/lab/b", t0, t0 + 3600, 8000, true)});
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r.value()["budgets"].size(), 1u) << r.value().dump();
  EXPECT_EQ(r.value()["budgets"][0]["budget"], "/lab/a");
  EXPECT_DOUBLE_EQ(r.value()["budgets"][0]["allocated_gpu_seconds"].get<double>(), 0);
  EXPECT_EQ(r.value()["scope"], "/lab/a");
}

TEST_F(ReportTest, APeriodWithTooManyHourlyValuesIsRefusedNamingFrom) {
  const core::Time t0 = now_;
  // One cluster and two leaves: six hourly series, so this many hours is one too many.
  const core::Duration hours = static_cast<core::Duration>(kMaxReportValues / 6) + 1;
  auto r = budget_report(*store_, *ctl_->snapshot(), t0, t0 + hours * core::kHour, "/", {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "from");
  EXPECT_NE(r.error().reason.find("days"), std::string::npos) << r.error().reason;
}

// GET /report?step=: each step is the report its sub-period would get on its own (the
// dashboard reads 7 days by day in one request instead of seven).
TEST_F(ReportTest, EachStepIsTheReportOfItsOwnPeriod) {
  const core::Time t0 = now_;
  const core::Time t3 = t0 + 3 * core::kHour;
  now_ = t3;
  auto job = [&](JobId id, const std::string& budget, core::Time submit, core::Time updated,
                 const std::string& state, int gpus) {
    store::JobRecord j;
    j.id = id;
    j.owner = "ann";
    j.idempotency_key = "k" + std::to_string(id);
    j.budget = budget;
    j.spec_json = json{{"nodes", 1}, {"gpus_per_node", gpus}}.dump();
    j.state = state;
    j.submit_time = submit;
    j.updated_at = updated;
    ASSERT_TRUE(store_->write({store::op::InsertJob{j}}).ok());
  };
  // /lab/a asks for 2 GPUs from 0:30 to 2:10 (ended); /lab/b for 4 from 1:20 on (waiting).
  job(901, "/lab/a", t0 + 1800, t0 + 2 * core::kHour + 600, "succeeded", 2);
  job(902, "/lab/b", t0 + 4800, t0 + 4800, "pending", 4);
  const std::vector<store::LedgerEntry> ledger = {
      entry("/lab/a", t0 + 1800, t0 + 2 * core::kHour + 600, 2000, true),
      entry("/lab/b", t0 + 3600, t0 + 5400, 4000, false)};
  auto r = budget_report(*store_, *ctl_->snapshot(), t0, t3, "/", ledger, core::kHour);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r.value()["steps"].size(), 3u);
  EXPECT_EQ(r.value()["step"], core::kHour);
  for (int i = 0; i < 3; ++i) {
    const core::Time a = t0 + i * core::kHour;
    const auto& step = r.value()["steps"][static_cast<std::size_t>(i)];
    EXPECT_EQ(step["from"], a);
    EXPECT_EQ(step["to"], a + core::kHour);
    EXPECT_FALSE(step.contains("steps"));
    auto separate = budget_report(*store_, *ctl_->snapshot(), a, a + core::kHour, "/", ledger);
    ASSERT_TRUE(separate.ok());
    for (const char* b : {"/lab/a", "/lab/b", "/lab"}) {
      for (const char* f : {"demand_gpu_seconds", "allocated_gpu_seconds",
                            "unallocated_gpu_seconds", "owed_gpu_seconds", "share_gpu_seconds"}) {
        EXPECT_DOUBLE_EQ(row(step, b)[f].get<double>(), row(separate.value(), b)[f].get<double>())
            << "step " << i << " " << b << " " << f;
      }
    }
    EXPECT_EQ(step["occupancy"], separate.value()["occupancy"]) << "step " << i;
    EXPECT_EQ(step["availability"], separate.value()["availability"]) << "step " << i;
  }
  // The figures themselves: /lab/a's 2 GPUs asked for 30 min, 60 min and 10 min of the hours.
  const auto& steps = r.value()["steps"];
  EXPECT_DOUBLE_EQ(row(steps[0], "/lab/a")["demand_gpu_seconds"].get<double>(), 2.0 * 1800);
  EXPECT_DOUBLE_EQ(row(steps[1], "/lab/a")["demand_gpu_seconds"].get<double>(), 2.0 * 3600);
  EXPECT_DOUBLE_EQ(row(steps[2], "/lab/a")["demand_gpu_seconds"].get<double>(), 2.0 * 600);
  // /lab/b's 4 GPUs from 1:20 to the period's end; /lab adds up both.
  EXPECT_DOUBLE_EQ(row(steps[0], "/lab/b")["demand_gpu_seconds"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(row(steps[1], "/lab/b")["demand_gpu_seconds"].get<double>(), 4.0 * 2400);
  EXPECT_DOUBLE_EQ(row(steps[2], "/lab/b")["demand_gpu_seconds"].get<double>(), 4.0 * 3600);
  EXPECT_DOUBLE_EQ(row(steps[1], "/lab")["demand_gpu_seconds"].get<double>(),
                   2.0 * 3600 + 4.0 * 2400);
  EXPECT_DOUBLE_EQ(row(steps[1], "/lab/b")["unallocated_gpu_seconds"].get<double>(), 4.0 * 1800);
  // The whole period's figures are the steps' sums.
  EXPECT_DOUBLE_EQ(row(r.value(), "/lab/a")["demand_gpu_seconds"].get<double>(), 2.0 * 6000);
}

TEST_F(ReportTest, AStepShorterThanAnHourOrTooManyStepsIsRefusedNamingStep) {
  const core::Time t0 = now_;
  auto r = budget_report(*store_, *ctl_->snapshot(), t0, t0 + core::kDay, "/", {}, 600);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "step");
  r = budget_report(*store_, *ctl_->snapshot(), t0, t0 + 300 * core::kDay, "/", {}, core::kHour);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "step");
  EXPECT_TRUE(
      budget_report(*store_, *ctl_->snapshot(), t0, t0 + core::kDay, "/", {}, core::kHour).ok());
  // Steps x budgets in scope is bounded too: 1,000 hourly steps over 100 budgets and more are
  // refused (each step repeats every budget), the same steps over a narrower scope are not.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(ctl_->set_budget("/many/b" + std::to_string(i), 1.0, std::nullopt, "root").ok());
  }
  ctl_->sync();
  r = budget_report(*store_, *ctl_->snapshot(), t0, t0 + 1000 * core::kHour, "/", {}, core::kHour);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "step");
  EXPECT_NE(r.error().reason.find("budgets in scope"), std::string::npos) << r.error().reason;
  EXPECT_TRUE(budget_report(*store_, *ctl_->snapshot(), t0, t0 + 1000 * core::kHour, "/lab", {},
                            core::kHour)
                  .ok());
}

TEST_F(ReportTest, UsageEntriesAreTheLedgerClippedToThePeriod) {
  const core::Time t0 = now_;
  ASSERT_TRUE(
      store_->write({store::op::AddLedger{entry("/lab/a", t0 - 100, t0 + 100, 1000, true)}}).ok());
  const auto got = usage_entries(*store_, t0 + 1000, t0, t0 + 50);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].start, t0);
  EXPECT_EQ(got[0].end, t0 + 50);
  EXPECT_EQ(got[0].budget, "/lab/a");
  // A period the entry does not reach has nothing.
  EXPECT_TRUE(usage_entries(*store_, t0 + 1000, t0 + 200, t0 + 300).empty());
}

}  // namespace
}  // namespace allot::server
