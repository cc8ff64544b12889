// Reading inputs: durations, cluster and budget YAML, the native format, Philly lines, and the
// messages for bad input.
#include <gtest/gtest.h>

#include "sim/budget_config.h"
#include "sim/cluster_config.h"
#include "sim/duration_text.h"
#include "sim/load_scaling.h"
#include "sim/simulation.h"
#include "sim/trace_assignment.h"
#include "sim/trace_loaders.h"

namespace allot::sim {
namespace {

TEST(SimDurationText, ParsesAndFormats) {
  EXPECT_EQ(parse_duration("90"), 90);
  EXPECT_EQ(parse_duration("30m"), 1800);
  EXPECT_EQ(parse_duration("1h30m"), 5400);
  EXPECT_EQ(parse_duration("7d"), 7 * 86400);
  EXPECT_FALSE(parse_duration("1h30").has_value());
  EXPECT_FALSE(parse_duration("abc").has_value());
  EXPECT_FALSE(parse_duration("").has_value());
  EXPECT_EQ(duration_text(5400), "1h30m");
  EXPECT_EQ(duration_text(0), "0s");
  EXPECT_EQ(duration_text(7 * 86400 + 5), "7d5s");
}

TEST(SimClusterConfig, ReadsPoolsAndNamesTheFieldAtFault) {
  auto c = parse_cluster_config(
      "name: t\npools:\n  - {name: a, nodes: 3, gpu_model: H100, gpus_per_node: 8}\n"
      "  - {name: b, nodes: 2, gpu_model: B200, gpus_per_node: 4, nodes_per_block: 1}\n",
      "t.yaml");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c.value().total_gpus(), 32);
  EXPECT_EQ(c.value().largest_node_gpus(), 8);
  core::Scheduler s;
  auto id = build_cluster(c.value(), s);
  ASSERT_TRUE(id.ok());
  ASSERT_EQ(s.nodes().size(), 5u);
  EXPECT_EQ(s.nodes()[3].spec.name, "b-0000");
  EXPECT_EQ(s.nodes()[3].spec.block, "b-b0");
  EXPECT_EQ(s.nodes()[4].spec.block, "b-b1");

