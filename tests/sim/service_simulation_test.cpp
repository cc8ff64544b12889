// Inference services in the simulator (docs/simulator.md, "Inference services"): replicas kept
// and scaled with the core's autoscaler, their figures apart from the training tier's.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sim/reports.h"
#include "sim/service_model.h"
#include "sim_test_helpers.h"

namespace allot::sim {
namespace {

ClusterConfig cluster(int nodes, int gpus_per_node = 8) {
  ClusterConfig c;
  NodePool p;
  p.name = "p";
  p.nodes = nodes;
  p.gpu_model = "H100";
  p.gpus_per_node = gpus_per_node;
  c.pools.push_back(p);
  return c;
}

ServiceFile services(const std::string& yaml) {
  auto f = parse_services(yaml, "services.yaml");
  EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message());
  return f.ok() ? f.value() : ServiceFile{};
}

// `sc` with the services of `yaml` added (their load's noise seeded by `seed`).
Scenario with_services(Scenario sc, const char* yaml, std::uint64_t seed = 1) {
  const auto st = add_services(sc, services(yaml), seed);
  EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.error().message());
  return sc;
}

// `sc` under options `o` (fair share's by default, every event recorded) to `until`, its
// conservation checks passed.
RunResult run_to(const Scenario& sc, core::Time until, SimOptions o = policy_options("fairshare")) {
  o.until = until;
  RunResult r = simulate(sc, o);
  expect_checks_pass(r);
  return r;
}

const char* kDiurnal = R"(
budgets:
  - {name: serve, share: 1}
services:
  - name: chat
    budget: /serve
    gpus: 1
    min_replicas: 2
    max_replicas: 12
    start_delay: 2m
    capacity: 10
    load: {trough: 10, peak: 100, peak_hour: 12}
    autoscale: {load_high: 8, load_low: 4, cooldown: 1m}
)";

int count_events(const RunResult& r, const std::string& what, const std::string& reason_has) {
  return static_cast<int>(std::count_if(r.events.begin(), r.events.end(), [&](const auto& e) {
    return e.event == what && e.reason.find(reason_has) != std::string::npos;
  }));
}

TEST(ServiceSimulation, ADiurnalLoadScalesAServiceOutAndBackIn) {
  const Scenario sc = with_services(
      scenario_of(cluster(2), {{"/train", 1}}, {job(1, 0, "/train", 1, 2 * core::kDay)}), kDiurnal);
  const RunResult r = run_to(sc, 2 * core::kDay);
  ASSERT_EQ(r.services.size(), 1u);
  const ServiceResult& s = r.services[0];
  // The load swings 10 to 100 requests/s: 2 replicas at night (the minimum), 12 at noon.
  EXPECT_GT(s.scale_outs, 10u);
  EXPECT_GT(s.scale_ins, 10u);
  EXPECT_GT(s.mean_desired, 2.5);
  EXPECT_LT(s.mean_desired, 12);
  // The cluster has room: every replica wanted serves but while it loads, and each scale-out
  // serves after exactly its start delay.
  EXPECT_GT(s.availability, 0.95);
  EXPECT_DOUBLE_EQ(s.floor_held, 1.0 - 120.0 / (2 * core::kDay));  // the first replicas' load
  EXPECT_EQ(s.scale_up_delay.p50, 120);
  EXPECT_EQ(s.scale_up_delay.max, 120);
  EXPECT_GT(s.served, 0.9);
  EXPECT_EQ(s.preemptions, 0u);
  // Scale-in cancels replicas; the figures of the training tier count none of them.
  EXPECT_EQ(count_events(r, "cancel", "scaled in"), static_cast<int>(s.scale_ins));
  EXPECT_EQ(r.jobs, 1u);
  EXPECT_EQ(r.completed, 1u);
  for (const auto& [kind, w] : r.waits) {
    if (kind == "all") {
      EXPECT_EQ(w.count, 1u);
    }
  }
}

TEST(ServiceSimulation, TrainingTakesElasticReplicasButNeverTheProtectedOnes) {
  // One 8-GPU node. The service wants 6 replicas of 1 GPU from the start (its load is high all
  // day): 2 protected, 4 elastic. A funded 6-GPU training job arrives an hour in and may take the
  // elastic ones, not the protected ones; the service replaces them, and they wait. (The run
  // starts with the first submission: a short job at 0.)
  const char* yaml = R"(
budgets:
  - {name: serve, share: 1}
services:
  - name: chat
    budget: /serve
    min_replicas: 2
    max_replicas: 6
    start_delay: 1m
    load: {trough: 1000, peak: 1000}
    autoscale: {load_high: 10, load_low: 5, cooldown: 1m}
)";
  const Scenario sc =
      with_services(scenario_of(cluster(1), {{"/train", 1}},
                                {job(1, 0, "/train", 1, 60),
                                 job(2, core::kHour, "/train", 6, 4 * core::kHour, core::kHour)}),
                    yaml);
  const RunResult r = run_to(sc, 6 * core::kHour);
  ASSERT_EQ(r.services.size(), 1u);
  const ServiceResult& s = r.services[0];
  EXPECT_EQ(s.preemptions, 4u);  // the elastic replicas, for the training job
  EXPECT_EQ(count_events(r, "stop", "replica of chat"), 4);
  EXPECT_DOUBLE_EQ(s.floor_held, 1.0 - 60.0 / (6 * core::kHour));  // the protected ones stay
  EXPECT_EQ(r.end, 6 * core::kHour);                               // services run to --until
  EXPECT_LT(s.availability, 0.6);  // 4 of 6 wanted wait for the 4 hours of training
  EXPECT_EQ(r.preemptions, 0u);    // replicas' stops are the inference tier's
  EXPECT_EQ(r.completed, 2u);
}

