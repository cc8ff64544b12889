#include "sim/experiment.h"

#include <algorithm>
#include <atomic>
#include <thread>

#include "sim/policies.h"
#include "sim/trace_loaders.h"

namespace allot::sim {

namespace {

// Adds the services file's services (and budgets) to the scenario and to each budget variant.
core::Status attach_services(const ExperimentSpec& spec, Inputs& in) {
  if (spec.services_path.empty()) return core::ok_status();
  auto f = load_services(spec.services_path);
  if (!f.ok()) return f.error();
  if (auto st = add_services(in.scenario, f.value(), spec.seed); !st.ok()) return st;
  for (BudgetVariant& v : in.budget_variants) {
    if (auto st = add_services(v.scenario, f.value(), spec.seed); !st.ok()) {
      return core::Error{st.error().field + " (with budgets " + v.path + ")", st.error().reason};
    }
  }
  return core::ok_status();
}

// The lab model's inputs: generated jobs, its own cluster (or the given one) and budget tree.
core::Result<Inputs> prepare_lab_inputs(const ExperimentSpec& spec) {
  const LabWorkloadModel& m = *spec.lab;
  if (auto st = validate(m); !st.ok()) return st.error();
  if (!spec.budgets_path.empty() || !spec.budget_variants.empty()) {
    return core::Error{"--budgets",
                       "the lab workload brings its own budget tree (the same as "
                       "examples/lab-budgets.yaml); leave --budgets out"};
  }
  Inputs in;
  Workload w = generate_lab_workload(m);
  in.workload_format = w.format;
  in.regime = lab_regime(m);
  if (spec.limit > 0 && w.jobs.size() > spec.limit) w.jobs.resize(spec.limit);
  in.jobs_read = w.jobs.size();
  ClusterConfig cluster = lab_cluster(m);
  if (!spec.cluster_path.empty()) {
    auto c = load_cluster_config(spec.cluster_path);
    if (!c.ok()) return c.error();
    cluster = c.value();
  }
  in.load_before = measure_load(w, cluster.total_gpus());
  in.load_after = in.load_before;
  in.scenario = make_scenario(std::move(cluster), lab_budgets(m), w, in.diag);
  if (m.closed_loop) in.scenario.job_source = [m] { return lab_closed_loop(m); };
  if (spec.strict && !in.diag.empty()) {
    return core::Error{"", in.diag.skipped().front().message() + " (--strict)"};
  }
  if (auto st = attach_services(spec, in); !st.ok()) return st.error();
  return in;
}

}  // namespace

core::Result<Inputs> prepare_inputs(const ExperimentSpec& spec) {
  if (spec.lab) return prepare_lab_inputs(spec);
  Inputs in;
  auto fail_strict = [&]() -> std::optional<core::Error> {
    if (spec.strict && !in.diag.empty()) {
      const InputIssue& i = in.diag.skipped().front();
      return core::Error{"", i.message() + " (--strict; " +
                                 std::to_string(in.diag.skipped().size()) + " problems in all)"};
    }
    return std::nullopt;
  };
  auto workload = load_workload(spec.workload_path, spec.workload_format, in.diag);
  if (!workload.ok()) return workload.error();
  if (auto e = fail_strict()) return *e;
  Workload& w = workload.value();
  in.workload_format = w.format;
  if (spec.limit > 0 && w.jobs.size() > spec.limit) w.jobs.resize(spec.limit);
  in.jobs_read = w.jobs.size();

  ClusterConfig cluster;
  if (!spec.cluster_path.empty()) {
    auto c = load_cluster_config(spec.cluster_path);
    if (!c.ok()) return c.error();
    cluster = c.value();
  } else if (w.format == "openb") {
    std::string nodes = spec.openb_nodes_path;
    if (nodes.empty()) {
      const auto slash = spec.workload_path.rfind('/');
      nodes =
          (slash == std::string::npos ? std::string() : spec.workload_path.substr(0, slash + 1)) +
          "openb_node_list_gpu_node.csv";
    }
    auto c = load_openb_nodes(nodes, in.diag);
    if (!c.ok()) return c.error();
    cluster = c.value();
  } else {
    return core::Error{"--cluster", "a cluster file is required for this workload"};
  }

  BudgetConfig budgets;
  if (!spec.budgets_path.empty()) {
    auto b = load_budget_config(spec.budgets_path);
    if (!b.ok()) return b.error();
    budgets = b.value();
  } else {
    budgets = budgets_by_demand(w);
  }

  AssignmentModel model = spec.assignment;
  model.seed = spec.seed;
  assign_missing(w, model);
  in.load_before = measure_load(w, cluster.total_gpus());
  if (spec.load > 0) in.arrival_factor = scale_arrivals(w, cluster.total_gpus(), spec.load);
  in.load_after = measure_load(w, cluster.total_gpus());
  for (const std::string& path : spec.budget_variants) {
    auto b = load_budget_config(path);
    if (!b.ok()) return b.error();
    BudgetVariant v;
    v.path = path;
    Diagnostics diag;
    v.scenario = make_scenario(cluster, b.value(), w, diag);
    v.skipped = diag.skipped().size();
    if (spec.strict && v.skipped > 0) {
      return core::Error{
          "", diag.skipped().front().message() + " (with budgets " + path + "; --strict)"};
    }
    in.budget_variants.push_back(std::move(v));
  }
  in.scenario = make_scenario(std::move(cluster), std::move(budgets), w, in.diag);
  if (auto e = fail_strict()) return *e;
  if (auto st = attach_services(spec, in); !st.ok()) return st.error();
  return in;
}

core::Result<std::vector<SimOptions>> policy_runs(const ExperimentSpec& spec) {
  std::vector<SimOptions> out;
  for (const std::string& name : spec.policies) {
    auto p = find_policy(name);
    if (!p) {
      return core::Error{"--policies",
                         "unknown policy '" + name + "' (expected " + policy_names() + ")"};
    }
    SimOptions o = spec.sim;
    o.policy_name = p->name;
    o.policy_description = p->description;
    o.policy = p->config;
    o.gang_shape = p->gang_shape;
    o.oracle_durations = p->oracle_durations;
    o.faults.seed = spec.seed;
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<RunResult> run_all(const Scenario& scenario, const std::vector<SimOptions>& configs,
                               unsigned threads) {
  std::vector<RunResult> results(configs.size());
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(configs.size()));
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < configs.size(); i = next++) {
      results[i] = simulate(configs[i].scenario ? *configs[i].scenario : scenario, configs[i]);
    }
  };
  if (threads <= 1) {
    worker();
    return results;
  }
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  return results;
}

}  // namespace allot::sim