  auto bad = parse_cluster_config("pools:\n  - {name: a, nodes: 3, gpus_per_node: 8}\n", "x.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("x.yaml:2: pools[0].gpu_model"), std::string::npos)
      << bad.error().message();
}

TEST(SimBudgetConfig, BuildsTheTreeWithShares) {
  auto b = parse_budget_config(
      "budgets:\n  - name: ai\n    share: 3\n    children:\n      - {name: nlp, share: 1}\n"
      "      - {name: cv, share: 1}\n  - {name: infra, share: 1}\n",
      "b.yaml");
  ASSERT_TRUE(b.ok()) << b.error().message();
  core::BudgetTree t;
  ASSERT_TRUE(apply_budgets(b.value(), t).ok());
  ASSERT_TRUE(t.find("/ai/nlp"));
  EXPECT_DOUBLE_EQ(t.allocated_fraction(*t.find("/ai/nlp"), 0), 0.375);
  EXPECT_DOUBLE_EQ(t.allocated_fraction(*t.find("/infra"), 0), 0.25);
  EXPECT_FALSE(parse_budget_config("budgets:\n  - {name: a, share: 0}\n", "b.yaml").ok());
}

// Found by fuzz_budget_config and fuzz_cluster_config: what the core's tree would refuse (or
// silently merge) is refused by the reader, with its line; totals cannot overflow.
TEST(SimConfigs, RefuseWhatTheCoreWouldRefuseWithTheLine) {
  auto budget_error = [](const std::string& yaml) {
    auto b = parse_budget_config(yaml, "b.yaml");
    return b.ok() ? std::string("ok") : b.error().message();
  };
  EXPECT_EQ(budget_error("budgets:\n  - {name: x, share: 1}\n  - {name: x, share: 2}\n"),
            "b.yaml:3: name: a sibling is already called 'x'");
  EXPECT_EQ(budget_error("budgets:\n  - {name: x, share: .inf}\n"),
            "b.yaml:2: share: must be a finite number between 0 and 1e9");
  EXPECT_EQ(budget_error("budgets:\n  - {name: a}\n  - {name: \"a/b\"}\n"),
            "b.yaml:3: name: must be 1-128 characters of letters, digits, '.', '_' or '-'");
  std::string pools =
      "pools:\n  - &p {name: p, nodes: 100000, gpu_model: H100, gpus_per_node: 64}\n";
  for (int i = 0; i < 340; ++i) pools += "  - *p\n";
  auto c = parse_cluster_config(pools, "c.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().reason, "the cluster has more than 10000000 GPUs");
  // Control bytes in a model name broke the name's round trip and would reach the reports.
  auto ctl = parse_cluster_config(
      "pools:\n  - {name: p, nodes: 2, gpu_model: \"\\x7f\\xffV100\", gpus_per_node: 8}\n",
      "c.yaml");
  ASSERT_FALSE(ctl.ok());
  EXPECT_EQ(ctl.error().message(),
            "c.yaml:2: pools[0].gpu_model: must be 1-128 printable ASCII characters");
}

// Found by fuzz_trace_native: numbers out of range were converted anyway (undefined for 1e300,
// 2^32 + 1 read as 1 GPU, an overflowing nodes x gpus_per_node, a negative submit time).
TEST(SimNativeWorkload, NumbersOutOfRangeAreSkippedNotConverted) {
  Diagnostics d;
  auto w = parse_native_workload(
      "{\"submit\": -1, \"budget\": \"/a\", \"duration\": 60}\n"
      "{\"submit\": 0, \"budget\": \"/a\", \"duration\": 1e300}\n"
      "{\"submit\": 0, \"budget\": \"/a\", \"duration\": 60, \"gpus\": 4294967297}\n"
      "{\"submit\": 0, \"budget\": \"/a\", \"duration\": 60, \"nodes\": 65536, "
      "\"gpus_per_node\": 65536}\n"
      "{\"submit\": 0, \"budget\": \"/a\", \"duration\": 60, \"gpu_milli\": 4294967297}\n"
      "{\"submit\": 0, \"budget\": \"/a\", \"duration\": 18446744073709551615}\n"
      "{\"submit\": 0, \"budget\": \"/a\", \"duration\": \"1099511627776w1099511627776w"
      "1099511627776w1099511627776w1099511627776w1099511627776w1099511627776w1099511627776w"
      "1099511627776w1099511627776w1099511627776w1099511627776w1099511627776w1099511627776w\"}\n"
      "{\"submit\": 7, \"budget\": \"/a\", \"duration\": 60}\n"
      "{\"submit\": 0, \"budget\": \"/a\", \"nodes\": 2, \"gpus_per_node\": 0, \"duration\": 60}\n",
      "w.jsonl", d);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w.value().jobs.size(), 1u);
  EXPECT_EQ(w.value().jobs[0].submit, 7);
  ASSERT_EQ(d.skipped().size(), 8u);
  const char* fields[] = {"submit",    "duration", "gpus",     "nodes",
                          "gpu_milli", "duration", "duration", "nodes"};
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(d.skipped()[i].field, fields[i]) << i;
}

// Found by fuzz_trace_native: the root "/" was taken as a job's budget.
TEST(SimNativeWorkload, TheRootIsNoJobsBudget) {
  Diagnostics d;
  auto w = parse_native_workload(
      "{\"submit\": 0, \"budget\": \"/\", \"gpus\": 1, \"duration\": 60}\n"
      "{\"submit\": 0, \"budget\": \"/a\", \"gpus\": 1, \"duration\": 60}\n",
      "w.jsonl", d);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w.value().jobs.size(), 1u);
  EXPECT_EQ(w.value().jobs[0].budget, "/a");
  ASSERT_EQ(d.skipped().size(), 1u);
  EXPECT_EQ(d.skipped()[0].field, "budget");
  EXPECT_EQ(d.skipped()[0].line, 1u);
}

TEST(SimNativeWorkload, ReadsEveryFieldAndSkipsBadLinesWithTheirField) {
  Diagnostics d;
  auto w = parse_native_workload(
      "{\"submit\": 10, \"budget\": \"/a\", \"gpus\": 2, \"duration\": \"1h\", "
      "\"min_runtime\": \"30m\", \"resumable\": true, \"kind\": \"debug\", \"priority\": "
      "\"high\", \"utilization\": 0.5}\n"
      "# a comment\n"
      "{\"submit\": 0, \"budget\": \"/b\", \"nodes\": 2, \"gpus_per_node\": 8, \"duration\": 60}\n"
      "{\"submit\": 5, \"budget\": \"/a\", \"gpus\": -1, \"duration\": 60}\n"
      "not json\n"
      "{\"submit\": 5, \"budget\": \"/a\", \"duration\": 60, \"kind\": \"weird\"}\n",
      "w.jsonl", d);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w.value().jobs.size(), 2u);
  const SimJob& first = w.value().jobs[0];  // sorted by submit
  EXPECT_EQ(first.submit, 0);
  EXPECT_EQ(first.nodes, 2);
  EXPECT_EQ(first.gpus, 16);
  const SimJob& j = w.value().jobs[1];
  EXPECT_EQ(j.duration, 3600);
  EXPECT_EQ(j.min_runtime, 1800);
  EXPECT_EQ(j.kind, core::JobKind::Debug);
  EXPECT_EQ(j.priority, core::Priority::High);
  EXPECT_TRUE(*j.resumable);
  EXPECT_DOUBLE_EQ(j.utilization, 0.5);
  ASSERT_EQ(d.skipped().size(), 3u);
  EXPECT_EQ(d.skipped()[0].message(), "w.jsonl:4: gpus: must be an integer from 1 to 100000");
  EXPECT_EQ(d.skipped()[1].line, 5u);
  EXPECT_EQ(d.skipped()[1].field, "json");
  EXPECT_EQ(d.skipped()[2].field, "kind");
}