TEST(ServiceSimulation, TheBaselinesAndTheSummaryCarryTheTiers) {
  const Scenario sc = with_services(
      scenario_of(cluster(2), {{"/train", 1}}, {job(1, 0, "/train", 4, core::kDay)}), kDiurnal, 7);
  for (const char* p : {"fairshare", "fifo", "priority", "fairtree"}) {
    const RunResult r = run_to(sc, core::kDay, policy_options(p));
    ASSERT_EQ(r.services.size(), 1u) << p;
    EXPECT_GT(r.services[0].scale_outs, 0u) << p;
    // The budget funding a service is left out of the training tier's impact.
    EXPECT_EQ(r.training_impact_mean,
              r.budgets[0].path == "/train" ? r.budgets[0].impact : r.budgets[1].impact)
        << p;
  }
}

TEST(ServiceSimulation, ReplicasOnMigInstancesStaticOrMadeByDynamicMig) {
  // Replicas of one 3g.40gb each, 4 wanted all day: on a node whose 2 MIG GPUs hold two 3g.40gb
  // each, or on whole GPUs the core splits for them (dynamic MIG).
  const char* yaml = R"(
budgets:
  - {name: serve, share: 1}
services:
  - name: asr
    budget: /serve
    mig: 3g.40gb
    min_replicas: 1
    max_replicas: 4
    start_delay: 30s
    load: {trough: 1000, peak: 1000}
    autoscale: {load_high: 10, load_low: 5, cooldown: 30s}
)";
  for (const bool dynamic : {false, true}) {
    ClusterConfig c = cluster(1);
    if (!dynamic) {
      c.pools[0].mig_gpus = 2;
      c.pools[0].mig_profiles = {"3g.40gb", "3g.40gb"};
    }
    SimOptions o = policy_options("fairshare");
    o.policy.mig_dynamic = dynamic;
    const RunResult r =
        run_to(with_services(scenario_of(c, {{"/train", 1}}, {job(1, 0, "/train", 1, 60)}), yaml),
               2 * core::kHour, o);
    ASSERT_EQ(r.services.size(), 1u);
    const ServiceResult& s = r.services[0];
    EXPECT_EQ(s.scale_outs, 3u) << dynamic;  // 1 -> 4
    EXPECT_GT(s.availability, 0.95) << dynamic;
    EXPECT_EQ(s.scale_up_delay.count, 3u) << dynamic;
    // Dynamic: two GPUs split, into two 3g.40gb each (a node reserved for a waiting replica is
    // split all the same).
    EXPECT_EQ(r.mig_splits, dynamic ? 2u : 0u) << dynamic;
    bool on_mig = false;
    for (const auto& [kind, w] : r.waits) on_mig |= kind == "inference" && w.count == 4;
    EXPECT_TRUE(on_mig) << dynamic;
  }
}

TEST(ServiceSimulation, GpuMemoryPressureScalesAServiceWithoutALoadSignal) {
  // No load watermarks: memory alone. At noon 100 requests/s over 2 replicas is 0.2 + 0.02 x 50
  // = 100% of their GPUs' memory, above 80%: out, until under it; at night 10 requests/s, 30%.
  const char* yaml = R"(
budgets:
  - {name: serve, share: 1}
services:
  - name: chat
    budget: /serve
    min_replicas: 2
    max_replicas: 12
    start_delay: 1m
    load: {trough: 10, peak: 100, peak_hour: 12}
    memory: {idle: 0.2, per_request: 0.02}
    autoscale: {memory_high: 0.8, memory_low: 0.4, cooldown: 1m}
)";
  const Scenario sc =
      with_services(scenario_of(cluster(2), {{"/train", 1}}, {job(1, 0, "/train", 1, 60)}), yaml);
  const RunResult r = run_to(sc, core::kDay);
  ASSERT_EQ(r.services.size(), 1u);
  // At the peak the memory is under 80% only with 0.2 + 0.02 x 100 / n < 0.8: n >= 4, so two
  // replicas out in the morning and two in at night (under 40%: 0.02 x load / 3 < 0.2).
  EXPECT_EQ(r.services[0].scale_outs, 2u);
  EXPECT_EQ(r.services[0].scale_ins, 2u);
  EXPECT_EQ(count_events(r, "scale", "GPU memory"), 4);
  EXPECT_EQ(count_events(r, "scale", "load"), 0);
  EXPECT_GT(r.services[0].mean_desired, 2.2);
}

