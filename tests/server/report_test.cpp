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