TEST(SimPhillyTrace, ParsesLinesAndReportsMalformedOnes) {
  Diagnostics d;
  auto w = parse_philly_trace(
      "timestamp,duration,num_gpus,gpu_time,cluster\n"
      "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
      "2017-10-09 06:13:03,2951.0,8,23608.0,6214e9\n"
      "2017-10-09 06:13:03,oops,1,1,6214e9\n"
      "2017-13-09 06:13:03,5,1,5,6214e9\n"
      "2017-10-09 06:13:03,5,0,0,6214e9\n"
      "\n",
      "philly.csv", d);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w.value().jobs.size(), 2u);
  EXPECT_EQ(w.value().jobs[0].submit, 0);
  EXPECT_EQ(w.value().jobs[0].gpus, 8);
  EXPECT_EQ(w.value().jobs[0].budget, "/philly/6214e9");
  EXPECT_EQ(w.value().jobs[1].submit, 48 * 60 + 52);
  EXPECT_EQ(w.value().jobs[1].duration, 66);
  ASSERT_EQ(d.skipped().size(), 3u);
  EXPECT_EQ(d.skipped()[0].message(),
            "philly.csv:4: duration: expected a number of seconds from 0 to 10^10");
  EXPECT_EQ(d.skipped()[1].field, "timestamp");
  EXPECT_EQ(d.skipped()[2].field, "num_gpus");
  EXPECT_FALSE(parse_philly_trace("a,b\n", "p.csv", d).ok());
  // Found by fuzz_trace_philly: 1e308 was converted to whole seconds (undefined).
  Diagnostics huge;
  auto h = parse_philly_trace(
      "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,1e308,1,1,vc\n"
      "2017-10-09 07:01:55,nan,1,1,vc\n",
      "philly.csv", huge);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h.value().jobs.empty());
  ASSERT_EQ(huge.skipped().size(), 2u);
  EXPECT_EQ(huge.skipped()[1].field, "duration");
}

