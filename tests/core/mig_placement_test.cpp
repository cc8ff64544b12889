// docs/policy.md section 7.3, "MIG instances": a GPU in MIG mode is handed out a whole instance at
// a time, never as a whole GPU, and a request that names a profile takes only that profile.
#include <gtest/gtest.h>

#include "core/gpu_pool.h"
#include "world.h"

namespace allot::core {
namespace {

using testing::World;

struct MigWorld {
  GpuCatalog catalog = GpuCatalog::standard();
  MigProfileId p1 = *catalog.find_mig_profile("1g.18gb");
  MigProfileId p1_large = *catalog.find_mig_profile("1g.35gb");
  MigProfileId p2 = *catalog.find_mig_profile("2g.35gb");
  MigProfileId p3 = *catalog.find_mig_profile("3g.71gb");
  MigInstance i1{p1, 142}, i1_large{p1_large, 142}, i2{p2, 285}, i3{p3, 428};
};

Shape fraction(Milli milli, MigProfileId mig = 0) {
  Shape s;
  s.gpu_milli = milli;
  s.mig = mig;
  return s;
}

TEST(MigCatalogue, ProfilesCarryTheirModelsAndComputeShare) {
  const GpuCatalog c = GpuCatalog::standard();
  const auto h200 = *c.find("H200");
  const auto p = c.find_mig_profile("1G.18GB");  // case does not matter
  ASSERT_TRUE(p);
  EXPECT_EQ(c.mig_profile(*p).milli, 142);
  EXPECT_EQ(c.mig_profile(*p).models, std::vector<GpuModelId>{h200});
  EXPECT_EQ(c.mig_profile(*c.find_mig_profile("3g.40gb")).milli, 428);
  EXPECT_EQ(c.mig_profile(*c.find_mig_profile("4g.90gb")).milli, 571);
  EXPECT_EQ(c.mig_profile(*c.find_mig_profile("7g.141gb")).milli, 1000);
  // An H100 and an A100 both offer 1g.10gb.
  EXPECT_EQ(c.mig_profile(*c.find_mig_profile("1g.10gb")).models.size(), 2u);
  EXPECT_FALSE(c.find_mig_profile("1g.16gb"));  // H200's 1g rounded from its memory: not a name
}

TEST(MigCatalogue, AProfileLearntFromAnAgentIsNotOneARequestCanName) {
  GpuCatalog c = GpuCatalog::standard();
  const auto before = c.mig_profile_names().size();
  const auto id = c.intern_mig_profile("1c.3g.71gb", 142);
  EXPECT_EQ(c.intern_mig_profile("1C.3G.71GB", 142), id);
  EXPECT_EQ(c.mig_profile(id).milli, 142);
  EXPECT_TRUE(c.mig_profile(id).models.empty());
  EXPECT_EQ(c.mig_profile_names().size(), before);
}

TEST(MigPool, AGpuInMigModeIsNeverWholeAndGivesWholeInstances) {
  MigWorld m;
  GpuPool pool;
  Node n;
  n.spec.gpus = 2;
  n.spec.mig = {{m.i3, m.i2, m.i1, m.i1}, {}};  // GPU 0 split (997 milli in all), GPU 1 whole
  pool.add_node(n);
  EXPECT_EQ(pool.whole_free(0), 1);
  EXPECT_TRUE(pool.in_mig_mode(0, 0));
  EXPECT_FALSE(pool.in_mig_mode(0, 1));
  EXPECT_EQ(pool.free_milli(0, 0), 428);  // its largest instance, not the 997 of them all

  // 200 milli takes the tightest instance that holds it, whole: the 2g.
  auto p = pool.find(0, fraction(200), {}, nullptr, true);
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)[0], (GpuSlot{0, 0, 285, m.p2}));
  pool.take(*p);
  // 100 milli: a 1g, before the whole GPU.
  auto q = pool.find(0, fraction(100), {}, nullptr, true);
  ASSERT_TRUE(q);
  EXPECT_EQ((*q)[0], (GpuSlot{0, 0, 142, m.p1}));
  pool.take(*q);
  // 500 milli: no instance holds it (428 is the largest left), so the whole GPU 1, shared.
  auto r = pool.find(0, fraction(500), {}, nullptr, true);
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)[0], (GpuSlot{0, 1, 500}));
  // A whole GPU: only GPU 1, never the split one.
  auto w = pool.find(0, Shape{}, {}, nullptr, true);
  ASSERT_TRUE(w);
  EXPECT_EQ((*w)[0].gpu, 1);
  pool.take(*w);
  EXPECT_FALSE(pool.find(0, Shape{}, {}, nullptr, true));
  EXPECT_FALSE(pool.find(0, fraction(500), {}, nullptr, true));
  // Released, the 2g is free again, exactly once.
  pool.release(*p);
  pool.release(*p);  // a second release of the same slot hands nothing more back
  auto again = pool.find(0, fraction(200), {}, nullptr, true);
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)[0], (GpuSlot{0, 0, 285, m.p2}));
  pool.take(*again);
  EXPECT_EQ(pool.free_milli(0, 0), 428);  // the 3g and one 1g are left
  auto last = pool.find(0, fraction(300), {}, nullptr, true);
  ASSERT_TRUE(last);
  pool.take(*last);
  EXPECT_EQ(pool.free_milli(0, 0), 142);
}

