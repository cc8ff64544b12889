// The autoscaler's decision (core/autoscale.h, docs/policy.md §15 "Autoscaling"): one rule per
// test, on plain figures.
#include "core/autoscale.h"

#include <gtest/gtest.h>

namespace allot::core {
namespace {

Autoscale on_load(double high, double low, Duration cooldown = 60) {
  Autoscale a;
  a.load_high = high;
  a.load_low = low;
  a.cooldown = cooldown;
  return a;
}

ScaleSignals serving(int running, double load) {
  ScaleSignals s;
  s.running = running;
  s.load = load;
  return s;
}

TEST(Autoscale, OutAboveTheHighWatermarkInBelowTheLowOne) {
  const Autoscale a = on_load(10, 5);
  auto out = scale_decision(a, ScaleState{1, 4, 2, 0}, serving(2, 30), 1000);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->from, 2);
  EXPECT_EQ(out->to, 3);
  EXPECT_EQ(out->reason, "out: load 15 per replica, above 10");
  ASSERT_TRUE(out->load);
  EXPECT_DOUBLE_EQ(*out->load, 15);
  auto in = scale_decision(a, ScaleState{1, 4, 2, 0}, serving(2, 6), 1000);
  ASSERT_TRUE(in);
  EXPECT_EQ(in->to, 1);
  EXPECT_EQ(in->reason, "in: load 3 per replica, below 5");
  // Between the watermarks: nothing (the hysteresis).
  EXPECT_FALSE(scale_decision(a, ScaleState{1, 4, 2, 0}, serving(2, 14), 1000));
}

TEST(Autoscale, NeverPastTheBoundsNorInsideTheCooldown) {
  const Autoscale a = on_load(10, 5, 120);
  EXPECT_FALSE(scale_decision(a, ScaleState{1, 4, 4, 0}, serving(4, 400), 1000));  // at max
  EXPECT_FALSE(scale_decision(a, ScaleState{1, 4, 1, 0}, serving(1, 0), 1000));    // at min
  EXPECT_FALSE(scale_decision(a, ScaleState{1, 4, 2, 900}, serving(2, 400), 1000));
  EXPECT_TRUE(scale_decision(a, ScaleState{1, 4, 2, 880}, serving(2, 400), 1000));
}

TEST(Autoscale, AScaleOutWaitsForTheLastOneToServe) {
  const Autoscale a = on_load(10, 5);
  EXPECT_FALSE(scale_decision(a, ScaleState{1, 8, 3, 0}, serving(2, 400), 1000));
  EXPECT_TRUE(scale_decision(a, ScaleState{1, 8, 3, 0}, serving(3, 400), 1000));
}

TEST(Autoscale, MemoryPressureScalesOutFirstAndAZeroServiceComesBackOnLoad) {
  Autoscale a = on_load(10, 5);
  ScaleSignals s = serving(2, 1);
  s.memory = 0.9;
  auto d = scale_decision(a, ScaleState{1, 4, 2, 0}, s, 1000);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->to, 3);
  EXPECT_EQ(d->reason, "out: GPU memory 90% used on its replicas' GPUs, above 80%");
  auto back = scale_decision(a, ScaleState{0, 4, 0, 0}, serving(0, 3), 1000);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->to, 1);
  EXPECT_FALSE(scale_decision(a, ScaleState{0, 4, 0, 0}, serving(0, 0), 1000));
}

}  // namespace
}  // namespace allot::core
