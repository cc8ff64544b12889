// The request limiter's token buckets (server/request_limits.h): costs, refill, Retry-After, and
// the bound on how many buckets it keeps.
#include "server/request_limits.h"

#include <gtest/gtest.h>

namespace allot::server {
namespace {

using Clock = RequestLimiter::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RequestLimiter, TakesTheBurstThenRefillsAtTheRate) {
  RequestLimiter l(100);
  const auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(l.take("ann", 1, 2, 5, t0), 0) << i;
  EXPECT_EQ(l.take("ann", 1, 2, 5, t0), 1) << "half a second at 2 a second, rounded up";
  EXPECT_EQ(l.take("bob", 1, 2, 5, t0), 0) << "a bucket per key";
  EXPECT_EQ(l.take("ann", 1, 2, 5, t0 + milliseconds(500)), 0);
  EXPECT_NE(l.take("ann", 1, 2, 5, t0 + milliseconds(500)), 0);
  // Never more than the burst, however long the quiet.
  const auto later = t0 + seconds(3600);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(l.take("ann", 1, 2, 5, later), 0) << i;
  EXPECT_NE(l.take("ann", 1, 2, 5, later), 0);
}

TEST(RequestLimiter, AnExpensiveRequestTakesItsCostAndWaitsForIt) {
  RequestLimiter l(100);
  const auto t0 = Clock::now();
  EXPECT_EQ(l.take("ann", 10, 1, 10, t0), 0);
  EXPECT_EQ(l.take("ann", 10, 1, 10, t0), 10) << "ten tokens at one a second";
  EXPECT_EQ(l.take("ann", 1, 1, 10, t0 + seconds(1)), 0) << "a cheap request gets through";
  // A cost above the burst waits for a full bucket rather than forever.
  EXPECT_EQ(l.take("bob", 50, 1, 10, t0), 0);
  EXPECT_EQ(l.take("bob", 50, 1, 10, t0), 10);
  EXPECT_EQ(l.take("carl", 1, 0, 1, t0), 0) << "rate 0: no limit";
  EXPECT_EQ(l.take("carl", 1, 0, 1, t0), 0);
}

TEST(RequestLimiter, KeepsAtMostItsBoundOfBucketsAndForgetsTheIdleFirst) {
  RequestLimiter l(1000);
  auto t = Clock::now();
  // A busy key, then a flood of new keys (addresses, tokens) each leaving its bucket drained.
  for (int i = 0; i < 5; ++i) l.take("busy", 1, 1, 5, t);
  for (int i = 0; i < 100000; ++i) {
    t += milliseconds(1);
    l.take("key " + std::to_string(i), 5, 0.001, 5, t);
    ASSERT_LE(l.tracked(), 1000u) << i;
  }
  EXPECT_GT(l.tracked(), 400u) << "half the table is kept, not all dropped";
  // Buckets that have refilled are forgotten first: they change no answer.
  RequestLimiter m(10);
  const auto t0 = Clock::now();
  for (int i = 0; i < 9; ++i) m.take("idle " + std::to_string(i), 1, 100, 5, t0);
  m.take("drained", 5, 0.001, 5, t0);
  m.take("new", 1, 1, 5, t0 + seconds(1));
  EXPECT_EQ(m.tracked(), 2u) << "the nine idle ones went; the drained one stays";
  EXPECT_NE(m.take("drained", 1, 0.001, 5, t0 + seconds(1)), 0) << "still limited";
}

}  // namespace
}  // namespace allot::server
