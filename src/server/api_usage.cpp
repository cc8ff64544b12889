// Accounting over HTTP: GET /usage (GPU-seconds per budget or user) and GET /report (the four
// metrics; computed by server/report.h).

#include <map>

#include "server/api_impl.h"
#include "server/report.h"

namespace allot::server {

void ApiServer::Impl::install_usage_routes() {
  // ---- accounting ----
  auto period = [](const httplib::Request& req, core::Time now) {
    auto to = query_int(req, "to", now, 0, INT64_MAX / 2);
    auto from = query_int(req, "from", to - 7 * core::kDay, 0, INT64_MAX / 2);
    if (from >= to) throw HttpError{400, "from", "must be before to"};
    return std::pair<core::Time, core::Time>(from, to);
  };
  route("GET", "/api/v1/usage",
        [this, period](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {"from", "to", "by", "budget"});
          auto [from, to] = period(req, ctl->now());
          auto by = req.has_param("by") ? req.get_param_value("by") : std::string("budget");
          if (by != "budget" && by != "user") throw HttpError{400, "by", "must be budget or user"};
          auto snap = ctl->snapshot();
          auto scope = req.has_param("budget") ? req.get_param_value("budget")
                                               : default_scope(p, snap->members);
          if (!valid_budget_path(scope)) throw HttpError{400, "budget", "not a budget path"};
          require(can_read_usage(p, scope, snap->members), "see usage of " + scope);
          std::map<std::string, std::pair<double, double>> rows;  // key -> (allocated, unallocated)
          for (const auto& e : usage_entries(*store, ctl->now(), from, to)) {
            if (e.end <= e.start || !path_within(e.budget, scope)) continue;
            const double gs =
                static_cast<double>(e.milli) * static_cast<double>(e.end - e.start) / 1000.0;
            std::vector<std::string> keys;
            if (by == "user") {
              keys.push_back(e.owner);
            } else {
              // The budget and every ancestor within the scope.
              std::string path = e.budget;
              for (;;) {
                if (path_within(path, scope)) keys.push_back(path);
                if (path == "/") break;
                auto slash = path.rfind('/');
                path = slash == 0 ? "/" : path.substr(0, slash);
              }
            }
            for (const auto& k : keys) (e.allocated ? rows[k].first : rows[k].second) += gs;
          }
          json out = {
              {"from", from}, {"to", to}, {"by", by}, {"scope", scope}, {"rows", json::array()}};
          for (const auto& [k, v] : rows) {
            out["rows"].push_back({{by == "user" ? "user" : "budget", k},
                                   {"allocated_gpu_seconds", v.first},
                                   {"unallocated_gpu_seconds", v.second}});
          }
          send(res, 200, out);
        });
  route("GET", "/api/v1/report",
        [this, period](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {"from", "to", "budget", "step"});
          auto [from, to] = period(req, ctl->now());
          const auto step = query_int(req, "step", 0, kMinReportStep, kMaxReportPeriod);
          if (to - from > kMaxReportPeriod) {
            throw HttpError{400, "from",
                            "a report covers at most 366 days (to - from <= " +
                                std::to_string(kMaxReportPeriod) + " seconds)"};
          }
          auto snap = ctl->snapshot();
          auto scope = req.has_param("budget") ? req.get_param_value("budget")
                                               : default_scope(p, snap->members);
          if (!valid_budget_path(scope)) throw HttpError{400, "budget", "not a budget path"};
          require(can_read_usage(p, scope, snap->members), "see the report of " + scope);
          auto report = budget_report(*store, *snap, from, to, scope,
                                      usage_entries(*store, ctl->now(), from, to), step);
          if (!report.ok()) check(report.error());
          send(res, 200, report.value());
        });
}

}  // namespace allot::server
