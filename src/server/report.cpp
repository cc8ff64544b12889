#include "server/report.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "server/auth.h"
#include "server/lifecycle.h"
#include "server/metrics.h"

namespace allot::server {

using json = nlohmann::json;

std::vector<store::LedgerEntry> usage_entries(const store::Store& store, core::Time now,
                                              core::Time from, core::Time to) {
  auto entries = store.ledger(from, to);
  store::JobQuery q;
  q.states = {"starting", "running", "preempting"};
  q.limit = 100000;
  for (const auto& j : store.jobs(q)) {
    if (j.seg_start > 0 && now > j.seg_start) {
      entries.push_back(
          {0, j.id, j.owner, j.budget, j.cluster, j.seg_start, now, j.milli, j.allocated});
    }
  }
  for (auto& e : entries) {
    e.start = std::max(e.start, from);
    e.end = std::min(e.end, to);
  }
  return entries;
}

namespace {

// What a report reads from the store for its whole period, read once: a report with steps
// computes each step from it instead of reading the store again (the jobs' specs are what cost:
// seconds over 100,000 jobs).
struct ReportData {
  std::vector<store::NodeRecord> nodes;
  std::vector<store::NodeHealthEvent> health;  // before the period's end
  std::vector<store::LedgerEntry> entries;     // clipped to the period
  struct Job {
    DemandJob demand;  // end: its updated_at (when it ended, if it has)
    bool ended = false;
    bool open = false;  // in a state jobs_overlapping() counts whatever its updated_at
  };
  std::vector<Job> jobs;  // overlapping the period, within the scope
};

ReportData load(const store::Store& store, core::Time from, core::Time to, const std::string& scope,
                std::vector<store::LedgerEntry> entries) {
  ReportData d;
  d.nodes = store.nodes();
  d.health = store.node_health(to);
  d.entries = std::move(entries);
  static const std::set<std::string> open = {"pending", "starting", "running", "preempting",
                                             "requeued"};
  for (const auto& j : store.jobs_overlapping(from, to)) {
    if (!path_within(j.budget, scope)) continue;
    auto spec = json::parse(j.spec_json, nullptr, false);
    if (!spec.is_object()) continue;
    const auto st = parse_job_status(j.state).value_or(JobStatus::Pending);
    d.jobs.push_back({{j.budget, j.submit_time, j.updated_at,
                       static_cast<double>(spec.value("nodes", 1)) *
                           spec.value("gpus_per_node", 1) * spec.value("gpu_milli", 1000) / 1000.0},
                      is_terminal(st),
                      open.count(j.state) > 0});
  }
  return d;
}

// The report over [from, to) (within the period `d` was loaded for) without `steps`.
json report_of(const store::Store& store, const Snapshot& snap, const ReportData& d,
               core::Time from, core::Time to, const std::string& scope) {
  const auto& tree = *snap.budgets;
  auto ancestors = [](std::string path, auto fn) {
    for (;;) {
      fn(path);
      if (path == "/") break;
      auto slash = path.rfind('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  };
  std::vector<store::LedgerEntry> entries;
  for (auto e : d.entries) {
    e.start = std::max(e.start, from);
    e.end = std::min(e.end, to);
    if (e.end > e.start) entries.push_back(std::move(e));
  }
  // Delivered: allocated and unallocated GPU-seconds per budget and its ancestors.
  std::map<std::string, std::pair<double, double>> used;
  // Utilization: measured GPU use over the GPU-time measured, from telemetry, for the jobs
  // measured in the period; jobs that ran without telemetry are left out and counted.
  struct Util {
    double used = 0, measured = 0;
    std::set<JobId> with, without;
  };
  std::map<std::string, Util> util;
  std::set<JobId> measured;
  for (const auto& t : store.telemetry_between(from, to)) {
    measured.insert(t.job);
    ancestors(t.budget, [&](const std::string& b) {
      auto& u = util[b];
      u.used += t.used_gpu_seconds;
      u.measured += t.gpu_seconds;
      u.with.insert(t.job);
    });
  }
  for (const auto& e : entries) {
    const bool unmeasured = !measured.count(e.job);
    const double gs = static_cast<double>(e.milli) * static_cast<double>(e.end - e.start) / 1000.0;
    ancestors(e.budget, [&](const std::string& b) {
      (e.allocated ? used[b].first : used[b].second) += gs;
      if (unmeasured) util[b].without.insert(e.job);
    });
  }
  // Availability, occupancy and impact.
  MetricsInput mi;
  mi.from = from;
  mi.to = to;
  mi.nodes = d.nodes;
  for (const auto& h : d.health) {
    if (h.time < to) mi.health.push_back(h);
  }
  mi.ledger = std::move(entries);
  for (const auto& j : d.jobs) {
    // jobs_overlapping(from, to)'s rule, for this step.
    if (j.demand.start >= to || (!j.open && j.demand.end <= from)) continue;
    mi.jobs.push_back(j.demand);
    if (!j.ended) mi.jobs.back().end = to;
  }
  for (core::BudgetId id = 0; id < tree.size(); ++id) {
    const auto& n = tree.node(id);
    if (!tree.valid(id) || !tree.is_leaf(id) || id == tree.root() || !path_within(n.path, scope)) {
      continue;
    }
    auto& f = mi.fractions[n.path];
    for (const auto& [name, cid] : snap.cluster_ids) f[name] = tree.allocated_fraction(id, cid);
  }
  const auto m = compute_metrics(mi);

  auto ratio = [](double a, double b) { return b > 0 ? json(a / b) : json(); };
  auto cluster_json = [&](const ClusterMetrics& c) {
    return json{{"availability", ratio(c.available, c.total)},
                {"occupancy", ratio(c.allocated + c.unallocated, c.available)},
                {"occupancy_allocated", ratio(c.allocated, c.available)},
                {"occupancy_unallocated", ratio(c.unallocated, c.available)},
                {"total_gpu_seconds", c.total},
                {"available_gpu_seconds", c.available},
                {"allocated_gpu_seconds", c.allocated},
                {"unallocated_gpu_seconds", c.unallocated}};
  };
  json out = {{"from", from}, {"to", to}, {"scope", scope}, {"clusters", json::object()}};
  for (const auto& [name, c] : m.clusters) out["clusters"][name] = cluster_json(c);
  out["availability"] = {{"value", ratio(m.all.available, m.all.total)},
                         {"available_gpu_seconds", m.all.available},
                         {"total_gpu_seconds", m.all.total}};
  out["occupancy"] = {{"value", ratio(m.all.allocated + m.all.unallocated, m.all.available)},
                      {"allocated", ratio(m.all.allocated, m.all.available)},
                      {"unallocated", ratio(m.all.unallocated, m.all.available)},
                      {"assigned_gpu_seconds", m.all.allocated + m.all.unallocated}};
  const bool owed_any = m.budgets_owed > 0;
  out["impact"] = {{"mean", owed_any ? json(m.impact_mean) : json()},
                   {"min", owed_any ? json(m.impact_min) : json()},
                   {"min_budget", m.impact_min_budget},
                   {"budgets_owed", m.budgets_owed},
                   {"budgets_at_least_95", m.budgets_at_95}};
  const auto& all = util[scope];
  out["utilization"] = {{"value", ratio(all.used, all.measured)},
                        {"measured_gpu_seconds", all.measured},
                        {"used_gpu_seconds", all.used},
                        {"jobs_measured", all.with.size()},
                        {"jobs_without_telemetry", all.without.size()}};
  out["budgets"] = json::array();
  const double secs = static_cast<double>(to - from);
  for (core::BudgetId id = 0; id < tree.size(); ++id) {
    const auto& n = tree.node(id);
    if (n.removed || !path_within(n.path, scope)) continue;
    // Its share of the whole capacity over the period, uncapped: not what it is owed.
    double share = 0;
    for (const auto& c : snap.clusters) {
      auto cid = snap.cluster_ids.at(c.name);
      share += tree.allocated_fraction(id, cid) * static_cast<double>(c.capacity) / 1000.0 * secs;
    }
    const auto u = used[n.path];
    const auto& ut = util[n.path];
    const auto bm = m.budgets.find(n.path);
    const bool has = bm != m.budgets.end();
    out["budgets"].push_back(
        {{"budget", n.path},
         // Owed: the one definition (core/owed.h), as impact counts it. owed_capped_gpu_seconds
         // is the same figure under its older name.
         {"owed_gpu_seconds", has ? bm->second.owed : 0.0},
         {"share_gpu_seconds", share},
         {"allocated_gpu_seconds", u.first},
         {"unallocated_gpu_seconds", u.second},
         {"delivered_fraction", share > 0 ? u.first / share : 0.0},
         {"demand_gpu_seconds", has ? bm->second.demand : 0.0},
         {"owed_capped_gpu_seconds", has ? bm->second.owed : 0.0},
         {"impact", has && bm->second.owed > 0 ? json(bm->second.impact()) : json()},
         {"utilization", ratio(ut.used, ut.measured)},
         {"jobs_measured", ut.with.size()},
         {"jobs_without_telemetry", ut.without.size()}});
  }
  return out;
}

}  // namespace

core::Result<json> budget_report(const store::Store& store, const Snapshot& snap, core::Time from,
                                 core::Time to, const std::string& scope,
                                 const std::vector<store::LedgerEntry>& entries,
                                 core::Duration step) {
  const auto& tree = *snap.budgets;
  std::size_t leaves = 0, in_scope = 0;
  for (core::BudgetId id = 0; id < tree.size(); ++id) {
    if (!tree.valid(id) || !path_within(tree.node(id).path, scope)) continue;
    ++in_scope;
    if (tree.is_leaf(id) && id != tree.root()) ++leaves;
  }
  {
    std::set<std::string> clusters;
    for (const auto& n : store.nodes()) clusters.insert(n.cluster);
    const auto hours = static_cast<std::size_t>((to - from + core::kHour - 1) / core::kHour);
    const std::size_t series = 2 * clusters.size() + 2 * leaves;
    if (series > 0 && hours > kMaxReportValues / series) {
      const auto days = kMaxReportValues / series / 24;
      return core::Error{"from", "a report over " + std::to_string(leaves) + " budgets and " +
                                     std::to_string(clusters.size()) + " clusters covers at most " +
                                     std::to_string(days) +
                                     " days: ask for a shorter period or a narrower budget"};
    }
  }
  if (step != 0 && step < kMinReportStep) {
    return core::Error{"step", "must be at least " + std::to_string(kMinReportStep) + " seconds"};
  }
  if (step != 0 && (to - from + step - 1) / step > kMaxReportSteps) {
    return core::Error{"step", "a report has at most " + std::to_string(kMaxReportSteps) +
                                   " steps: ask for a longer step or a shorter period"};
  }
  // Each step repeats every budget in scope: bounded like the hourly values above.
  if (step != 0 &&
      static_cast<std::size_t>((to - from + step - 1) / step) * std::max<std::size_t>(1, in_scope) >
          kMaxReportStepBudgets) {
    return core::Error{"step", "a report's steps hold at most " +
                                   std::to_string(kMaxReportStepBudgets) + " budget entries (" +
                                   std::to_string(in_scope) +
                                   " budgets in scope): ask for a longer step, a shorter period "
                                   "or a narrower budget"};
  }
  const auto d = load(store, from, to, scope, entries);
  auto out = report_of(store, snap, d, from, to, scope);
  if (step != 0) {
    out["step"] = step;
    out["steps"] = json::array();
    for (core::Time a = from; a < to; a += step) {
      out["steps"].push_back(report_of(store, snap, d, a, std::min(to, a + step), scope));
    }
  }
  return out;
}

}  // namespace allot::server
