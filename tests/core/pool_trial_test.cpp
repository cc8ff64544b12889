// The scoped what-if on the GPU pool (core/pool_trial.h) and the node filters both placement rules
// share (core/placement_filters.h).
#include "core/pool_trial.h"

#include <gtest/gtest.h>

#include "core/placement_filters.h"

namespace allot::core {
namespace {

struct TrialWorld {
  GpuPool pool;
  NodeId add(int gpus) {
    Node n;
    n.id = static_cast<NodeId>(pool.node_count());
    n.spec.gpus = gpus;
    pool.add_node(n);
    return n.id;
  }
};

const Shape kFour{1, 4, kWholeGpu};

TEST(PoolTrial, UndoneOnScopeExitGivesBackTheGpusAndTheGeneration) {
  TrialWorld w;
  const NodeId a = w.add(4);
  const Placement victim{{a, 0}, {a, 1}, {a, 2}};
  w.pool.take(victim);
  const std::uint64_t generation = w.pool.generation();
  {
    PoolTrial trial(w.pool);
    trial.release(victim);
    EXPECT_EQ(w.pool.whole_free(a), 4);
    EXPECT_GT(w.pool.generation(), generation);  // handing back raised it inside the trial
    EXPECT_TRUE(w.pool.find(0, kFour, {}, nullptr, true));
  }
  EXPECT_EQ(w.pool.whole_free(a), 1);
  EXPECT_EQ(w.pool.free_milli(a, 0), 0);
  EXPECT_EQ(w.pool.free_milli(a, 3), kWholeGpu);
  EXPECT_EQ(w.pool.generation(), generation);  // cached failures stay valid
  EXPECT_FALSE(w.pool.find(0, kFour, {}, nullptr, true));
}

TEST(PoolTrial, KeptLeavesThePoolAsTheTrialLeftIt) {
  TrialWorld w;
  const NodeId a = w.add(4), b = w.add(2);
  const Placement first{{a, 0}, {a, 1}};
  const Placement second{{b, 0}};
  w.pool.take(first);
  w.pool.take(second);
  const std::uint64_t generation = w.pool.generation();
  {
    PoolTrial trial(w.pool);
    trial.release(first);
    trial.release(second);
    trial.keep();
  }
  EXPECT_EQ(w.pool.whole_free(a), 4);
  EXPECT_EQ(w.pool.whole_free(b), 2);
  EXPECT_GT(w.pool.generation(), generation);
}

TEST(PoolTrial, UndoingSeveralReleasesRestoresEachNode) {
  TrialWorld w;
  const NodeId a = w.add(8), b = w.add(8);
  const Placement x{{a, 4}, {a, 5}, {b, 0}};
  const Placement y{{b, 7, 500}};  // half a GPU
  w.pool.take(x);
  w.pool.take(y);
  {
    PoolTrial trial(w.pool);
    trial.release(x);
    trial.release(y);
    EXPECT_EQ(w.pool.whole_free(b), 8);
  }
  EXPECT_EQ(w.pool.whole_free(a), 6);
  EXPECT_EQ(w.pool.whole_free(b), 6);
  EXPECT_EQ(w.pool.free_milli(b, 7), 500);
}

TEST(PlacementFilters, MaskAndModels) {
  const NodeMask mask{0, 1};
  EXPECT_FALSE(excluded_node(nullptr, 1));
  EXPECT_FALSE(excluded_node(&mask, 0));
  EXPECT_TRUE(excluded_node(&mask, 1));
  EXPECT_FALSE(excluded_node(&mask, 5));  // past the mask's end: not excluded
  EXPECT_TRUE(accepts({}, 3));
  EXPECT_TRUE(accepts({1, 3}, 3));
  EXPECT_FALSE(accepts({1, 2}, 3));
}

}  // namespace
}  // namespace allot::core
