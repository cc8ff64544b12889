// GET /standing: each budget the caller belongs to or manages, with its share, allocation,
// usage over the lookback window, rank among its siblings, the jobs of its subtree, owed vs
// delivered GPU-hours this week, and whether a new job of a given size would start allocated
// (`allot me`; Slurm's sshare). Read from the snapshot (server/standing.h) and the ledger.

#include <algorithm>
#include <cmath>

#include "server/api_impl.h"
#include "server/report.h"

namespace allot::server {

namespace {

constexpr std::size_t kMaxStandingBudgets = 1000;  // rows in one answer; more: "truncated"

// The budgets a request shows: `scope` and its children when named; otherwise every budget the
// caller is a member of or manages (all of them for administrators), each once, in tree order.
std::vector<core::BudgetId> budgets_shown(const Principal& p, const core::BudgetTree& tree,
                                          const Members& members, const std::string* scope) {
  std::vector<core::BudgetId> out;
  for (core::BudgetId id = 0; id < tree.size(); ++id) {
    const auto& n = tree.node(id);
    if (n.removed) continue;
    bool shown = false;
    if (scope != nullptr) {
      shown =
          n.path == *scope || (n.parent != core::kNoBudget && tree.node(n.parent).path == *scope);
    } else if (p.is_admin()) {
      // The organisations and their programs: a page, not the whole tree.
      shown = n.depth >= 1 && n.depth <= 2;
    } else {
      auto m = members.find(n.path);
      shown = (m != members.end() &&
               std::find(m->second.begin(), m->second.end(), p.subject) != m->second.end()) ||
              std::find(p.manages.begin(), p.manages.end(), n.path) != p.manages.end();
    }
    if (shown) out.push_back(id);
  }
  return out;
}

json number_or_null(double v) {
  return std::isfinite(v) ? json(v) : json();
}

}  // namespace

void ApiServer::Impl::install_standing_routes() {
  route("GET", "/api/v1/standing", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    check_query(req, {"budget", "gpus", "min_runtime"});
    const auto gpus = query_int(req, "gpus", 1, 1, 1 << 16);
    const auto min_runtime =
        query_int(req, "min_runtime", 3600, 0, static_cast<std::int64_t>(30) * core::kDay);
    auto snap = ctl->snapshot();
    if (!snap->standing) {
      throw HttpError{503, "", "the scheduling loop has not ranked the budgets yet", 1};
    }
    const auto& tree = *snap->budgets;
    const auto& table = *snap->standing;
    std::string scope;
    if (req.has_param("budget")) {
      scope = req.get_param_value("budget");
      if (!valid_budget_path(scope)) throw HttpError{400, "budget", "not a budget path"};
      if (!tree.find(scope)) throw HttpError{404, "budget", "no budget " + scope};
      require(can_read_usage(p, scope, snap->members), "see the standing of " + scope);
    }
    auto ids = budgets_shown(p, tree, snap->members, req.has_param("budget") ? &scope : nullptr);
    const bool truncated = ids.size() > kMaxStandingBudgets;
    if (truncated) ids.resize(kMaxStandingBudgets);

    // Owed and delivered over the last 7 days, from the same computation as GET /report.
    const core::Time now = ctl->now();
    const core::Time week_from = now - 7 * core::kDay;
    std::map<std::string, json> week;
    if (!ids.empty()) {
      auto report = budget_report(*store, *snap, week_from, now, "/",
                                  usage_entries(*store, now, week_from, now));
      if (report.ok()) {
        for (const auto& b : report.value()["budgets"]) week[b["budget"]] = b;
      }
    }

    json out = {{"subject", p.subject},
                {"at", table.at},
                {"lookback_seconds", table.lookback},
                {"new_job", {{"gpus", gpus}, {"min_runtime", min_runtime}}},
                {"truncated", truncated},
                {"budgets", json::array()}};
    for (auto id : ids) {
      const auto& n = tree.node(id);
      auto m = snap->members.find(n.path);
      json b = {{"budget", n.path},
                {"share", n.share},
                {"leaf", tree.is_leaf(id)},
                {"member", m != snap->members.end() && std::find(m->second.begin(), m->second.end(),
                                                                 p.subject) != m->second.end()},
                {"clusters", json::array()}};
      for (core::ClusterId c = 0; c < table.rows.size(); ++c) {
        if (id >= table.rows[c].size()) continue;  // created after the last ranking
        const auto& r = table.rows[c][id];
        json row = {
            {"cluster", table.clusters[c]},
            {"fraction", r.fraction},
            {"allocation_gpus", r.fraction * static_cast<double>(table.capacity[c]) / 1000.0},
            {"held_allocated_gpus", static_cast<double>(r.held_allocated) / 1000.0},
            {"held_unallocated_gpus", static_cast<double>(r.held_unallocated) / 1000.0},
            {"usage_gpu_hours", r.usage / 1000.0 / 3600.0},
            {"allocation_gpu_hours", r.allocation / 1000.0 / 3600.0},
            {"promised_gpu_hours", (r.projected - r.usage) / 1000.0 / 3600.0},
            {"standing", number_or_null(r.allocation > 0  ? r.projected / r.allocation
                                        : r.projected > 0 ? INFINITY
                                                          : 0.0)},
            {"rank", r.rank},
            {"siblings", r.siblings},
            {"running_allocated", r.running_allocated},
            {"running_unallocated", r.running_unallocated},
            {"waiting", r.waiting}};
        if (tree.is_leaf(id) && id != tree.root()) {
          auto o = funding_outlook(table, tree, snap->policy, c, id, gpus * core::kWholeGpu,
                                   min_runtime);
          row["new_job"] = {{"allocated", o.allocated}, {"reason", o.reason}};
          if (o.limiting != core::kNoBudget)
            row["new_job"]["limiting"] = tree.node(o.limiting).path;
        }
        b["clusters"].push_back(row);
      }
      if (auto w = week.find(n.path); w != week.end()) {
        const auto& r = w->second;
        // Owed as impact counts it: hour by hour, its share of the available GPUs capped at
        // what its jobs asked for (server/metrics.h); share_gpu_hours is the share uncapped.
        b["week"] = {{"owed_gpu_hours", r["owed_gpu_seconds"].get<double>() / 3600.0},
                     {"share_gpu_hours", r["share_gpu_seconds"].get<double>() / 3600.0},
                     {"delivered_gpu_hours", r["allocated_gpu_seconds"].get<double>() / 3600.0},
                     {"unallocated_gpu_hours", r["unallocated_gpu_seconds"].get<double>() / 3600.0},
                     {"impact", r["impact"]}};
      }
      out["budgets"].push_back(b);
    }
    send(res, 200, out);
  });
}

}  // namespace allot::server