TEST(MigPool, ANamedProfileTakesOnlyThatProfile) {
  MigWorld m;
  GpuPool pool;
  Node split;
  split.spec.gpus = 1;
  split.spec.mig = {{m.i1, m.i3}};
  pool.add_node(split);
  Node whole;
  whole.id = 1;
  whole.spec.gpus = 1;
  pool.add_node(whole);
  // 1g.35gb is 142 milli like 1g.18gb, but none is there: neither the 1g.18gb nor the larger 3g
  // nor the whole GPU will do.
  EXPECT_FALSE(pool.find(0, fraction(142, m.p1_large), {}, nullptr, true));
  auto p = pool.find(0, fraction(428, m.p3), {}, nullptr, true);
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)[0], (GpuSlot{0, 0, 428, m.p3}));
  EXPECT_EQ(pool.fraction_slot(0, 0, fraction(142, m.p1)), (GpuSlot{0, 0, 142, m.p1}));
  EXPECT_FALSE(pool.fraction_slot(1, 0, fraction(142, m.p1)));  // a GPU not in MIG mode
  EXPECT_EQ(pool.fraction_slot(1, 0, fraction(142)), (GpuSlot{1, 0, 142}));
}

TEST(MigScheduler, JobsWaitForAFreeInstanceNotForFreeMilli) {
  MigWorld m;
  World w;
  w.mig_node({{m.i1, m.i1}});
  const BudgetId b = w.budget("/lab/a");
  JobSpec j1 = w.job(b, 1), j2 = w.job(b, 1), j3 = w.job(b, 1), big = w.job(b, 1);
  for (JobSpec* j : {&j1, &j2, &j3}) j->shape.gpu_milli = 100;
  big.shape.gpu_milli = 300;
  const JobId a = w.submit(j1), c = w.submit(j2), d = w.submit(j3), e = w.submit(big);
  w.carry_out(w.run());
  EXPECT_TRUE(w.running(a));
  EXPECT_TRUE(w.running(c));
  // 716 milli of the GPU are not in any instance: neither the third job nor 300 milli fit.
  EXPECT_TRUE(w.pending(d));
  EXPECT_TRUE(w.pending(e));
  EXPECT_EQ(w.s.job(a)->run.placement[0].milli, 142);  // charged the instance it holds
}

TEST(MigScheduler, ANamedProfileNoNodeOffersHoldsNothingBackFromAPlainFractionOfItsSize) {
  MigWorld m;
  World w;
  w.mig_node({{m.i1}});
  const BudgetId b = w.budget("/lab/a");
  JobSpec named = w.job(b, 1), plain = w.job(b, 1);
  named.shape.gpu_milli = 142;
  named.shape.mig = m.p1_large;  // none on the node
  plain.shape.gpu_milli = 142;
  const JobId x = w.submit(named), y = w.submit(plain);
  const CycleResult r = w.run();
  w.carry_out(r);
  EXPECT_TRUE(w.pending(x));
  ASSERT_TRUE(World::why(r, x));
  EXPECT_EQ(World::why(r, x)->code, WaitCode::NoMatchingNodes);  // no reservation for it either
  EXPECT_EQ(w.s.describe(*World::why(r, x)),
            "needs a 1g.35gb MIG instance but no GPU of cluster test is split into one: split one "
            "(nvidia-smi mig) or change the request");
  EXPECT_TRUE(w.running(y));
  EXPECT_EQ(w.s.job(y)->run.placement[0].mig, m.p1);
}

TEST(MigScheduler, ANewLayoutKeepsWhatRunningJobsHold) {
  MigWorld m;
  World w;
  const NodeId node = w.mig_node({{m.i3, m.i1}});
  const BudgetId b = w.budget("/lab/a");
  JobSpec j = w.job(b, 1);
  j.shape.gpu_milli = 400;
  const JobId a = w.submit(j);
  w.carry_out(w.run());
  ASSERT_TRUE(w.running(a));
  // The 1g was split again into a 2g beside the 3g the job holds.
  ASSERT_TRUE(w.s.set_node_mig(node, {{m.i3, m.i2}}).ok());
  EXPECT_EQ(w.s.pool().free_milli(node, 0), 285);
  EXPECT_FALSE(w.s.set_node_mig(node, {{m.i3, m.i3, m.i3}}).ok());  // more than one GPU
  EXPECT_FALSE(w.s.set_node_mig(node, {{m.i3}, {m.i1}}).ok());      // the node has one GPU
  const auto st = w.s.set_node_mig(node, {{MigInstance{999, 142}}});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().field, "mig");
}

TEST(MigScheduler, AWholeGpuRequestNeverLandsOnASplitGpu) {
  MigWorld m;
  World w;
  w.mig_node({{m.i3, m.i3}, {}});
  const BudgetId b = w.budget("/lab/a");
  const JobId one = w.submit(b, 1), two = w.submit(b, 2);
  w.carry_out(w.run());
  EXPECT_TRUE(w.running(one));
  EXPECT_EQ(w.s.job(one)->run.placement[0].gpu, 1);
  EXPECT_TRUE(w.pending(two));
}

}  // namespace
}  // namespace allot::core
