// Inference services over HTTP (docs/api.md, "Services"; server/service.h): create, list, show,
// scale, delete, and the load a service reports for its autoscaler. Whoever may see a job of the
// service (its owner, a manager of its budget, an administrator) may see and change it.

#include <cmath>

#include "server/api_impl.h"

namespace allot::server {

namespace {

// A service as visibility sees it: a job of its owner in its budget.
bool can_see_service(const Principal& p, const json& view) {
  return server::can_see_service(p, view.value("owner", ""), view.value("budget", ""));
}

json service_summary(const json& v) {
  json out = {{"name", v["name"]},
              {"owner", v["owner"]},
              {"budget", v["budget"]},
              {"min_replicas", v["spec"]["min_replicas"]},
              {"max_replicas", v["spec"]["max_replicas"]},
              {"desired", v["desired"]},
              {"running", v["running"]},
              {"ready", v["ready"]},
              {"memory", v["memory"]},
              {"load", v["load"]}};
  out["replicas"] = v["replicas"].size();
  return out;
}

}  // namespace

void ApiServer::Impl::install_service_routes() {
  // The service as the latest snapshot shows it, or 404 (also for one the caller may not see).
  auto visible = [this](const Principal& p, const std::string& name) {
    auto snap = ctl->snapshot();
    auto it = snap->services->find(name);
    if (it == snap->services->end() || !can_see_service(p, it->second)) {
      throw HttpError{404, "name", "no such service"};
    }
    return it->second;
  };
  auto shown = [this](const std::string& name) {
    auto snap = ctl->snapshot();
    auto it = snap->services->find(name);
    return it == snap->services->end() ? json() : it->second;
  };

  route("POST", "/api/v1/services",
        [this, shown](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          not_agent(p);
          refuse_deep(req.body);
          auto body = json::parse(req.body, nullptr, false);
          if (body.is_discarded()) throw HttpError{400, "body", "is not valid JSON"};
          auto snap = ctl->snapshot();
          auto parsed = parse_service_request(body, *snap->catalog, snap->cluster_ids,
                                              *snap->budgets, snap->policy, snap->node_shapes);
          if (!parsed.ok()) check(parsed.error());
          const auto& spec = parsed.value();
          require(can_submit(p, spec.budget, snap->members),
                  "submit to " + spec.budget + " (ask its manager to add you as a member)");
          std::vector<std::string> cluster_names;
          for (const auto& c : snap->clusters) cluster_names.push_back(c.name);
          auto job = replica_job(spec, spec.min_replicas > 0);
          auto core_spec =
              spec_from_canonical(job.dump(), *snap->catalog, snap->cluster_ids, *snap->budgets);
          if (!core_spec.ok()) check(core_spec.error());
          if (auto fits = check_satisfiable(core_spec.value(), false, snap->node_shapes,
                                            *snap->catalog, cluster_names);
              !fits.ok()) {
            auto e = fits.error();
            e.field = "job." + e.field;
            check(e);
          }
          auto r = ctl->create_service(spec, p.subject);
          if (!r.ok()) check(r.error(), r.error().field == "name" ? 409 : 400);
          send(res, 201, shown(spec.name));
          if (opts.changes) opts.changes->publish(ChangeFeed::kJobs);
        });

  route("GET", "/api/v1/services", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    check_query(req, {});
    auto snap = ctl->snapshot();
    json out = json::array();
    for (const auto& [name, v] : *snap->services) {
      if (can_see_service(p, v)) out.push_back(service_summary(v));
    }
    send(res, 200, {{"services", out}});
  });

  route("GET", "/api/v1/services/{name}",
        [this, visible](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          not_agent(p);
          check_query(req, {});
          send(res, 200, visible(p, req.matches[1]));
        });

  // Scale: new bounds (either or both); the replicas wanted are kept inside them.
  route("POST", "/api/v1/services/{name}/scale",
        [this, visible, shown](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          not_agent(p);
          auto body = parse_body(req, {"min_replicas", "max_replicas"});
          std::string name = req.matches[1];
          visible(p, name);
          auto field = [&](const char* f) -> std::optional<int> {
            auto it = body.find(f);
            if (it == body.end()) return std::nullopt;
            if (!it->is_number_integer() || it->get<std::int64_t>() < 0 ||
                it->get<std::int64_t>() > 1000000) {
              throw HttpError{400, f, "must be a number of replicas"};
            }
            return it->get<int>();
          };
          auto mn = field("min_replicas");
          auto mx = field("max_replicas");
          if (!mn && !mx) throw HttpError{400, "body", "give min_replicas, max_replicas or both"};
          auto r = ctl->scale_service(name, mn, mx, acting(p));
          if (!r.ok()) check(r.error(), r.error().field == "name" ? 404 : 400);
          send(res, 200, shown(name));
        });

  route("POST", "/api/v1/services/{name}/restart",
        [this, visible, shown](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          not_agent(p);
          parse_body(req, {}, true);
          std::string name = req.matches[1];
          visible(p, name);
          auto r = ctl->restart_service(name, acting(p));
          if (!r.ok()) check(r.error(), 404);
          send(res, 200, shown(name));
        });

  route("DELETE", "/api/v1/services/{name}",
        [this, visible](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          not_agent(p);
          check_query(req, {});
          std::string name = req.matches[1];
          auto before = visible(p, name);
          auto r = ctl->delete_service(name, acting(p));
          if (!r.ok()) check(r.error(), 404);
          before["deleted"] = true;
          send(res, 200, before);
          if (opts.changes) opts.changes->publish(ChangeFeed::kJobs);
        });

  // The service's own figure for its autoscaler: requests per second, or p90 latency, over all
  // its replicas, in whatever unit its load_high and load_low are given.
  // A service token (role "service", scoped to the service's name) may do this and nothing else,
  // so that no token able to submit or cancel work need be handed to the service's replicas.
  route("POST", "/api/v1/services/{name}/load",
        [this, visible](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req, Narrow::Service);
          not_agent(p);
          std::string name = req.matches[1];
          if (p.role == "service") {
            if (p.scope != name) {
              throw HttpError{
                  403, "Authorization",
                  "this service token reports the load of service " + p.scope + " only"};
            }
            // It acts as its subject, who must still see the service (a service deleted and
            // made again by someone else is not theirs).
            Principal as{p.token_id, "user", p.subject, "", {}};
            add_managed(as, ctl->snapshot()->owned_by);
            visible(as, name);
          }
          auto body = parse_body(req, {"value"});
          if (p.role != "service") visible(p, name);
          auto v = body.find("value");
          if (v == body.end() || !v->is_number() || !std::isfinite(v->get<double>()) ||
              v->get<double>() < 0 || v->get<double>() > 1e12) {
            throw HttpError{400, "value", "required: a number from 0 to 1e12"};
          }
          auto st = ctl->service_load(name, v->get<double>());
          if (!st.ok()) check(st.error(), 404);
          send(res, 200, {{"name", name}, {"load", v->get<double>()}});
        });
}

}  // namespace allot::server
