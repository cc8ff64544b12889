// The pending queues' storage (src/core/sorted_queue.h) against a std::map holding the same
// entries: the same entries in the same order after any mix of inserts, erases and sweeps, and
// a walk's iterator stays valid while entries are erased under it.
#include "core/sorted_queue.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace allot::core {
namespace {

using Queue = SortedQueue<int, int>;

std::vector<std::pair<int, int*>> entries(const Queue& q) {
  return {q.begin(), q.end()};
}
std::vector<std::pair<int, int*>> entries(const std::map<int, int*>& m) {
  return {m.begin(), m.end()};
}

TEST(SortedQueue, KeepsWhatAMapKeepsUnderRandomInsertsErasesAndSweeps) {
  std::vector<int> values(64);
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    Queue q;
    std::map<int, int*> m;
    for (int step = 0; step < 400; ++step) {
      const int key = static_cast<int>(rng() % 64);
      switch (rng() % 5) {
        case 0:
        case 1:
          ASSERT_EQ(q.emplace(key, &values[key]), m.emplace(key, &values[key]).second);
          break;
        case 2:
        case 3:
          ASSERT_EQ(q.erase(key), m.erase(key) == 1);
          break;
        default:
          q.compact();
      }
      ASSERT_EQ(q.size(), m.size()) << "seed " << seed;
      ASSERT_EQ(q.empty(), m.empty());
      ASSERT_EQ(entries(q), entries(m)) << "seed " << seed << " step " << step;
      const auto lb = q.lower_bound(key);
      const auto want = m.lower_bound(key);
      ASSERT_EQ(lb == q.end(), want == m.end());
      if (want != m.end()) {
        ASSERT_EQ(lb->first, want->first);
      }
    }
  }
}

// A walk takes each entry in turn and may erase it (a start) or any later one (never in a
// cycle, but allowed): the iterator it holds goes on over the entries still there.
TEST(SortedQueue, AnIteratorHeldByAWalkSurvivesErasesUnderIt) {
  std::vector<int> values(100);
  Queue q;
  for (int k = 0; k < 100; ++k) ASSERT_TRUE(q.emplace(k, &values[k]));
  std::vector<int> walked;
  for (auto it = q.begin(); it != q.end();) {
    const int k = (it++)->first;  // advance first, as the cycle's walk does
    walked.push_back(k);
    EXPECT_TRUE(q.erase(k));
    if (k % 10 == 0) {
      EXPECT_TRUE(q.erase(k + 5));  // a later one goes too
    }
  }
  std::vector<int> want;
  for (int k = 0; k < 100; ++k) {
    if (k % 10 != 5) want.push_back(k);
  }
  EXPECT_EQ(walked, want);
  EXPECT_TRUE(q.empty());
  q.compact();
  EXPECT_TRUE(entries(q).empty());
  // Erased keys come back, in order.
  EXPECT_TRUE(q.emplace(7, &values[7]));
  EXPECT_TRUE(q.emplace(3, &values[3]));
  EXPECT_FALSE(q.emplace(7, &values[8]));
  EXPECT_EQ(entries(q), (std::vector<std::pair<int, int*>>{{3, &values[3]}, {7, &values[7]}}));
}

TEST(SortedQueue, AheadSeesEntriesOnAndStopsAtTheEnd) {
  std::vector<int> values(4);
  Queue q;
  for (int k = 0; k < 4; ++k) q.emplace(k, &values[k]);
  q.erase(2);
  const auto it = q.begin();
  EXPECT_EQ(it.ahead(0), &values[0]);
  EXPECT_EQ(it.ahead(1), &values[1]);
  EXPECT_EQ(it.ahead(2), nullptr);  // erased
  EXPECT_EQ(it.ahead(3), &values[3]);
  EXPECT_EQ(it.ahead(4), nullptr);  // past the end
}

}  // namespace
}  // namespace allot::core
