#include "core/gpu_pool.h"

#include <gtest/gtest.h>

#include <set>

namespace allot::core {
namespace {

struct PoolWorld {
  GpuPool pool;
  std::vector<Node> nodes;
  NodeId add(int gpus, GpuModelId model = 0, BlockId block = 0, ClusterId cluster = 0) {
    Node n;
    n.id = static_cast<NodeId>(nodes.size());
    n.spec.gpus = gpus;
    n.spec.model = model;
    n.spec.cluster = cluster;
    n.block = block;
    nodes.push_back(n);
    pool.add_node(n);
    return n.id;
  }
  std::optional<Placement> find(Shape s, std::vector<GpuModelId> models = {},
                                const NodeMask* ex = nullptr, bool span = true) {
    return pool.find(0, s, models, ex, span);
  }
};

Shape whole(int gpus, int nodes = 1) {
  return Shape{nodes, gpus, kWholeGpu};
}

std::set<NodeId> nodes_of(const Placement& p) {
  std::set<NodeId> out;
  for (const auto& g : p) out.insert(g.node);
  return out;
}

TEST(GpuPool, BestFitPicksTheNodeWithFewestFreeGpusThatFit) {
  PoolWorld w;
  const NodeId a = w.add(8), b = w.add(8), c = w.add(8);
  w.pool.take({{a, 0}, {a, 1}, {a, 2}, {a, 3}, {a, 4}});          // a: 3 free
  w.pool.take({{b, 0}, {b, 1}, {b, 2}, {b, 3}, {b, 4}, {b, 5}});  // b: 2 free
  auto p = w.find(whole(2));
  ASSERT_TRUE(p);
  EXPECT_EQ(nodes_of(*p), std::set<NodeId>{b});
  auto q = w.find(whole(3));
  EXPECT_EQ(nodes_of(*q), std::set<NodeId>{a});
  auto r = w.find(whole(4));
  EXPECT_EQ(nodes_of(*r), std::set<NodeId>{c});
  EXPECT_FALSE(w.find(whole(9)));
}

TEST(GpuPool, TakeAndReleaseAreExactInverses) {
  PoolWorld w;
  const NodeId a = w.add(4);
  const Placement p{{a, 1}, {a, 3}};
  w.pool.take(p);
  EXPECT_EQ(w.pool.whole_free(a), 2);
  EXPECT_EQ(w.pool.free_milli(a, 1), 0);
  const auto gen = w.pool.generation();
  w.pool.release(p);
  EXPECT_EQ(w.pool.whole_free(a), 4);
  EXPECT_GT(w.pool.generation(), gen);
}

TEST(GpuPool, RespectsModelsExclusionAndSchedulability) {
  PoolWorld w;
  const NodeId h100 = w.add(8, 0), b200 = w.add(8, 2);
  EXPECT_EQ(nodes_of(*w.find(whole(1), {2})), std::set<NodeId>{b200});
  NodeMask mask(2, 0);
  mask[h100] = 1;
  EXPECT_EQ(nodes_of(*w.find(whole(1), {}, &mask)), std::set<NodeId>{b200});
  w.pool.set_schedulable(b200, false);
  EXPECT_FALSE(w.find(whole(1), {}, &mask));
  EXPECT_FALSE(w.find(whole(1), {2}));
  EXPECT_EQ(w.pool.largest_whole_free(0, {}), 8);
}

TEST(GpuPool, GangPrefersTheTightestSingleBlock) {
  PoolWorld w;
  for (int i = 0; i < 4; ++i) w.add(8, 0, /*block=*/1);  // 4 nodes in block 1
  for (int i = 0; i < 2; ++i) w.add(8, 0, /*block=*/2);  // 2 nodes in block 2
  auto p = w.find(whole(8, 2));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->size(), 16u);
  EXPECT_EQ(nodes_of(*p), (std::set<NodeId>{4, 5})) << "block 2 fits exactly; block 1 stays whole";
  auto q = w.find(whole(8, 3));
  EXPECT_EQ(nodes_of(*q), (std::set<NodeId>{0, 1, 2}));
}

TEST(GpuPool, GangSpansBlocksOnlyWhenAllowed) {
  PoolWorld w;
  for (int i = 0; i < 2; ++i) w.add(8, 0, 1);
  for (int i = 0; i < 2; ++i) w.add(8, 0, 2);
  EXPECT_FALSE(w.find(whole(8, 3), {}, nullptr, /*span=*/false));
  auto p = w.find(whole(8, 3), {}, nullptr, /*span=*/true);
  ASSERT_TRUE(p);
  EXPECT_EQ(nodes_of(*p).size(), 3u);
}

TEST(GpuPool, FractionsFillPartlyUsedGpusFirst) {
  PoolWorld w;
  const NodeId a = w.add(2), b = w.add(2);
  w.pool.take({{b, 1, 600}});  // b's GPU 1 has 400 left
  auto p = w.find(Shape{1, 1, 300});
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)[0], (GpuSlot{b, 1, 300}));
  w.pool.take(*p);  // 100 left there
  auto q = w.find(Shape{1, 1, 300});
  ASSERT_TRUE(q);
  EXPECT_NE((*q)[0].node == b && (*q)[0].gpu == 1, true);
  EXPECT_EQ(w.pool.whole_free(b), 1);
  (void)a;
}

TEST(GpuPool, FitsNodeWithCountsGpusHandedBack) {
  PoolWorld w;
  const NodeId a = w.add(4);
  w.pool.take({{a, 0}, {a, 1}, {a, 2}});
  std::vector<Milli> extra(4, 0);
  EXPECT_FALSE(w.pool.fits_node_with(a, whole(2), extra));
  extra[2] = kWholeGpu;
  EXPECT_TRUE(w.pool.fits_node_with(a, whole(2), extra));
}

}  // namespace
}  // namespace allot::core
