// Hand-checkable runs with exact results: FIFO on 3 nodes, a preemption, a drain, a failure; the
// conservation checks; byte-identical reports for the same seed.
#include "sim/simulation.h"

#include <gtest/gtest.h>

#include <map>

#include "sim/experiment.h"
#include "sim/policies.h"
#include "sim/reports.h"
#include "sim/sweep.h"
#include "sim/text_table.h"
#include "sim/tradeoff.h"
#include "sim_test_helpers.h"

namespace allot::sim {
namespace {

Scenario scenario(int nodes, std::vector<SimJob> jobs,
                  std::vector<BudgetEntry> budgets = {{"/a", 1}, {"/b", 1}}) {
  ClusterConfig c;
  c.name = "test";
  c.pools.push_back({"n", nodes, "H100", 8, 0, 0, {}});
  return scenario_of(c, std::move(budgets), std::move(jobs));
}

SimOptions options(const char* policy) {
  SimOptions o = policy_options(policy);
  o.cost.checkpoint_interval = 30;
  o.cost.restart_delay = 5;
  return o;
}

// Logical job -> time of its "finish" event.
std::map<std::uint64_t, core::Time> finishes(const RunResult& r) {
  std::map<std::uint64_t, core::Time> out;
  for (const EventRecord& e : r.events) {
    if (e.event == "finish") {
      EXPECT_FALSE(out.count(e.job)) << "job " << e.job << " finished twice";
      out[e.job] = e.time;
    }
  }
  return out;
}

TEST(Simulation, FifoOnThreeNodes) {
  // 24 GPUs. J1 (16) and J2 (8) start at 0; J3 (8) waits for J2's node; J4 (4) for J3's.
  const Scenario sc = scenario(3, {job(1, 0, "/a", 16, 100), job(2, 0, "/a", 8, 50),
                                   job(3, 10, "/a", 8, 30), job(4, 20, "/a", 4, 10)});
  const RunResult r = simulate(sc, options("fifo"));
  expect_checks_pass(r);
  EXPECT_EQ(finishes(r),
            (std::map<std::uint64_t, core::Time>{{1, 100}, {2, 50}, {3, 80}, {4, 90}}));
  EXPECT_EQ(r.completed, 4u);
  EXPECT_EQ(r.end, 100);
  EXPECT_DOUBLE_EQ(r.makespan, 100);
  EXPECT_DOUBLE_EQ(r.availability, 1.0);
  // 16x100 + 8x50 + 8x30 + 4x10 = 2280 of 2400 GPU-seconds.
  EXPECT_DOUBLE_EQ(r.occupancy, 2280.0 / 2400.0);
  EXPECT_DOUBLE_EQ(r.occupancy_allocated + r.occupancy_unallocated, r.occupancy);
  ASSERT_EQ(r.waits[0].first, "all");
  EXPECT_EQ(r.waits[0].second.count, 4u);
  EXPECT_DOUBLE_EQ(r.waits[0].second.max, 60);   // J4: 20 -> 80
  EXPECT_DOUBLE_EQ(r.waits[0].second.p50, 0);    // J1, J2 at once
  EXPECT_DOUBLE_EQ(r.waits[0].second.mean, 25);  // (0 + 0 + 40 + 60) / 4
  EXPECT_EQ(r.preemptions, 0u);
  EXPECT_DOUBLE_EQ(r.utilization, 1.0);
}

TEST(Simulation, CycleTimeIsChargedToTheBacklogItFaced) {
  // 1,500 whole-node jobs on one node, all submitted at 0: the first cycles face 1,499-1,500
  // pending jobs, the last ones fewer than 1,000.
  std::vector<SimJob> jobs;
  for (std::uint64_t i = 1; i <= 1500; ++i) jobs.push_back(job(i, 0, "/a", 8, 10));
  const RunResult r = simulate(scenario(1, jobs), options("fifo"));
  expect_checks_pass(r);
  ASSERT_EQ(r.core_by_backlog.size(), 6u);
  std::uint64_t cycles = 0;
  double seconds = 0;
  for (std::size_t i = 0; i < r.core_by_backlog.size(); ++i) {
    const auto& b = r.core_by_backlog[i];
    if (i > 0) {
      EXPECT_LT(r.core_by_backlog[i - 1].pending_from, b.pending_from);
    }
    cycles += b.cycles;
    seconds += b.core_seconds;
  }
  EXPECT_EQ(cycles, r.cycles);
  EXPECT_NEAR(seconds, r.core_seconds, 1e-9);
  EXPECT_EQ(r.core_by_backlog[1].pending_from, 1000u);
  // Jobs 1..501 each end with at least 1,000 still waiting behind the next one.
  EXPECT_GE(r.core_by_backlog[1].cycles, 500u);
  EXPECT_GE(r.core_by_backlog[0].cycles, 999u);
  EXPECT_EQ(r.core_by_backlog[2].cycles, 0u);
}

TEST(Simulation, PreemptionLosesWorkSinceTheCheckpointAndPaysTheRestartDelay) {
  // One node. J1 runs unallocated (minimum runtime 0); J2 is funded and takes the node at 100.
  const Scenario sc =
      scenario(1, {job(1, 0, "/a", 8, 1000, 0, true), job(2, 100, "/b", 8, 100, 3600, true)});
  const RunResult r = simulate(sc, options("fairshare"));
  expect_checks_pass(r);
  EXPECT_EQ(r.preemptions, 1u);
  // J1 ran 100 s, kept 90 (checkpoints every 30 s), lost 10; resumes at 200 with 910 s left
  // after a 5 s restore: ends at 1115.
  EXPECT_EQ(finishes(r), (std::map<std::uint64_t, core::Time>{{1, 1115}, {2, 200}}));
  EXPECT_NEAR(r.lost_gpu_hours, (10 + 5) * 8 / 3600.0, 1e-12);
  EXPECT_EQ(r.runs, 3u);
}

TEST(Simulation, NonResumablePreemptedJobStartsOverAsANewJob) {
  const Scenario sc =
      scenario(1, {job(1, 0, "/a", 8, 1000, 0, false), job(2, 100, "/b", 8, 100, 3600, true)});
  const RunResult r = simulate(sc, options("fairshare"));
  expect_checks_pass(r);
  EXPECT_EQ(r.preemptions, 1u);
  EXPECT_EQ(r.resubmissions, 1u);
  EXPECT_EQ(finishes(r), (std::map<std::uint64_t, core::Time>{{1, 1200}, {2, 200}}));
  EXPECT_NEAR(r.lost_gpu_hours, 100 * 8 / 3600.0, 1e-12);
}

TEST(Simulation, InteractiveSessionSavesItsWorkWithinTheStopGrace) {
  // J1, an interactive session (non-resumable, unallocated), is preempted at 100 by J2. With the
  // interactive stop grace (docs/policy.md section 9) it saves its 100 s of work; its GPUs stay
  // busy for the grace, so J2 runs from 100 but makes progress only from 400 and ends at 500;
  // J1 continues with 900 s left from 500 and ends at 1400.
  auto session = job(1, 0, "/a", 8, 1000, 0, false);
  session.kind = core::JobKind::Interactive;
  const Scenario sc = scenario(1, {session, job(2, 100, "/b", 8, 100, 3600, true)});
  SimOptions o = options("fairshare");
  EXPECT_EQ(o.policy.interactive_stop_grace, 0) << "off unless asked (design/0010)";
  o.policy.interactive_stop_grace = 300;
  const RunResult r = simulate(sc, o);
  expect_checks_pass(r);
  EXPECT_EQ(r.preemptions, 1u);
  EXPECT_EQ(r.interactive_preemptions, 1u);
  EXPECT_EQ(finishes(r), (std::map<std::uint64_t, core::Time>{{1, 1400}, {2, 500}}));
  EXPECT_EQ(r.interactive_lost_gpu_hours, 0) << "its work was saved";
  EXPECT_NEAR(r.lost_gpu_hours, 300 * 8 / 3600.0, 1e-12) << "the grace's GPU time";
  EXPECT_EQ(r.interactive_wait.count, 1u);

  // Without the grace it is an ordinary stop: the session starts over.
  o.policy.interactive_stop_grace = 0;
  const RunResult plain = simulate(sc, o);
  EXPECT_EQ(finishes(plain), (std::map<std::uint64_t, core::Time>{{1, 1200}, {2, 200}}));
  EXPECT_NEAR(plain.interactive_lost_gpu_hours, 100 * 8 / 3600.0, 1e-12);
  // The baselines never have it.
  EXPECT_EQ(find_policy("priority")->config.interactive_stop_grace, 0);
}

TEST(Simulation, UnhealthyNodeDrainsAtTheEndOfTheMinimumRuntime) {
  // Two nodes; J1 (allocated, minimum runtime 100) runs on node 0, which fails a health check at
  // 50. It is drained at 100 and resumes on node 1 at once.
  const Scenario sc = scenario(2, {job(1, 0, "/a", 8, 1000, 100, true)}, {{"/a", 1}});
  SimOptions o = options("fairshare");
  o.scripted_health = {{50, 0, core::NodeHealth::Unhealthy}, {500, 0, core::NodeHealth::Healthy}};
  const RunResult r = simulate(sc, o);
  expect_checks_pass(r);
  EXPECT_EQ(r.drain_stops, 1u);
  EXPECT_EQ(r.node_down_stops, 0u);
  // Kept 90 of 100 s; 910 s left + 5 s restore from 100: ends at 1015.
  EXPECT_EQ(finishes(r), (std::map<std::uint64_t, core::Time>{{1, 1015}}));
  // Node 0 unavailable from 50 to 500: 8 x 450 of 16 x 1015 GPU-seconds.
  EXPECT_DOUBLE_EQ(r.availability, 1.0 - 8.0 * 450 / (16.0 * 1015));
  // 50 s of the job's run was on an unhealthy node: not counted as occupancy.
  EXPECT_NEAR(r.draining_gpu_hours, 8 * 50 / 3600.0, 1e-12);
}

TEST(Simulation, NodeFailureLosesTheJobAtOnce) {
  const Scenario sc = scenario(2, {job(1, 0, "/a", 8, 1000, 100, true)}, {{"/a", 1}});
  SimOptions o = options("fairshare");
  o.scripted_health = {{50, 0, core::NodeHealth::Down}, {500, 0, core::NodeHealth::Healthy}};
  const RunResult r = simulate(sc, o);
  expect_checks_pass(r);
  EXPECT_EQ(r.node_down_stops, 1u);
  // Kept 30 of 50 s; 970 s left + 5 s restore from 50 on node 1: ends at 1025.
  EXPECT_EQ(finishes(r), (std::map<std::uint64_t, core::Time>{{1, 1025}}));
  EXPECT_NEAR(r.lost_gpu_hours, (20 + 5) * 8 / 3600.0, 1e-12);
}

TEST(Simulation, ImpactIsDeliveredOverOwedCappedAtDemand) {
  // /a and /b each own half of one node (4 GPUs) for the hour; /a asks for 8 GPUs for the hour
  // and gets them, /b asks for nothing: /a is owed 4 GPU-hours and gets them; /b is owed nothing.
  const Scenario sc = scenario(1, {job(1, 0, "/a", 8, 3600, 3600, true)});
  const RunResult r = simulate(sc, options("fairshare"));
  expect_checks_pass(r);
  ASSERT_EQ(r.budgets.size(), 2u);
  EXPECT_EQ(r.budgets[0].path, "/a");
  EXPECT_DOUBLE_EQ(r.budgets[0].owed_gpu_hours, 4);
  EXPECT_DOUBLE_EQ(r.budgets[0].delivered_gpu_hours, 8);
  EXPECT_DOUBLE_EQ(r.budgets[0].impact, 1);
  EXPECT_DOUBLE_EQ(r.budgets[1].owed_gpu_hours, 0);
  EXPECT_EQ(r.budgets_owed, 1u);
}

Scenario random_scenario(int jobs, std::uint64_t seed) {
  std::vector<SimJob> v;
  std::uint64_t x = seed;
  auto next = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x >> 33;
  };
  const char* budgets[] = {"/a", "/b"};
  for (int i = 1; i <= jobs; ++i) {
    const int gpus_choice[] = {1, 2, 4, 8, 16};
    v.push_back(job(i, static_cast<core::Time>(i * 300 + next() % 300), budgets[next() % 2],
                    gpus_choice[next() % 5], 600 + static_cast<core::Duration>(next() % 20000),
                    (next() % 4) * 1800, next() % 3 != 0));
  }
  return scenario(4, std::move(v));
}

TEST(Simulation, EveryPolicyPassesTheConservationChecksWithFaults) {
  const Scenario sc = random_scenario(300, 7);
  for (const PolicyPreset& p : policy_presets()) {
    SimOptions o = options(p.name.c_str());
    o.faults.enabled = true;
    o.faults.mtbf = 2 * core::kDay;
    o.faults.repair = 2 * core::kHour;
    const RunResult r = simulate(sc, o);
    SCOPED_TRACE(p.name);
    expect_checks_pass(r);
    EXPECT_EQ(r.completed, 300u);
    EXPECT_LT(r.availability, 1.0);
    EXPECT_LE(r.occupancy, 1.0);
    EXPECT_GT(r.occupancy, 0.0);
  }
}

TEST(Simulation, SameSeedSameReportByteForByte) {
  const Scenario sc = random_scenario(200, 3);
  ExperimentSpec spec;
  spec.sim.faults.enabled = true;
  spec.sim.faults.mtbf = 3 * core::kDay;
  auto configs = policy_runs(spec);
  ASSERT_TRUE(configs.ok());
  Inputs in;
  in.scenario = sc;
  Report a{&spec, &in, run_all(sc, configs.value(), 4)};
  Report b{&spec, &in, run_all(sc, configs.value(), 1)};
  const std::string ja = report_json(a);
  EXPECT_EQ(ja, report_json(b));
  EXPECT_NE(ja.find("\"availability\""), std::string::npos);
  EXPECT_EQ(report_html(a), report_html(b));
  spec.seed = 2;
  auto other = policy_runs(spec);
  Report c{&spec, &in, run_all(sc, other.value(), 4)};
  EXPECT_NE(ja, report_json(c)) << "a different fault seed should change the run";
}

// ---------------------------------------------------------------------------------------------
// Sweeps and their reports.

TEST(SimTextTable, ColumnsAreAsWideAsTheirWidestCell) {
  TextTable t({"policy", "avail", "jain"});
  t.add_row({"fairshare budgets=philly-budgets-equal lookback=14d", "99.5%", "0.912"});
  t.add_row({"fifo", "100.0%", "1.000"});
  const std::string out = t.render();
  std::vector<std::string> lines;
  for (std::size_t at = 0, nl; (nl = out.find('\n', at)) != std::string::npos; at = nl + 1) {
    lines.push_back(out.substr(at, nl - at));
  }
  ASSERT_EQ(lines.size(), 3u);
  // Right-aligned columns end at the same place on every line; the first starts at 0.
  for (const std::string& l : lines) EXPECT_EQ(l.size(), lines[0].size()) << l;
  const std::size_t label =
      std::string("fairshare budgets=philly-budgets-equal lookback=14d").size();
  EXPECT_EQ(lines[0].find("avail"), label + 2);  // "100.0%" is one wider than "avail"
  EXPECT_EQ(lines[2].substr(0, 5), "fifo ");
  EXPECT_EQ(lines[0].substr(lines[0].size() - 4), "jain");
  EXPECT_EQ(TextTable::display_width("\xc3\xa9t\xc3\xa9"), 3u);  // "ete" with accents
}

TEST(SimSweep, BudgetFilesAreAGridAxisWithTheirOwnScenario) {
  const Scenario equal = scenario(4, {job(1, 0, "/a", 8, 600)});
  const Scenario skewed = scenario(4, {job(1, 0, "/a", 8, 600)}, {{"/a", 3}, {"/b", 1}});
  SweepGrid g;
  g.budgets = {{budgets_name("examples/equal.yaml"), &equal}, {budgets_name("skewed"), &skewed}};
  g.lookback = {core::kDay, 7 * core::kDay};
  SimOptions base = options("fairshare");
  const std::vector<SimOptions> points = sweep_points({base}, g);
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[0].label, "budgets=equal lookback=1d");
  EXPECT_EQ(points[1].label, "budgets=equal lookback=7d");
  EXPECT_EQ(points[3].label, "budgets=skewed lookback=7d");
  EXPECT_EQ(points[0].scenario, &equal);
  EXPECT_EQ(points[2].scenario, &skewed);
  EXPECT_EQ(points[1].policy.lookback, 7 * core::kDay);
  // run_all runs each point on its own scenario: the skewed tree gives /a three quarters.
  const std::vector<RunResult> runs = run_all(equal, points, 2);
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_DOUBLE_EQ(runs[0].budgets[0].fraction, 0.5);
  EXPECT_DOUBLE_EQ(runs[2].budgets[0].fraction, 0.75);
}

