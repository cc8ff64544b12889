#include <cmath>
#include <nlohmann/json.hpp>

#include "sim/duration_text.h"
#include "sim/reports.h"

namespace allot::sim {
namespace {

using Json = nlohmann::ordered_json;

// Fixed precision, so that the text does not depend on the last bits of a sum.
double fixed(double x, int decimals = 6) {
  if (!std::isfinite(x)) return 0;
  const double scale = std::pow(10.0, decimals);
  const double v = std::round(x * scale) / scale;
  return v == 0 ? 0 : v;  // no "-0"
}

Json summary(const Summary& s) {
  Json j;
  j["count"] = s.count;
  j["censored"] = s.censored;
  j["mean_s"] = fixed(s.mean, 1);
  j["p50_s"] = fixed(s.p50, 1);
  j["p90_s"] = fixed(s.p90, 1);
  j["p99_s"] = fixed(s.p99, 1);
  j["max_s"] = fixed(s.max, 1);
  return j;
}

Json policy_config(const core::PolicyConfig& c) {
  Json j;
  j["order"] = c.order == core::QueueOrder::FairShare       ? "fairshare"
               : c.order == core::QueueOrder::Fifo          ? "fifo"
               : c.order == core::QueueOrder::ShortestFirst ? "shortest_first"
                                                            : "priority";
  j["funding"] = c.funding == core::Funding::Lookback ? "lookback"
                 : c.funding == core::Funding::Always ? "always"
                                                      : "concurrent_cap";
  j["minimum_runtime_contract"] = c.minimum_runtime_contract;
  j["max_min_runtime_s"] = c.max_min_runtime;
  j["lookback_s"] = c.lookback;
  j["usage_half_life_s"] = c.usage_half_life;
  j["preemption"] = c.preemption;
  j["preemption_margin"] = fixed(c.preemption_margin);
  j["burst_limit"] = fixed(c.burst_limit);
  // Rules of the lookback funding, written only where they act (the baselines' reports stay).
  if (c.burst_exempt_below > 0) j["burst_exempt_below"] = fixed(c.burst_exempt_below);
  if (c.burst_exempt_max_size > 0) j["burst_exempt_max_size"] = fixed(c.burst_exempt_max_size);
  if (c.keep_non_resumable_allocated) j["keep_non_resumable_allocated"] = true;
  if (c.mig_dynamic) {  // docs/policy.md §7.5
    j["mig_dynamic"] = true;
    j["mig_hold_s"] = c.mig_hold;
    if (c.mig_yield) j["mig_yield"] = true;
    if (c.mig_split_unallocated) j["mig_split_unallocated"] = true;
  }
  if (c.funding == core::Funding::Lookback && c.preemption) j["share_claims"] = c.share_claims;
  if (c.funding == core::Funding::Lookback) {  // docs/policy.md §6, §9
    j["interactive_gpus_per_user"] = c.interactive_gpus_per_user;
    j["interactive_gpus_per_budget"] = c.interactive_gpus_per_budget;
    j["interactive_protection_s"] = c.interactive_protection;
    j["interactive_stop_grace_s"] = c.interactive_stop_grace;
  }
  j["max_unallocated_loss_ratio"] = fixed(c.max_unallocated_loss_ratio);
  j["unallocated_loss_patience_s"] = c.unallocated_loss_patience;
  j["backfill"] = c.backfill;
  j["reserve_for_blocked"] = c.reserve_for_blocked;
  // Rules added with the strict baselines, written only when set, so that the reports of the
  // presets that do not use them stay as they were.
  if (c.head_of_line_blocking) j["head_of_line_blocking"] = true;
  if (!c.debug_jobs_first) j["debug_jobs_first"] = false;
  if (c.placement == core::PlacementRule::Consolidate) j["placement"] = "consolidate";
  if (c.placement == core::PlacementRule::LeastFragmenting) j["placement"] = "fgd";
  return j;
}

Json series(const std::vector<core::MilliGpuSeconds>& part,
            const std::vector<core::MilliGpuSeconds>& whole) {
  Json a = Json::array();
  for (std::size_t i = 0; i < whole.size(); ++i) {
    const double w = static_cast<double>(whole[i]);
    a.push_back(fixed(w > 0 ? static_cast<double>(i < part.size() ? part[i] : 0) / w : 0, 4));
  }
  return a;
}

Json run_json(const RunResult& r) {
  Json j;
  j["policy"] = r.policy;
  j["description"] = r.description;
  if (!r.label.empty()) j["label"] = r.label;
  j["config"] = policy_config(r.config);
  // Only when set, as the strict rules in policy_config().
  if (r.uneven_gangs) j["config"]["gang_shape"] = "uneven";
  j["period"] = {
      {"start_s", r.start}, {"end_s", r.end}, {"length", duration_text(r.end - r.start)}};
  Json m;
  m["availability"] = fixed(r.availability);
  m["occupancy"] = {{"total", fixed(r.occupancy)},
                    {"allocated", fixed(r.occupancy_allocated)},
                    {"unallocated", fixed(r.occupancy_unallocated)}};
  m["impact"] = {{"mean", fixed(r.impact_mean)},
                 {"min", fixed(r.impact_min)},
                 {"budgets_owed", r.budgets_owed},
                 {"budgets_at_95_percent", r.budgets_at_95},
                 {"budgets_owed_little", r.budgets_owed_little},
                 {"owed_little_gpu_hours", fixed(r.owed_little_gpu_hours, 3)}};
  // null when no job carries utilisation data (it would read 100%).
  m["utilization"] = r.utilization_known ? Json(fixed(r.utilization)) : Json();
  j["metrics"] = m;
  Json w;
  for (const auto& [kind, s] : r.waits) w[kind] = summary(s);
  j["waits"] = w;
  j["completion_time"] = summary(r.completion);
  j["makespan_s"] = fixed(r.makespan, 0);
  j["jobs"] = {{"admitted", r.jobs},
               {"completed", r.completed},
               {"pending_at_end", r.pending_at_end},
               {"running_at_end", r.running_at_end},
               {"rejected_by_core", r.submit_errors},
               {"runs", r.runs},
               {"resubmissions", r.resubmissions}};
  j["stops"] = {{"preempted", r.preemptions},
                {"drained", r.drain_stops},
                {"node_down", r.node_down_stops},
                {"class_changes", r.class_changes},
                {"lost_gpu_hours", fixed(r.lost_gpu_hours, 3)}};
  // What interactive work got (allot's rules for it act under lookback funding only; the
  // baselines' reports stay as they were).
  if (r.config.funding == core::Funding::Lookback)
    j["interactive"] = {{"stops", r.interactive_stops},
                        {"preempted", r.interactive_preemptions},
                        {"lost_gpu_hours", fixed(r.interactive_lost_gpu_hours, 3)},
                        {"wait", summary(r.interactive_wait)}};
  if (r.mig_splits + r.mig_merges > 0) {
    j["mig"] = {{"splits", r.mig_splits},
                {"merges", r.mig_merges},
                {"reconfigure_gpu_hours", fixed(r.mig_reconfigure_gpu_hours, 3)}};
  }
  if (!r.services.empty()) {  // docs/simulator.md, "Inference services"
    Json sv = Json::array();
    for (const ServiceResult& x : r.services) {
      sv.push_back({{"name", x.name},
                    {"budget", x.budget},
                    {"min_replicas", x.min_replicas},
                    {"max_replicas", x.max_replicas},
                    {"mean_replicas_wanted", fixed(x.mean_desired, 3)},
                    {"mean_replicas_serving", fixed(x.mean_serving, 3)},
                    {"mean_load", fixed(x.mean_load, 3)},
                    {"replica_availability", fixed(x.availability)},
                    {"min_replicas_held", fixed(x.floor_held)},
                    {"load_served", x.served < 0 ? Json() : Json(fixed(x.served))},
                    {"scale_up_delay", summary(x.scale_up_delay)},
                    {"scale_outs", x.scale_outs},
                    {"scale_ins", x.scale_ins},
                    {"replica_preemptions", x.preemptions},
                    {"replica_stops", x.stops}});
    }
    j["inference"] = {{"services", sv}};
    j["training"] = {{"impact_mean", fixed(r.training_impact_mean)},
                     {"impact_min", fixed(r.training_impact_min)}};
  }
  if (r.config.inference_share > 0)
    j["config"]["inference_share"] = fixed(r.config.inference_share);
  j["fragmentation"] = {{"idle_gpu_hours", fixed(r.fragmented_gpu_hours, 3)},
                        {"of_available", fixed(r.fragmentation)}};
  j["jain_fairness"] = fixed(r.jain_fairness);
  j["gpu_hours"] = {{"total", fixed(r.total_gpu_hours, 3)},
                    {"available", fixed(r.available_gpu_hours, 3)},
                    {"occupied", fixed(r.occupied_gpu_hours, 3)},
                    {"allocated", fixed(r.allocated_gpu_hours, 3)},
                    {"unallocated", fixed(r.unallocated_gpu_hours, 3)},
                    {"on_draining_nodes", fixed(r.draining_gpu_hours, 3)}};
  Json b = Json::array();
  for (const BudgetResult& x : r.budgets) {
    b.push_back({{"path", x.path},
                 {"fraction", fixed(x.fraction)},
                 {"jobs", x.jobs},
                 {"demand_gpu_hours", fixed(x.demand_gpu_hours, 3)},
                 {"owed_gpu_hours", fixed(x.owed_gpu_hours, 3)},
                 {"delivered_gpu_hours", fixed(x.delivered_gpu_hours, 3)},
                 {"allocated_gpu_hours", fixed(x.allocated_gpu_hours, 3)},
                 {"delivered_toward_owed_gpu_hours", fixed(x.delivered_toward_owed_gpu_hours, 3)},
                 {"impact", fixed(x.impact)},
                 {"owed_little", x.owed_little},
                 {"waits", summary(x.waits)},
                 {"preempted", x.preemptions},
                 {"lost_gpu_hours", fixed(x.lost_gpu_hours, 3)}});
  }
  j["budgets"] = b;
  Json c = Json::array();
  bool all = true;
  for (const Check& x : r.checks) {
    c.push_back({{"check", x.name}, {"passed", x.passed}, {"detail", x.detail}});
    all &= x.passed;
  }
  j["checks_passed"] = all;
  j["checks"] = c;
  j["counters"] = {{"cycles", r.cycles}, {"events", r.events_processed}};
  j["series"] = {{"bucket_s", r.bucket},
                 {"availability", series(r.series_available, r.series_total)},
                 {"occupancy_allocated", series(r.series_allocated, r.series_available)},
                 {"occupancy_unallocated", series(r.series_unallocated, r.series_available)}};
  return j;
}

}  // namespace

std::string report_json(const Report& rep) {
  Json j;
  j["format"] = "allot-sim-report/1";
  const Inputs& in = *rep.inputs;
  const ExperimentSpec& spec = *rep.spec;
  const Scenario& sc = in.scenario;
  Json inputs;
  int nodes = 0;
  for (const NodePool& p : sc.cluster.pools) nodes += p.nodes;
  inputs["cluster"] = {
      {"name", sc.cluster.name}, {"nodes", nodes}, {"gpus", sc.cluster.total_gpus()}};
  inputs["workload"] = {{"source", sc.workload_source},        {"format", in.workload_format},
                        {"jobs_read", in.jobs_read},           {"jobs_admitted", sc.jobs.size()},
                        {"skipped", in.diag.skipped().size()}, {"ignored", in.diag.ignored()}};
  Json examples = Json::array();
  for (std::size_t i = 0; i < in.diag.skipped().size() && i < 20; ++i) {
    examples.push_back(in.diag.skipped()[i].message());
  }
  inputs["skipped_examples"] = examples;
  if (spec.budget_variants.empty()) {
    inputs["budgets"] = spec.budgets_path.empty() ? "proportional to demand" : spec.budgets_path;
  } else {
    Json files = Json::array();
    for (const BudgetVariant& v : in.budget_variants) {
      files.push_back({{"file", v.path},
                       {"jobs_admitted", v.scenario.jobs.size()},
                       {"jobs_left_out", v.skipped}});
    }
    inputs["budgets"] = files;
  }
  if (!spec.services_path.empty()) {
    Json names = Json::array();
    for (const ScenarioService& s : in.scenario.services) names.push_back(s.spec.name);
    inputs["services"] = {{"file", spec.services_path}, {"names", names}};
  }
  inputs["seed"] = spec.seed;
  if (spec.lab) {
    // Which regime every figure below comes from, and the model's main parameters.
    const LabWorkloadModel& m = *spec.lab;
    inputs["regime"] = in.regime;
    inputs["lab_model"] = {{"regime", m.closed_loop ? "closed" : "open"},
                           {"load", fixed(m.load)},
                           {"days", m.days},
                           {"seed", m.seed},
                           {"teams", m.teams.size()},
                           {"outstanding_per_user", m.outstanding_per_user},
                           {"think_time_s", m.think_time}};
  }
  inputs["load"] = {
      {"ratio_before", fixed(in.load_before.ratio)},
      {"target", fixed(spec.load)},
      {"ratio", fixed(in.load_after.ratio)},
      {"arrival_factor", fixed(in.arrival_factor)},
      {"demand_gpu_hours", fixed(in.load_after.demand_gpu_seconds / 3600.0, 3)},
      {"window_from_s", in.load_after.window_from},
      {"window_to_s", in.load_after.window_to},
      {"window_demand_gpu_hours", fixed(in.load_after.window_demand_gpu_seconds / 3600.0, 3)}};
  const FaultModel& f = spec.sim.faults;
  inputs["faults"] = {{"enabled", f.enabled},
                      {"mtbf_s", f.mtbf},
                      {"repair_s", f.repair},
                      {"unhealthy_fraction", fixed(f.unhealthy_fraction)}};
  inputs["preemption_cost"] = {{"checkpoint_interval_s", spec.sim.cost.checkpoint_interval},
                               {"restart_delay_s", spec.sim.cost.restart_delay}};
  j["inputs"] = inputs;
  Json runs = Json::array();
  for (const RunResult& r : rep.runs) runs.push_back(run_json(r));
  j["policies"] = runs;
  return j.dump(1) + "\n";
}

std::string timings_json(const Report& rep) {
  Json runs = Json::array();
  for (const RunResult& r : rep.runs) {
    Json by_backlog = Json::array();
    for (const RunResult::BacklogCost& b : r.core_by_backlog) {
      if (b.cycles == 0) continue;
      by_backlog.push_back(
          {{"pending_from", b.pending_from},
           {"cycles", b.cycles},
           {"core_s", fixed(b.core_seconds, 3)},
           {"us_per_cycle", fixed(1e6 * b.core_seconds / static_cast<double>(b.cycles), 1)}});
    }
    runs.push_back({{"policy", run_name(r)},
                    {"wall_s", fixed(r.wall_seconds, 3)},
                    {"cpu_s", fixed(r.cpu_seconds, 3)},
                    {"core_s", fixed(r.core_seconds, 3)},
                    {"events", r.events_processed},
                    {"cycles", r.cycles},
                    {"core_by_backlog", by_backlog}});
  }
  Json j;
  j["format"] = "allot-sim-timings/1";
  j["runs"] = runs;
  return j.dump(1) + "\n";
}

std::string events_csv(const Report& rep) {
  std::string out = "policy,time_s,event,job,run_id,gpus,reason\n";
  char buf[96];
  for (const RunResult& r : rep.runs) {
    for (const EventRecord& e : r.events) {
      std::snprintf(buf, sizeof buf, ",%lld,%s,%llu,%llu,%.3f,", static_cast<long long>(e.time),
                    e.event.c_str(), static_cast<unsigned long long>(e.job),
                    static_cast<unsigned long long>(e.run_id), e.gpus);
      out += r.policy;
      out += buf;
      // Reasons may hold commas: quote them.
      out += '"';
      for (char c : e.reason) {
        if (c == '"') out += '"';
        out += c;
      }
      out += "\"\n";
    }
  }
  return out;
}

}  // namespace allot::sim