TEST(ServiceSimulation, TheLoadIsSeededAndDiurnal) {
  SimService s;
  s.load = DiurnalLoad{10, 110, 12, 0};
  EXPECT_DOUBLE_EQ(service_load(s, 0, 1, 12 * core::kHour), 110);
  EXPECT_DOUBLE_EQ(service_load(s, 0, 1, 0), 10);
  EXPECT_DOUBLE_EQ(service_load(s, 0, 1, core::kDay + 12 * core::kHour), 110);
  s.load.noise = 0.5;
  const double a = service_load(s, 0, 1, 12 * core::kHour);
  EXPECT_DOUBLE_EQ(a, service_load(s, 0, 1, 12 * core::kHour));  // the same for every policy
  EXPECT_GE(a, 55);
  EXPECT_LE(a, 165);
  bool differs = false;
  for (int seed = 2; seed < 10 && !differs; ++seed) {
    differs = service_load(s, 0, seed, 12 * core::kHour) != a;
  }
  EXPECT_TRUE(differs);
}

TEST(ServiceSimulation, AServicesFileIsCheckedFieldByField) {
  auto error_of = [](const std::string& yaml) {
    auto f = parse_services(yaml, "s.yaml");
    return f.ok() ? std::string("accepted") : f.error().message();
  };
  const std::string head = "services:\n  - name: chat\n    budget: /serve\n";
  EXPECT_NE(error_of(head + "    replicas: 3\n").find("services[0].replicas: unknown field"),
            std::string::npos);
  EXPECT_NE(error_of(head + "    load: {peak: 1, valley: 2}\n").find("load.valley: unknown"),
            std::string::npos);
  EXPECT_NE(error_of(head + "    min_replicas: 3\n    max_replicas: 2\n").find("max_replicas"),
            std::string::npos);
  EXPECT_NE(error_of(head + "    max_replicas: 4\n").find("autoscale.load_high"),
            std::string::npos);
  EXPECT_NE(error_of(head + "    autoscale: {memory_high: 0.5, memory_low: 0.6}\n")
                .find("autoscale.memory_low"),
            std::string::npos);
  EXPECT_NE(error_of(head + "    memory: {idle: 2}\n").find("memory.idle"), std::string::npos);
  EXPECT_EQ(error_of(head + "    max_replicas: 3\n    memory: {idle: 0.1, per_request: 0.01}\n"),
            "accepted");  // memory alone may drive it
  EXPECT_NE(error_of(head + "    gpus: 1\n    mig: 1g.10gb\n").find("services[0].mig"),
            std::string::npos);
  EXPECT_NE(error_of(head + "    contract: 9h\n").find("services[0].contract"), std::string::npos);
  EXPECT_NE(error_of(head + "    min_replicas: 0\n").find("services[0].max_replicas"),
            std::string::npos);
  EXPECT_NE(error_of(head + "    gpus: -1\n").find("services[0].gpus"), std::string::npos);
  EXPECT_NE(error_of(head + "    load: {peak: .nan}\n").find("load.peak"), std::string::npos);
  EXPECT_NE(error_of("services:\n  - name: Chat!\n    budget: /s\n").find("name"),
            std::string::npos);
  EXPECT_NE(error_of(head + "  - name: chat\n    budget: /serve\n").find("given twice"),
            std::string::npos);
  EXPECT_NE(error_of("services: []\n").find("empty"), std::string::npos);
  EXPECT_NE(error_of("servces: []\n").find("services"), std::string::npos);
  EXPECT_NE(error_of("services:\n  - [\n").find("yaml"), std::string::npos);
  EXPECT_EQ(error_of(head), "accepted");

  // Budgets and shapes are checked against the scenario.
  Scenario sc = scenario_of(cluster(1), {{"/train", 1}}, {job(1, 0, "/train", 1, 60)});
  auto st = add_services(sc, services("services:\n  - {name: a, budget: /nowhere}\n"), 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("budget"), std::string::npos);
  st = add_services(sc,
                    services("budgets:\n  - {name: train, share: 1}\nservices:\n"
                             "  - {name: a, budget: /train}\n"),
                    1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("already"), std::string::npos);
  st = add_services(sc, services("services:\n  - {name: a, budget: /train, gpus: 9}\n"), 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("gpus"), std::string::npos);
  EXPECT_TRUE(sc.services.empty());
}

TEST(ServiceSimulation, ARunWithoutServicesReportsNoTier) {
  Scenario sc = scenario_of(cluster(1), {{"/train", 1}}, {job(1, 0, "/train", 1, 60)});
  const RunResult r = simulate(sc, policy_options("fairshare"));
  EXPECT_TRUE(r.services.empty());
  for (const auto& [kind, w] : r.waits) EXPECT_NE(kind, "inference");
}

}  // namespace
}  // namespace allot::sim
