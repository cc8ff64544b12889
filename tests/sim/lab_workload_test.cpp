// The lab workload model: seeded determinism, shares/demand/load measured over the generated jobs,
// the closed loop's invariant (at most k outstanding per person, the next after a think time),
// and its examples/ files kept equal to the model.
#include "sim/lab_workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "sim/policies.h"

namespace allot::sim {
namespace {

double gpu_seconds(const SimJob& j) {
  return static_cast<double>(j.gpus) * static_cast<double>(j.duration);
}

TEST(SimLabWorkload, SameSeedSameJobsByteForByte) {
  for (bool closed : {false, true}) {
    LabWorkloadModel m;
    m.days = 7;
    m.load = 1.5;
    m.closed_loop = closed;
    const std::string a = workload_jsonl(generate_lab_workload(m));
    const std::string b = workload_jsonl(generate_lab_workload(m));
    EXPECT_FALSE(a.empty());
    EXPECT_EQ(a, b) << (closed ? "closed" : "open");
    m.seed = 2;
    EXPECT_NE(a, workload_jsonl(generate_lab_workload(m))) << "the seed must matter";
  }
}

TEST(SimLabWorkload, DefaultsAreTheDesignsSetting) {
  const LabWorkloadModel m;
  ASSERT_TRUE(validate(m).ok());
  EXPECT_EQ(m.nodes * m.gpus_per_node, 1024);
  EXPECT_EQ(m.teams.size(), 15u);
  std::map<std::string, int> programs;
  double total = 0, lo = 100, hi = 0, flo = 100, fhi = 0;
  for (const LabTeam& t : m.teams) {
    ++programs[t.program];
    total += t.share;
    lo = std::min(lo, t.share);
    hi = std::max(hi, t.share);
    flo = std::min(flo, t.demand_factor);
    fhi = std::max(fhi, t.demand_factor);
  }
  EXPECT_EQ(programs.size(), 4u);
  EXPECT_DOUBLE_EQ(total, 100);
  EXPECT_DOUBLE_EQ(lo, 2);
  EXPECT_DOUBLE_EQ(hi, 18.5);
  EXPECT_DOUBLE_EQ(flo, 0.3);
  EXPECT_DOUBLE_EQ(fhi, 4);
}

TEST(SimLabWorkload, OpenLoopDemandMatchesLoadSharesAndKinds) {
  for (double load : {1.0, 2.5}) {
    LabWorkloadModel m;
    m.load = load;
    const Workload w = generate_lab_workload(m);
    const double capacity = 1024.0 * m.days * 86400.0;
    std::map<std::string, double> by_team;
    double total = 0, gangs = 0, largest = 0;
    int debug_too_long = 0, sweeps_protected = 0;
    for (const SimJob& j : w.jobs) {
      ASSERT_GE(j.submit, 0);
      ASSERT_LT(j.submit, m.days * 86400);
      by_team[j.budget] += gpu_seconds(j);
      total += gpu_seconds(j);
      if (j.gpus >= 32) gangs += gpu_seconds(j);
      largest = std::max(largest, static_cast<double>(j.gpus));
      if (*j.kind == core::JobKind::Debug && (j.duration > 15 * 60 || *j.min_runtime > 15 * 60)) {
        ++debug_too_long;
      }
      if (j.gpus < 32 && *j.kind == core::JobKind::Batch && *j.min_runtime == 0) ++sweeps_protected;
    }
    // Overall load, measured over the jobs.
    EXPECT_NEAR(total / capacity, load, 0.01 * load);
    // Each team's part of the demand: share x demand factor, normalised.
    const std::vector<double> frac = lab_demand_fractions(m);
    for (std::size_t t = 0; t < m.teams.size(); ++t) {
      const std::string path = "/" + m.teams[t].program + "/" + m.teams[t].name;
      EXPECT_NEAR(by_team[path] / total, frac[t], 0.03 * frac[t]) << path;
      // Relative to its share of the cluster: 0.3x..4x before scaling, times load / mean factor.
      const double vs_share = by_team[path] / capacity / (m.teams[t].share / 100);
      EXPECT_GT(vs_share, 0) << path;
    }
    double want_gangs = 0;
    for (std::size_t t = 0; t < m.teams.size(); ++t) {
      want_gangs += frac[t] * m.teams[t].gang_fraction;
    }
    EXPECT_NEAR(gangs / total, want_gangs, 0.02);
    EXPECT_EQ(largest, 256);  // a quarter of the cluster
    EXPECT_EQ(debug_too_long, 0);
    EXPECT_GT(sweeps_protected, 0);  // preemptible sweeps exist
  }
}

TEST(SimLabWorkload, ArrivalsFollowTheDailyRhythm) {
  LabWorkloadModel m;
  const Workload w = generate_lab_workload(m);
  std::size_t afternoon = 0, night = 0, weekday = 0, weekend = 0;
  for (const SimJob& j : w.jobs) {
    const long day = j.submit / 86400;
    const long hour = j.submit % 86400 / 3600;
    afternoon += hour >= 12 && hour < 16;
    night += hour >= 0 && hour < 4;
    (day % 7 >= 5 ? weekend : weekday) += 1;
  }
  // cos peak at 14:00 vs trough at 02:00 with amplitude 0.6: about 1.6 / 0.4 = 4x.
  EXPECT_GT(static_cast<double>(afternoon), 2.5 * static_cast<double>(night));
  // Per day, weekends are about half as busy.
  EXPECT_LT(static_cast<double>(weekend) / 2 * 1.5, static_cast<double>(weekday) / 5);
}

TEST(SimLabWorkload, ClosedLoopOutstandingRequestsAreTheLoad) {
  // Every person's first jobs are outstanding at once: their GPUs, averaged over seeds (gang
  // sizes vary a lot), are load x the cluster's GPUs.
  for (double load : {1.0, 2.5}) {
    double sum = 0;
    const int seeds = 40;
    for (int s = 1; s <= seeds; ++s) {
      LabWorkloadModel m;
      m.closed_loop = true;
      m.load = load;
      m.days = 2;
      m.seed = static_cast<std::uint64_t>(s);
      for (const SimJob& j : generate_lab_workload(m).jobs) sum += j.gpus;
    }
    EXPECT_NEAR(sum / seeds / 1024.0, load, 0.06 * load) << load;
  }
}

// Wraps a closed loop and keeps what it was told and what it answered.
class Recorder : public JobSource {
 public:
  struct End {
    std::uint32_t user;
    core::Time at;
    std::vector<core::Time> answers;
  };
  Recorder(std::unique_ptr<JobSource> inner, std::vector<End>* log)
      : inner_(std::move(inner)), log_(log) {}
  std::vector<SimJob> on_job_end(const SimJob& ended, core::Time t) override {
    std::vector<SimJob> next = inner_->on_job_end(ended, t);
    End e{ended.user, t, {}};
    for (const SimJob& j : next) {
      EXPECT_EQ(j.user, ended.user) << "the next job is the same person's";
      e.answers.push_back(j.submit);
    }
    log_->push_back(std::move(e));
    return next;
  }
  core::Time horizon() const override { return inner_->horizon(); }

