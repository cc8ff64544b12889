// Right-sizing advice over HTTP: GET /advice (server/advice.h), the jobs measured in a window
// whose GPUs were idle, starved by their input pipeline or far bigger than their memory needs,
// and per budget what that cost. Who sees what follows the job listings: administrators every
// job, managers the jobs in the budgets they manage and their own, users their own.

#include "server/advice.h"
#include "server/api_impl.h"
#include "server/job_spec.h"

namespace allot::server {

void ApiServer::Impl::install_advice_routes() {
  route("GET", "/api/v1/advice", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    check_query(req, {"budget", "user", "days"});
    const std::string budget = req.has_param("budget") ? req.get_param_value("budget") : "";
    const std::string user = req.has_param("user") ? req.get_param_value("user") : "";
    if (!budget.empty() && !valid_budget_path(budget)) {
      throw HttpError{400, "budget", "not a budget path"};
    }
    if (!user.empty() && !valid_name(user)) throw HttpError{400, "user", "not a user name"};
    if (!p.is_admin() && p.manages.empty() && !user.empty() && user != p.subject) {
      throw HttpError{403, "user", "users see only their own jobs' advice"};
    }
    const auto days = query_int(req, "days", AdviceRules::kWindowSeconds / core::kDay, 1, 366);
    const core::Time to = ctl->now();
    const core::Time from = to - days * core::kDay;
    std::vector<MeasuredJob> jobs;
    for (auto& t : store->telemetry_between(from, to + 1)) {
      auto j = store->job(t.job);
      if (!j || !can_see_job(p, *j)) continue;
      if (!budget.empty() && !path_within(j->budget, budget)) continue;
      if (!user.empty() && j->owner != user) continue;
      jobs.push_back({std::move(*j), std::move(t)});
    }
    auto snap = ctl->snapshot();
    json out = advice_report(jobs, *snap->catalog, opts.advice);
    out["from"] = from;
    out["to"] = to;
    out["budget"] = budget.empty() ? json() : json(budget);
    out["user"] = user.empty() ? json() : json(user);
    out["min_seconds"] = opts.advice.min_seconds;
    send(res, 200, out);
  });
}

}  // namespace allot::server
