#include "core/budget_tree.h"

#include <gtest/gtest.h>

#include <cmath>

namespace allot::core {
namespace {

TEST(BudgetTree, AllocatedFractionIsProductOfNormalisedShares) {
  BudgetTree t;
  const BudgetId org_a = t.add(t.root(), "a", 3).value();
  const BudgetId org_b = t.add(t.root(), "b", 1).value();
  const BudgetId a1 = t.add(org_a, "a1", 1).value();
  const BudgetId a2 = t.add(org_a, "a2", 4).value();
  EXPECT_DOUBLE_EQ(t.allocated_fraction(org_a, 0), 0.75);
  EXPECT_DOUBLE_EQ(t.allocated_fraction(org_b, 0), 0.25);
  EXPECT_DOUBLE_EQ(t.allocated_fraction(a1, 0), 0.75 * 0.2);
  EXPECT_DOUBLE_EQ(t.allocated_fraction(a2, 0), 0.75 * 0.8);
  const auto all = t.allocated_fractions(0);
  EXPECT_DOUBLE_EQ(all[a2], 0.6);
  EXPECT_DOUBLE_EQ(all[t.root()], 1.0);
}

TEST(BudgetTree, PerClusterShareOverridesShareOnThatClusterOnly) {
  BudgetTree t;
  const BudgetId a = t.add(t.root(), "a", 1).value();
  const BudgetId b = t.add(t.root(), "b", 1).value();
  ASSERT_TRUE(t.set_cluster_share(a, 1, 3.0).ok());
  EXPECT_DOUBLE_EQ(t.allocated_fraction(a, 0), 0.5);
  EXPECT_DOUBLE_EQ(t.allocated_fraction(a, 1), 0.75);
  EXPECT_DOUBLE_EQ(t.allocated_fraction(b, 1), 0.25);
  ASSERT_TRUE(t.set_cluster_share(a, 1, std::nullopt).ok());
  EXPECT_DOUBLE_EQ(t.allocated_fraction(a, 1), 0.5);
}

TEST(BudgetTree, SharesChangeWhileInUseAndBumpTheVersion) {
  BudgetTree t;
  const BudgetId a = t.add(t.root(), "a", 1).value();
  t.add(t.root(), "b", 1);
  const auto v = t.version();
  ASSERT_TRUE(t.set_share(a, 3).ok());
  EXPECT_GT(t.version(), v);
  EXPECT_DOUBLE_EQ(t.allocated_fraction(a, 0), 0.75);
}

TEST(BudgetTree, EnsurePathCreatesMissingLevelsAndFindsThem) {
  BudgetTree t;
  const BudgetId leaf = t.ensure_path("/ai/nlp/olmo", 2).value();
  EXPECT_EQ(t.node(leaf).path, "/ai/nlp/olmo");
  EXPECT_EQ(t.node(leaf).depth, 3);
  EXPECT_DOUBLE_EQ(t.node(leaf).share, 2);
  EXPECT_EQ(t.find("/ai/nlp").value(), t.node(leaf).parent);
  EXPECT_EQ(t.ensure_path("/ai/nlp/olmo").value(), leaf);
  EXPECT_TRUE(t.is_leaf(leaf));
  EXPECT_FALSE(t.is_leaf(t.node(leaf).parent));
  EXPECT_FALSE(t.find("/ai/vision").has_value());
}

TEST(BudgetTree, RejectsBadNamesSharesAndDuplicates) {
  BudgetTree t;
  EXPECT_EQ(t.add(t.root(), "", 1).error().field, "name");
  EXPECT_EQ(t.add(t.root(), "a/b", 1).error().field, "name");
  EXPECT_EQ(t.add(t.root(), std::string(200, 'x'), 1).error().field, "name");
  EXPECT_EQ(t.add(t.root(), "a", -1).error().field, "share");
  EXPECT_EQ(t.add(t.root(), "a", std::nan("")).error().field, "share");
  ASSERT_TRUE(t.add(t.root(), "a", 1).ok());
  EXPECT_EQ(t.add(t.root(), "a", 1).error().field, "name");
  EXPECT_EQ(t.add(99, "x", 1).error().field, "parent");
  EXPECT_FALSE(t.ensure_path("no-slash").ok());
  EXPECT_FALSE(t.ensure_path("/a//b").ok());
}

TEST(BudgetTree, RemovedLeafGetsNoAllocationAndSiblingsRenormalise) {
  BudgetTree t;
  const BudgetId a = t.add(t.root(), "a", 1).value();
  const BudgetId b = t.add(t.root(), "b", 1).value();
  EXPECT_FALSE(t.remove(t.root()).ok());
  ASSERT_TRUE(t.remove(a).ok());
  EXPECT_FALSE(t.valid(a));
  EXPECT_DOUBLE_EQ(t.allocated_fraction(a, 0), 0.0);
  EXPECT_DOUBLE_EQ(t.allocated_fraction(b, 0), 1.0);
  const BudgetId p = t.ensure_path("/p/q").value();
  EXPECT_FALSE(t.remove(t.node(p).parent).ok()) << "a budget with children cannot be removed";
}

TEST(BudgetTree, CommonAncestorAndChildOnPath) {
  BudgetTree t;
  const BudgetId x = t.ensure_path("/org/prog1/projA").value();
  const BudgetId y = t.ensure_path("/org/prog2/projB").value();
  const BudgetId z = t.ensure_path("/org/prog1/projC").value();
  const BudgetId org = t.find("/org").value();
  EXPECT_EQ(t.common_ancestor(x, y), org);
  EXPECT_EQ(t.common_ancestor(x, z), t.find("/org/prog1").value());
  EXPECT_EQ(t.child_on_path(org, x), t.find("/org/prog1").value());
  EXPECT_EQ(t.child_on_path(org, y), t.find("/org/prog2").value());
  EXPECT_EQ(t.path_to(x).size(), 4u);
}

TEST(BudgetTree, ZeroShareSiblingsGetNothing) {
  BudgetTree t;
  const BudgetId a = t.add(t.root(), "a", 0).value();
  const BudgetId b = t.add(t.root(), "b", 0).value();
  EXPECT_DOUBLE_EQ(t.allocated_fraction(a, 0), 0.0);
  EXPECT_DOUBLE_EQ(t.allocated_fraction(b, 0), 0.0);
}

}  // namespace
}  // namespace allot::core
