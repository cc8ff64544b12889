#include "core/usage_window.h"

#include <gtest/gtest.h>

#include <cmath>

namespace allot::core {
namespace {

TEST(UsageWindow, ChargesAcrossBucketsAndExpiresAfterTheLookback) {
  UsageWindow w(4 * kHour, kHour);
  w.ensure_nodes(2);
  w.advance(2 * kHour + 1800);
  w.add(1, 1800, 2 * kHour + 1800, 2000);  // 2 GPUs for 2 hours
  EXPECT_EQ(w.total(1), 2000 * 2 * kHour);
  EXPECT_EQ(w.total(0), 0);
  // The bucket [0,1h) leaves a 4h window when hour 4 starts: it held 1800 s of the charge.
  w.advance(4 * kHour);
  EXPECT_EQ(w.total(1), 2000 * 2 * kHour - 2000 * 1800);
  w.advance(5 * kHour);
  EXPECT_EQ(w.total(1), 2000 * 2 * kHour - 2000 * 1800 - 2000 * 3600);
  w.advance(7 * kHour);
  EXPECT_EQ(w.total(1), 0);
}

TEST(UsageWindow, CostDoesNotGrowWithHistory) {
  // A jump far beyond the window clears it in one turn of the ring.
  UsageWindow w(7 * kDay, kHour);
  w.ensure_nodes(1);
  w.advance(kHour);
  w.add(0, 0, kHour, 1000);
  w.advance(1000 * kDay);
  EXPECT_EQ(w.total(0), 0);
  EXPECT_EQ(w.window_seconds(), 7 * kDay);
}

TEST(UsageWindow, ChargesOutsideTheWindowAreDroppedAndFutureIsClamped) {
  UsageWindow w(2 * kHour, kHour);
  w.advance(10 * kHour);
  w.add(0, 0, 8 * kHour, 1000);  // wholly before the window
  EXPECT_EQ(w.total(0), 0);
  w.add(0, 8 * kHour + 1800, 12 * kHour, 1000);  // starts before, ends after now
  EXPECT_EQ(w.total(0), 1000 * (10 * kHour - 9 * kHour));
}

TEST(UsageWindow, HalfLifeDecaysUsage) {
  UsageWindow w(7 * kDay, kHour, 2 * kHour);
  w.advance(kHour);
  w.add(0, 0, kHour, 1000);
  // A charge in the previous bucket has already aged one bucket: 2^(-1/2).
  const auto before = w.total(0);
  EXPECT_NEAR(static_cast<double>(before), 1000.0 * kHour * std::exp2(-0.5), 2.0);
  w.advance(3 * kHour);  // two buckets later: one half-life
  EXPECT_NEAR(static_cast<double>(w.total(0)), before / 2.0, 2.0);
  EXPECT_EQ(w.window_seconds(), static_cast<Duration>(2 * kHour / std::log(2.0)));
}

}  // namespace
}  // namespace allot::core

namespace allot::core {
namespace {
TEST(UsageWindow, ChargesBeforeTimeZeroAreIgnored) {
  UsageWindow w(7 * kDay, kHour);
  w.advance(2 * kHour);
  w.add(0, -kDay, kHour, 1000);
  EXPECT_EQ(w.total(0), 1000 * kHour);
}
}  // namespace
}  // namespace allot::core
