// A small world for core tests: one scheduler, named budgets, and helpers to submit and run.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/scheduler.h"

namespace allot::core::testing {

struct World {
  explicit World(PolicyConfig config = {}) : s(config) { cluster = s.add_cluster("test"); }

  Scheduler s;
  ClusterId cluster = 0;
  Time now = 0;
  JobId next_id = 1;

  GpuModelId model(const std::string& name) { return *s.catalog().find(name); }

  std::vector<NodeId> add_nodes(int count, int gpus = 8, const std::string& model_name = "H100",
                                const std::string& block = "", ClusterId c = 0) {
    std::vector<NodeId> out;
    for (int i = 0; i < count; ++i) {
      NodeSpec n;
      n.name = "n" + std::to_string(s.nodes().size());
      n.cluster = c;
      n.model = model(model_name);
      n.gpus = gpus;
      n.block = block;
      auto r = s.add_node(n);
      EXPECT_TRUE(r.ok());
      out.push_back(r.value());
    }
    return out;
  }

  // An H200 node whose GPUs are split as `layout` (an empty entry: a whole GPU).
  NodeId mig_node(std::vector<std::vector<MigInstance>> layout) {
    NodeSpec n;
    n.name = "mig";
    n.model = model("H200");
    n.gpus = static_cast<int>(layout.size());
    n.mig = std::move(layout);
    auto id = s.add_node(n);
    EXPECT_TRUE(id.ok());
    return id.value();
  }

  BudgetId budget(const std::string& path, double share = 1.0) {
    auto r = s.budgets().ensure_path(path, share);
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.value();
  }

  JobSpec job(BudgetId b, int gpus, Duration min_runtime = kHour) {
    JobSpec j;
    j.id = next_id++;
    j.owner = "alice";
    j.budget = b;
    j.shape.gpus_per_node = gpus;
    j.min_runtime = min_runtime;
    j.submit_time = now;
    return j;
  }

  JobId submit(JobSpec j) {
    auto st = s.submit(j, now);
    EXPECT_TRUE(st.ok()) << st.error().message();
    return j.id;
  }

  JobId submit(BudgetId b, int gpus, Duration min_runtime = kHour) {
    return submit(job(b, gpus, min_runtime));
  }

  CycleResult run() { return s.cycle(now); }
  CycleResult run_at(Time t) {
    now = t;
    return s.cycle(now);
  }

  // Carries out every stop of a cycle, as the caller of the core would.
  void carry_out(const CycleResult& r) {
    for (const StopDecision& d : r.stops) EXPECT_TRUE(s.job_stopped(d.job, now).ok());
  }

  bool running(JobId id) const {
    const JobEntry* j = s.job(id);
    return j && j->state == JobState::Running;
  }
  bool pending(JobId id) const {
    const JobEntry* j = s.job(id);
    return j && j->state == JobState::Pending;
  }
  bool allocated(JobId id) const { return running(id) && s.job(id)->run.allocated; }

  static bool started(const CycleResult& r, JobId id) {
    return std::any_of(r.starts.begin(), r.starts.end(),
                       [id](const StartDecision& d) { return d.job == id; });
  }
  static const StopDecision* stopped(const CycleResult& r, JobId id) {
    for (const StopDecision& d : r.stops) {
      if (d.job == id) return &d;
    }
    return nullptr;
  }
  static const Explanation* why(const CycleResult& r, JobId id) {
    for (const Explanation& e : r.waiting) {
      if (e.job == id) return &e;
    }
    return nullptr;
  }
  static std::vector<JobId> start_order(const CycleResult& r) {
    std::vector<JobId> out;
    for (const StartDecision& d : r.starts) out.push_back(d.job);
    return out;
  }
};

}  // namespace allot::core::testing