 private:
  std::unique_ptr<JobSource> inner_;
  std::vector<End>* log_;
};

TEST(SimLabWorkload, ClosedLoopKeepsAtMostKOutstandingAndThinksBeforeTheNext) {
  LabWorkloadModel m;
  m.closed_loop = true;
  m.nodes = 16;  // 128 GPUs; gangs of 32-128
  m.nodes_per_block = 4;
  m.kinds[static_cast<int>(LabKind::LargeGang)].gpu_sizes = {32, 64, 128};
  m.kinds[static_cast<int>(LabKind::LargeGang)].gpu_weights = {0.5, 0.3, 0.2};
  m.days = 3;
  m.load = 2.5;
  m.outstanding_per_user = 2;
  ASSERT_TRUE(validate(m).ok());
  const Workload w = generate_lab_workload(m);
  Diagnostics d;
  Scenario sc = make_scenario(lab_cluster(m), lab_budgets(m), w, d);
  ASSERT_TRUE(d.empty());
  std::vector<Recorder::End> log;
  sc.job_source = [&] { return std::make_unique<Recorder>(lab_closed_loop(m), &log); };
  SimOptions o;
  const auto p = find_policy("fairshare");
  o.policy_name = p->name;
  o.policy = p->config;
  o.record_events = true;
  o.until = m.days * core::kDay;
  const RunResult r = simulate(sc, o);
  for (const Check& c : r.checks) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;

  std::map<std::uint32_t, int> outstanding;
  for (const SimJob& j : w.jobs) {
    ASSERT_GT(j.user, 0u);
    ++outstanding[j.user];
  }
  for (const auto& [u, n] : outstanding) ASSERT_LE(n, m.outstanding_per_user) << "user " << u;
  ASSERT_GT(log.size(), 100u) << "the loop must have turned";
  double gaps = 0;
  std::size_t answered = 0;
  std::vector<core::Time> made;
  for (const Recorder::End& e : log) {
    --outstanding[e.user];
    EXPECT_GE(outstanding[e.user], 0);
    EXPECT_LE(e.answers.size(), 1u);
    for (core::Time at : e.answers) {
      EXPECT_GE(at, e.at) << "the next job comes after the end";
      EXPECT_LT(at, m.days * core::kDay) << "nobody submits past the period";
      gaps += static_cast<double>(at - e.at);
      ++answered;
      made.push_back(at);
      ++outstanding[e.user];
    }
    EXPECT_LE(outstanding[e.user], m.outstanding_per_user) << "user " << e.user;
  }
  ASSERT_GT(answered, 50u);
  // Think times are exponential (mean 20 min), stretched at night and at weekends by the rhythm.
  EXPECT_GT(gaps / static_cast<double>(answered), 0.8 * static_cast<double>(m.think_time));
  // Every job made was submitted to the core at its time (if that came before the end).
  std::vector<core::Time> submitted;
  for (const EventRecord& e : r.events) {
    if (e.event == "submit" && e.job > w.jobs.size()) submitted.push_back(e.time);
  }
  std::erase_if(made, [&](core::Time t) { return t > r.end; });
  std::sort(made.begin(), made.end());
  std::sort(submitted.begin(), submitted.end());
  EXPECT_EQ(made, submitted);
  EXPECT_EQ(r.jobs, w.jobs.size() + submitted.size());
}

TEST(SimLabWorkload, ExampleFilesAreTheModelsClusterAndBudgets) {
  const LabWorkloadModel m;
  auto b = load_budget_config(std::string(ALLOT_EXAMPLES_DIR) + "/lab-budgets.yaml");
  ASSERT_TRUE(b.ok()) << b.error().message();
  core::BudgetTree from_file, from_model;
  ASSERT_TRUE(apply_budgets(b.value(), from_file).ok());
  ASSERT_TRUE(apply_budgets(lab_budgets(m), from_model).ok());
  ASSERT_EQ(from_file.size(), from_model.size());
  for (const LabTeam& t : m.teams) {
    const std::string path = "/" + t.program + "/" + t.name;
    const auto f = from_file.find(path);
    const auto g = from_model.find(path);
    ASSERT_TRUE(f && g) << path;
    EXPECT_NEAR(from_file.allocated_fraction(*f, 0), t.share / 100, 1e-9) << path;
    EXPECT_NEAR(from_model.allocated_fraction(*g, 0), t.share / 100, 1e-9) << path;
  }
  auto c = load_cluster_config(std::string(ALLOT_EXAMPLES_DIR) + "/lab-1024.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c.value().total_gpus(), lab_cluster(m).total_gpus());
  EXPECT_EQ(c.value().pools.front().gpu_model, "H100");
}

TEST(SimLabWorkload, BadParametersNameTheirField) {
  LabWorkloadModel m;
  m.days = 0;
  EXPECT_EQ(validate(m).error().field, "days");
  m = LabWorkloadModel{};
  m.teams[2].gang_fraction = 1.5;
  EXPECT_EQ(validate(m).error().field, "teams.scaling.gang_fraction");
  m = LabWorkloadModel{};
  m.kinds[3].gpu_sizes = {12};
  EXPECT_EQ(validate(m).error().field, "kinds.large-gang.gpu_sizes");
}

}  // namespace
}  // namespace allot::sim
