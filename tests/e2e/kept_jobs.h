// What a crash test checks in the store after a submit storm (submit_storm.h) through kill -9s:
// every acknowledged job is there under its key, no key made two jobs, each run segment is
// billed once and every succeeded job has been billed. For either backend (store/store.h).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "store/store.h"

namespace allot::e2e {

inline void expect_acknowledged_jobs_kept(const store::Store& st,
                                          const std::map<std::string, std::uint64_t>& acked) {
  std::set<std::uint64_t> ids;
  for (const auto& [key, id] : acked) {
    auto j = st.job(id);
    ASSERT_TRUE(j) << "acknowledged job " << id << " (" << key << ") was lost";
    EXPECT_EQ(j->idempotency_key, key);
    EXPECT_TRUE(ids.insert(id).second) << "two keys were answered with job " << id;
  }
  // Exactly once: no key made two jobs (the store's unique index).
  store::JobQuery q;
  q.limit = 1'000'000;
  std::set<std::string> keys;
  for (const auto& j : st.jobs(q)) {
    EXPECT_TRUE(keys.insert(j.owner + "/" + j.idempotency_key).second) << j.idempotency_key;
  }
  // Ledger: one entry per run segment, and every succeeded job has been charged.
  std::set<std::pair<std::uint64_t, long long>> segs;
  for (const auto& e : st.ledger(0, INT64_MAX)) {
    EXPECT_TRUE(segs.insert({e.job, e.start}).second) << "duplicate ledger entry for " << e.job;
    EXPECT_GT(e.end, e.start);
  }
  store::JobQuery done;
  done.states = {"succeeded"};
  done.limit = 1'000'000;
  for (const auto& j : st.jobs(done)) {
    EXPECT_FALSE(st.ledger_for_job(j.id).empty()) << "job " << j.id << " succeeded unbilled";
  }
}

// The same, and the store holds no other job: none that no client was acknowledged for, none
// written twice (for a storm whose every submission was answered, or whose answers are all kept).
inline void expect_only_acknowledged_jobs(const store::Store& st,
                                          const std::map<std::string, std::uint64_t>& acked) {
  EXPECT_EQ(st.count_jobs(), static_cast<std::int64_t>(acked.size()))
      << "a job that no client was acknowledged for, or one written twice";
  expect_acknowledged_jobs_kept(st, acked);
}

}  // namespace allot::e2e