TEST(SimSweep, ReportPlotsTheTradeOffOnePointPerGridPoint) {
  const Scenario sc = random_scenario(120, 5);
  ExperimentSpec spec;
  spec.policies = {"fairshare"};
  SweepGrid g;
  g.max_min_runtime = {2 * core::kHour, 8 * core::kHour};
  g.preemption_margin = {0.05, 0.2};
  auto bases = policy_runs(spec);
  ASSERT_TRUE(bases.ok());
  Inputs in;
  in.scenario = sc;
  Report rep{&spec, &in, run_all(sc, sweep_points(bases.value(), g), 2)};
  rep.sweep = true;
  rep.tradeoff_x = "lost-gpu-hours";
  ASSERT_EQ(rep.runs.size(), 4u);
  const std::string html = report_html(rep);
  EXPECT_NE(html.find("<h2>Trade-off</h2>"), std::string::npos);
  std::size_t circles = 0;
  for (std::size_t at = 0; (at = html.find("<circle", at)) != std::string::npos; ++at) ++circles;
  EXPECT_EQ(circles, 8u) << "two plots (impact, occupancy), one point per grid point";
  EXPECT_NE(html.find("4: fairshare max_min_runtime=8h margin=0.2"), std::string::npos);
  const TradeoffCost* lost = find_tradeoff_cost("lost-gpu-hours");
  ASSERT_NE(lost, nullptr);
  EXPECT_DOUBLE_EQ(*tradeoff_value(*lost, rep.runs[1]), rep.runs[1].lost_gpu_hours);
  EXPECT_EQ(find_tradeoff_cost("nonsense"), nullptr);
  // Without the sweep flag there is no trade-off section.
  rep.sweep = false;
  EXPECT_EQ(report_html(rep).find("Trade-off"), std::string::npos);
  // The terminal table names every point and writes each line once.
  const std::string table = summary_table(rep, false);
  EXPECT_NE(table.find("fairshare max_min_runtime=2h margin=0.05:"), std::string::npos);
  std::size_t lines = 0;
  for (char c : table) lines += c == '\n';
  EXPECT_EQ(lines, 1 + 4 + 4u) << table;
}

}  // namespace
}  // namespace allot::sim
