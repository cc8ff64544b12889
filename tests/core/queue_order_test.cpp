// The baseline queue orders' registry (core/queue_order.h, core/orders/): each registered order
// keys the flat queue as docs/policy.md §7.1 says.
#include "core/queue_order.h"

#include <gtest/gtest.h>

namespace allot::core {
namespace {

JobSpec spec(Priority priority, std::optional<Duration> expected) {
  JobSpec s;
  s.priority = priority;
  s.expected_duration = expected;
  return s;
}

TEST(QueueOrderRegistry, FairShareHasNoFlatQueue) {
  EXPECT_EQ(flat_first_key(QueueOrder::FairShare), nullptr);
}

TEST(QueueOrderRegistry, EachBaselineKeysAsThePolicySays) {
  const JobSpec urgent_short = spec(Priority::Urgent, 60);
  const JobSpec low_undeclared = spec(Priority::Low, std::nullopt);
  const FlatFirstKey fifo = flat_first_key(QueueOrder::Fifo);
  const FlatFirstKey priority = flat_first_key(QueueOrder::Priority);
  const FlatFirstKey shortest = flat_first_key(QueueOrder::ShortestFirst);
  ASSERT_NE(fifo, nullptr);
  ASSERT_NE(priority, nullptr);
  ASSERT_NE(shortest, nullptr);
  // Fifo: only submit time and id order the queue.
  EXPECT_EQ(fifo(urgent_short), fifo(low_undeclared));
  // Priority: higher priority first (a smaller key).
  EXPECT_LT(priority(urgent_short), priority(low_undeclared));
  EXPECT_LT(priority(spec(Priority::High, 60)), priority(spec(Priority::Normal, 60)));
  // ShortestFirst: shorter declared duration first; none declared: last.
  EXPECT_LT(shortest(urgent_short), shortest(spec(Priority::Low, 3600)));
  EXPECT_EQ(shortest(low_undeclared), kNever);
}

}  // namespace
}  // namespace allot::core
