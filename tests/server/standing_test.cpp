// Each budget's standing (server/standing.h): the sibling ranks and the funding outlook of a new
// job on hand-made tables, then GET /api/v1/standing against a real server with simulated nodes.
#include "server/standing.h"

#include <gtest/gtest.h>

#include "harness.h"

namespace allot::server {
namespace {

using testing::Harness;
using testing::json;
using testing::TempDir;

// /lab (share 1) with /lab/a and /lab/b (share 1 each) on one cluster of 16 GPUs.
struct Tree {
  core::BudgetTree tree;
  core::BudgetId lab = 0, a = 0, b = 0;
  StandingTable table;
  Tree() {
    lab = tree.add(tree.root(), "lab", 1.0).value();
    a = tree.add(lab, "a", 1.0).value();
    b = tree.add(lab, "b", 1.0).value();
    table.capacity = {16000};
    table.clusters = {"local"};
    table.lookback = 7 * core::kDay;
    table.rows.assign(1, std::vector<BudgetStanding>(tree.size()));
    const auto f = tree.allocated_fractions(0);
    for (core::BudgetId id = 0; id < tree.size(); ++id) {
      auto& r = table.rows[0][id];
      r.fraction = f[id];
      r.allocation = f[id] * 16000.0 * static_cast<double>(table.lookback);
    }
  }
  BudgetStanding& row(core::BudgetId id) { return table.rows[0][id]; }
};

TEST(StandingRank, SiblingsByStandingThenProjectedThenId) {
  Tree t;
  rank_siblings(t.tree, t.table.rows[0]);
  EXPECT_EQ(t.row(t.a).rank, 1);  // equal standing (0) and usage: lower id first
  EXPECT_EQ(t.row(t.b).rank, 2);
  EXPECT_EQ(t.row(t.a).siblings, 2);
  EXPECT_EQ(t.row(t.lab).rank, 1);
  EXPECT_EQ(t.row(t.lab).siblings, 1);
  EXPECT_EQ(t.row(t.tree.root()).rank, 0);

  t.row(t.a).projected = t.row(t.a).allocation * 0.5;  // a has used half its allocation
  t.row(t.b).projected = t.row(t.b).allocation * 0.1;
  rank_siblings(t.tree, t.table.rows[0]);
  EXPECT_EQ(t.row(t.b).rank, 1);
  EXPECT_EQ(t.row(t.a).rank, 2);

  t.row(t.b).allocation = 0;  // no allocation: ranked last whatever its usage
  rank_siblings(t.tree, t.table.rows[0]);
  EXPECT_EQ(t.row(t.a).rank, 1);
  EXPECT_EQ(t.row(t.b).rank, 2);
}

TEST(StandingOutlook, ContractMustFitEveryBudgetsAllocation) {
  Tree t;
  core::PolicyConfig p;
  // 8 GPUs for 1 h fit a's allocation (8 GPUs x 7 days).
  auto o = funding_outlook(t.table, t.tree, p, 0, t.a, 8000, 3600);
  EXPECT_TRUE(o.allocated) << o.reason;
  // a has promised almost all of its allocation: an hour more does not fit.
  t.row(t.a).projected = t.row(t.a).allocation - 1000.0 * 1800;
  o = funding_outlook(t.table, t.tree, p, 0, t.a, 1000, 3600);
  EXPECT_FALSE(o.allocated);
  EXPECT_EQ(o.limiting, t.a);
  EXPECT_NE(o.reason.find("cannot afford the contract"), std::string::npos) << o.reason;
  // The highest budget at fault is the one named.
  t.row(t.lab).projected = t.row(t.lab).allocation;
  o = funding_outlook(t.table, t.tree, p, 0, t.a, 1000, 3600);
  EXPECT_EQ(o.limiting, t.lab);
}

TEST(StandingOutlook, BurstLimitUnlessTheBudgetHoldsNothing) {
  Tree t;
  core::PolicyConfig p;  // burst limit 1.1: a may hold 8.8 GPUs allocated
  // Holding none, any one job may be funded, even 16 GPUs.
  EXPECT_TRUE(funding_outlook(t.table, t.tree, p, 0, t.a, 16000, 3600).allocated);
  t.row(t.a).held_allocated = 8000;
  auto o = funding_outlook(t.table, t.tree, p, 0, t.a, 1000, 3600);
  EXPECT_FALSE(o.allocated);
  EXPECT_EQ(o.limiting, t.a);
  EXPECT_NE(o.reason.find("over its burst limit"), std::string::npos) << o.reason;
  EXPECT_NE(o.reason.find("8.8"), std::string::npos) << o.reason;
  p.burst_limit = 0;  // off
  EXPECT_TRUE(funding_outlook(t.table, t.tree, p, 0, t.a, 1000, 3600).allocated);
}

TEST(StandingOutlook, NoMinimumRuntimeIsNeverFundedUnderLookback) {
  Tree t;
  core::PolicyConfig p;
  auto o = funding_outlook(t.table, t.tree, p, 0, t.a, 1000, 0);
  EXPECT_FALSE(o.allocated);
  EXPECT_NE(o.reason.find("no minimum runtime"), std::string::npos);
  p.funding = core::Funding::Always;
  EXPECT_TRUE(funding_outlook(t.table, t.tree, p, 0, t.a, 1000, 0).allocated);
}

TEST(StandingOutlook, ConcurrentCapCountsGpusHeldNow) {
  Tree t;
  core::PolicyConfig p;
  p.funding = core::Funding::ConcurrentCap;  // a's cap: 8 GPUs at once
  EXPECT_TRUE(funding_outlook(t.table, t.tree, p, 0, t.a, 8000, 3600).allocated);
  EXPECT_FALSE(funding_outlook(t.table, t.tree, p, 0, t.a, 9000, 3600).allocated);
}

// GET /api/v1/standing on a real server: /lab/a (member ann) runs one allocated and one
// unallocated 8-GPU job on two simulated nodes; /lab/b (member bob) runs nothing.
class StandingApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    h_ = std::make_unique<Harness>(dir_.file("s.db"));
    ASSERT_EQ(h_->post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 1}, {"members", {"ann"}}})
                  .status,
              200);
    ASSERT_EQ(h_->post("/api/v1/budgets", {{"path", "/lab/b"}, {"share", 1}, {"members", {"bob"}}})
                  .status,
              200);
    h_->add_sim_nodes(2);
    ann_ = h_->token("ann", "user");
    bob_ = h_->token("bob", "user");
    for (int i = 0; i < 2; ++i) {
      auto j = testing::job("k" + std::to_string(i), "/lab/a", 8);
      j["min_runtime"] = 3600;
      ASSERT_EQ(h_->post("/api/v1/jobs", j, ann_).status, 201);
    }
    h_->sync();
  }
  void TearDown() override { h_.reset(); }

  static const json& budget(const json& r, const std::string& path) {
    for (const auto& b : r["budgets"]) {
      if (b["budget"] == path) return b;
    }
    static const json none;
    ADD_FAILURE() << "no " << path << " in " << r.dump();
    return none;
  }

  TempDir dir_;
  std::unique_ptr<Harness> h_;
  std::string ann_, bob_;
};