TEST(SimScenario, ShapesSplitLargeJobsAcrossWholeNodes) {
  SimJob j;
  j.gpus = 4;
  EXPECT_EQ(shape_for(j, 8), (core::Shape{1, 4, 1000}));
  j.gpus = 16;
  EXPECT_EQ(shape_for(j, 8), (core::Shape{2, 8, 1000}));
  j.gpus = 12;
  EXPECT_EQ(shape_for(j, 8), (core::Shape{2, 6, 1000}));
  j.gpus = 1;
  j.gpu_milli = 470;
  EXPECT_EQ(shape_for(j, 8), (core::Shape{1, 1, 470}));
}

TEST(SimScenario, RejectsUnknownBudgetsAndJobsLargerThanTheCluster) {
  ClusterConfig c;
  c.pools.push_back({"h", 2, "H100", 8, 0, 0, {}});
  BudgetConfig b;
  b.budgets = {{"/org", 1}, {"/org/a", 1}};
  Workload w;
  w.source = "w.jsonl";
  auto job = [&](std::string budget, int gpus, std::size_t line) {
    SimJob j;
    j.id = line;
    j.line = line;
    j.budget = std::move(budget);
    j.gpus = gpus;
    j.duration = 10;
    w.jobs.push_back(j);
  };
  job("/org/a", 8, 1);
  job("/nope", 1, 2);
  job("/org", 1, 3);
  job("/org/a", 24, 4);
  Diagnostics d;
  Scenario sc = make_scenario(c, b, w, d);
  ASSERT_EQ(sc.jobs.size(), 1u);
  ASSERT_EQ(d.skipped().size(), 3u);
  EXPECT_EQ(d.skipped()[0].message(), "w.jsonl:2: budget: unknown budget '/nope'");
  EXPECT_EQ(d.skipped()[1].field, "budget");
  EXPECT_EQ(d.skipped()[2].message(),
            "w.jsonl:4: gpus: 24 GPUs (3 x 8) is larger than the cluster (16 GPUs)");
}

TEST(SimTraceAssignment, IsSeededAndFollowsTheDebugRule) {
  Workload w;
  for (int i = 1; i <= 200; ++i) {
    SimJob j;
    j.id = i;
    j.budget = "/x";
    j.gpus = i % 3 == 0 ? 8 : 1;
    j.duration = i % 2 == 0 ? 600 : 7200;
    w.jobs.push_back(j);
  }
  Workload a = w, b = w;
  assign_missing(a, AssignmentModel{});
  assign_missing(b, AssignmentModel{});
  int debug = 0, unallocated = 0;
  for (std::size_t i = 0; i < a.jobs.size(); ++i) {
    const SimJob& j = a.jobs[i];
    EXPECT_EQ(j.min_runtime, b.jobs[i].min_runtime);
    EXPECT_EQ(j.priority, b.jobs[i].priority);
    const bool should_be_debug = j.duration <= 900 && j.gpus <= 2;
    EXPECT_EQ(*j.kind == core::JobKind::Debug, should_be_debug);
    if (should_be_debug) {
      ++debug;
      EXPECT_EQ(j.min_runtime, 600);
      EXPECT_FALSE(*j.resumable);
    } else {
      EXPECT_LE(*j.min_runtime, 8 * 3600);
      unallocated += *j.min_runtime == 0;
    }
  }
  EXPECT_GT(debug, 0);
  EXPECT_GT(unallocated, 0);
  AssignmentModel other;
  other.seed = 2;
  Workload c = w;
  assign_missing(c, other);
  int differ = 0;
  for (std::size_t i = 0; i < c.jobs.size(); ++i)
    differ += c.jobs[i].min_runtime != a.jobs[i].min_runtime;
  EXPECT_GT(differ, 0);
}

