// Helpers for the simulator's tests (simulation_test.cpp, mig_simulation_test.cpp): a batch job,
// a scenario that loads without a diagnostic, a policy's options recording every event.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/budget_config.h"
#include "sim/cluster_config.h"
#include "sim/diagnostics.h"
#include "sim/policies.h"
#include "sim/simulation.h"
#include "sim/workload.h"

namespace allot::sim {

// A resumable batch job of normal priority, with no minimum runtime unless given one.
inline SimJob job(std::uint64_t id, core::Time submit, const char* budget, int gpus,
                  core::Duration duration, core::Duration min_runtime = 0, bool resumable = true) {
  SimJob j;
  j.id = id;
  j.line = id;
  j.submit = submit;
  j.budget = budget;
  j.gpus = gpus;
  j.duration = duration;
  j.min_runtime = min_runtime;
  j.resumable = resumable;
  j.kind = core::JobKind::Batch;
  j.priority = core::Priority::Normal;
  return j;
}

// The same, naming the MIG profile `mig` ("1g.10gb").
inline SimJob job(std::uint64_t id, core::Time submit, const char* budget, int gpus,
                  core::Duration duration, const std::string& mig) {
  SimJob j = job(id, submit, budget, gpus, duration);
  j.mig = mig;
  return j;
}

// `cluster` with `budgets` running `jobs` (sorted by submission); every job must be accepted.
inline Scenario scenario_of(const ClusterConfig& cluster, std::vector<BudgetEntry> budgets,
                            std::vector<SimJob> jobs) {
  BudgetConfig b;
  b.budgets = std::move(budgets);
  Workload w;
  w.source = "inline";
  w.jobs = std::move(jobs);
  sort_jobs(w, false);
  Diagnostics d;
  Scenario sc = make_scenario(cluster, b, w, d);
  EXPECT_TRUE(d.empty());
  return sc;
}

// The preset `policy` (policies.h), recording every event.
inline SimOptions policy_options(const char* policy) {
  SimOptions o;
  const auto p = find_policy(policy);
  o.policy_name = p->name;
  o.policy = p->config;
  o.record_events = true;
  return o;
}

inline void expect_checks_pass(const RunResult& r) {
  for (const Check& c : r.checks) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
}

}  // namespace allot::sim