TEST_F(StandingApiTest, MemberSeesHerBudgetWithJobsRankAndOutlook) {
  auto r = h_->get("/api/v1/standing?gpus=1&min_runtime=1800", ann_);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  ASSERT_EQ(r.body["budgets"].size(), 1u) << r.body.dump();
  const auto& a = budget(r.body, "/lab/a");
  EXPECT_TRUE(a["member"].get<bool>());
  EXPECT_TRUE(a["leaf"].get<bool>());
  const auto& c = a["clusters"][0];
  EXPECT_EQ(c["cluster"], "local");
  EXPECT_DOUBLE_EQ(c["fraction"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(c["allocation_gpus"].get<double>(), 8.0);
  // The first job is funded (a held nothing); the second is over the burst limit: unallocated.
  EXPECT_DOUBLE_EQ(c["held_allocated_gpus"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(c["held_unallocated_gpus"].get<double>(), 8.0);
  EXPECT_EQ(c["running_allocated"], 1);
  EXPECT_EQ(c["running_unallocated"], 1);
  EXPECT_EQ(c["waiting"], 0);
  // Its promised contract: 8 GPUs for an hour, over 8 GPUs x 7 days.
  EXPECT_NEAR(c["promised_gpu_hours"].get<double>(), 8.0, 1e-9);
  EXPECT_NEAR(c["standing"].get<double>(), 1.0 / (7 * 24), 1e-9);
  EXPECT_EQ(c["rank"], 2);  // b has promised nothing: it goes first
  EXPECT_EQ(c["siblings"], 2);
  EXPECT_FALSE(c["new_job"]["allocated"].get<bool>());
  EXPECT_EQ(c["new_job"]["limiting"], "/lab/a");
  EXPECT_NE(c["new_job"]["reason"].get<std::string>().find("burst limit"), std::string::npos);
  EXPECT_EQ(r.body["new_job"]["gpus"], 1);
  EXPECT_EQ(r.body["new_job"]["min_runtime"], 1800);
  ASSERT_TRUE(a.contains("week"));
  EXPECT_GE(a["week"]["owed_gpu_hours"].get<double>(), 0.0);

  auto b = h_->get("/api/v1/standing", bob_);
  ASSERT_EQ(b.status, 200);
  const auto& bc = budget(b.body, "/lab/b")["clusters"][0];
  EXPECT_EQ(bc["rank"], 1);
  EXPECT_TRUE(bc["new_job"]["allocated"].get<bool>()) << bc.dump();
}

TEST_F(StandingApiTest, ScopeAndQueryAreChecked) {
  EXPECT_EQ(h_->get("/api/v1/standing?budget=/lab/a", bob_).status, 403);
  EXPECT_EQ(h_->get("/api/v1/standing?budget=/lab/nope").status, 404);
  auto bad = h_->get("/api/v1/standing?gpu=1", ann_);
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body["error"]["field"], "gpu");
  EXPECT_EQ(h_->get("/api/v1/standing?gpus=0", ann_).status, 400);
  EXPECT_EQ(h_->get("/api/v1/standing?min_runtime=-1", ann_).status, 400);
  EXPECT_EQ(h_->get("/api/v1/standing", "-").status, 401);
  // An administrator sees the organisations and programs; with a budget, it and its children.
  auto all = h_->get("/api/v1/standing");
  ASSERT_EQ(all.status, 200);
  EXPECT_EQ(all.body["budgets"].size(), 3u) << all.body.dump();  // /lab, /lab/a, /lab/b
  auto lab = h_->get("/api/v1/standing?budget=/lab/a");
  ASSERT_EQ(lab.status, 200);
  EXPECT_EQ(lab.body["budgets"].size(), 1u);
}

}  // namespace
}  // namespace allot::server