TEST(SimTraceAssignment, BudgetsFollowDemand) {
  Workload w;
  SimJob j;
  j.budget = "/p/a";
  j.gpus = 1;
  j.duration = 3600;
  w.jobs.push_back(j);
  j.budget = "/p/b";
  j.gpus = 3;
  w.jobs.push_back(j);
  core::BudgetTree t;
  ASSERT_TRUE(apply_budgets(budgets_by_demand(w), t).ok());
  EXPECT_DOUBLE_EQ(t.allocated_fraction(*t.find("/p/a"), 0), 0.25);
  EXPECT_DOUBLE_EQ(t.allocated_fraction(*t.find("/p/b"), 0), 0.75);
}

TEST(SimLoadScaling, CompressesArrivalsToTheTargetRatio) {
  Workload w;
  for (int i = 0; i < 11; ++i) {
    SimJob j;
    j.id = i + 1;
    j.submit = i * 1000;
    j.gpus = 2;
    j.duration = 1000;
    w.jobs.push_back(j);
  }
  // 22,000 GPU-s over 10,000 s on 4 GPUs: 0.55.
  EXPECT_DOUBLE_EQ(measure_load(w, 4).ratio, 0.55);
  EXPECT_DOUBLE_EQ(scale_arrivals(w, 4, 2.2), 0.25);
  EXPECT_EQ(w.jobs[4].submit, 1000);
  EXPECT_DOUBLE_EQ(measure_load(w, 4).ratio, 2.2);
}

// Found by fuzz_trace_openb: a pod's num_gpu of 13587329457020469 was narrowed into an int (a job
// of 0 or fewer GPUs). It is refused, naming the field, and the pod next to it still loads.
TEST(SimOpenbTrace, AHugeGpuCountIsRefusedNotNarrowed) {
  Diagnostics d;
  auto w = parse_openb_pods(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n"
      "p1,1,1,13587329457020469,1000,T4,BE,Running,0,5,\n"
      "p2,1,1,4097,1000,T4,BE,Running,0,5,\n"
      "p3,1,1,2,1000,T4,BE,Running,0,5,\n",
      "pods.csv", d);
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w.value().jobs.size(), 1u);
  EXPECT_EQ(w.value().jobs[0].gpus, 2);
  ASSERT_EQ(d.skipped().size(), 2u);
  EXPECT_EQ(d.skipped()[0].message(),
            "pods.csv:2: num_gpu: expected an integer between 0 and 4096");
  EXPECT_EQ(d.skipped()[1].field, "num_gpu");
}

// The openb trace has a few pods months before the others: they must not stretch the window.
TEST(SimLoadScaling, StragglersFarFromTheRestDoNotStretchTheWindow) {
  Workload w;
  auto add = [&](core::Time submit) {
    SimJob j;
    j.id = w.jobs.size() + 1;
    j.submit = submit;
    j.gpus = 1;
    j.duration = 100;
    w.jobs.push_back(j);
  };
  add(0);  // a straggler 100 days early
  for (int i = 0; i < 199; ++i) add(100 * core::kDay + i * 10);
  const LoadInfo l = measure_load(w, 2);
  // Window: 1st to 99th percentile of 200 submits = jobs 2..198 (indices 1 and 198).
  EXPECT_EQ(l.window_from, 100 * core::kDay);
  EXPECT_EQ(l.window_to, 100 * core::kDay + 197 * 10);
  EXPECT_DOUBLE_EQ(l.window_demand_gpu_seconds, 198 * 100.0);
  EXPECT_DOUBLE_EQ(l.demand_gpu_seconds, 200 * 100.0);
  EXPECT_DOUBLE_EQ(l.ratio, 198 * 100.0 / (2 * 1970.0));
  // Scaling to 2.5 makes it 2.5 where the jobs are.
  scale_arrivals(w, 2, 2.5);
  EXPECT_NEAR(measure_load(w, 2).ratio, 2.5, 0.01);
  EXPECT_EQ(load_text(2.5), "2.50");
  EXPECT_EQ(load_text(0.0036), "0.0036");
  EXPECT_EQ(load_text(0), "0.00");
}

}  // namespace
}  // namespace allot::sim
