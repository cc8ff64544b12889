// The budget tree over HTTP: listing, creating and changing (share, members, owners, limits, the
// default minimum runtime), removing, and the audit log of changes to it; and the submission
// limits an administrator sets for one user.

#include <cmath>

#include "server/api_impl.h"

namespace allot::server {

namespace {

constexpr double kMinShare = 1e-6, kMaxShare = 1e6;  // a budget's share (POST /budgets)

// A budget's own submission limits (POST /budgets "submit_limits"), validated, as stored: only
// the fields given; the others stay the server's.
std::string budget_limits_json(const json& l) {
  if (!l.is_object() || l.empty()) {
    throw HttpError{400, "submit_limits",
                    "must be null or an object of rate, burst and max_waiting"};
  }
  known_fields(l, {"rate", "burst", "max_waiting"}, "submit_limits");
  json out = json::object();
  if (auto v = number_in(l, "rate", 0, 1e6, "submit_limits.")) out["rate"] = *v;
  if (auto v = number_in(l, "burst", 1, 1e7, "submit_limits.")) out["burst"] = *v;
  if (auto v = integer_in(l, "max_waiting", 0, 1'000'000'000, "submit_limits.")) {
    out["max_waiting"] = *v;
  }
  return out.dump();
}

}  // namespace

void ApiServer::Impl::install_budget_routes() {
  // ---- budgets ----
  route("GET", "/api/v1/budgets", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    auto snap = ctl->snapshot();
    const auto& tree = *snap->budgets;
    json out = {{"budgets", json::array()}};
    for (core::BudgetId id = 0; id < tree.size(); ++id) {
      const auto& n = tree.node(id);
      if (n.removed || !can_see_budget(p, n.path, snap->members)) continue;
      json b = {{"path", n.path}, {"share", n.share}, {"depth", n.depth}};
      auto m = snap->members.find(n.path);
      b["members"] = m == snap->members.end() ? json::array() : json(m->second);
      auto o = snap->owners.find(n.path);
      b["owners"] = o == snap->owners.end() ? json::array() : json(o->second);
      if (auto l = snap->submit_limits.find(n.path); l != snap->submit_limits.end()) {
        b["submit_limits"] = json::parse(l->second, nullptr, false);
      }
      // Its own default minimum runtime, and the one its jobs get (its own or an ancestor's).
      if (auto d = snap->default_min_runtime.find(n.path); d != snap->default_min_runtime.end()) {
        b["default_min_runtime"] = d->second;
      }
      if (auto d = default_min_runtime(snap->default_min_runtime, n.path)) {
        b["min_runtime_default"] = {{"seconds", d->seconds}, {"from", d->from}};
      }
      json fr = json::object();
      for (const auto& [name, cid] : snap->cluster_ids) fr[name] = tree.allocated_fraction(id, cid);
      b["fraction"] = fr;
      out["budgets"].push_back(b);
    }
    send(res, 200, out);
  });

  route("POST", "/api/v1/budgets", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    auto body = parse_body(req, {"path", "share", "members", "owners", "submit_limits", "expect",
                                 "default_min_runtime"});
    auto path = str_field(body, "path", true, 512);
    if (!valid_budget_path(path) || path == "/") {
      throw HttpError{400, "path", "must be a budget path like /org/team"};
    }
    // expect: "new" creates only (allot budget create), "existing" changes only (budget set),
    // so that a mistyped path is refused rather than made; absent, either (as before).
    const auto expect = str_field(body, "expect", false, 16);
    if (!expect.empty() && expect != "new" && expect != "existing") {
      throw HttpError{400, "expect", "must be new or existing"};
    }
    std::optional<double> share;
    if (auto it = body.find("share"); it != body.end()) {
      // Positive and far from the denormals (1e-320) and -0.0: a share is a weight among
      // siblings, and one a trillion times another still normalises to an ordinary double.
      if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < kMinShare ||
          it->get<double>() > kMaxShare) {
        throw HttpError{400, "share", "must be a number between 0.000001 and 1000000"};
      }
      share = it->get<double>();
    }
    auto users = [&](const char* f) -> std::optional<std::vector<std::string>> {
      auto it = body.find(f);
      if (it == body.end()) return std::nullopt;
      if (!it->is_array() || it->size() > 1000) {
        throw HttpError{400, f, "must be a list of at most 1000 user names"};
      }
      std::vector<std::string> out;
      for (const auto& m : *it) {
        if (!m.is_string() || !valid_name(m.get<std::string>())) {
          throw HttpError{400, f, "entries must be user names"};
        }
        out.push_back(m.get<std::string>());
      }
      return out;
    };
    auto members = users("members");
    auto owners = users("owners");
    std::optional<std::string> limits;
    if (auto it = body.find("submit_limits"); it != body.end()) {
      // Raising what a budget's users may submit is the administrators' (a manager could
      // otherwise lift the limits that protect everyone else from its own subtree).
      if (!p.is_admin()) {
        throw HttpError{403, "submit_limits", "only administrators set a budget's limits"};
      }
      limits = it->is_null() ? std::string() : budget_limits_json(*it);
    }
    // The minimum runtime its jobs get when they ask none (docs/policy.md §2, "Default minimum
    // runtime"): seconds, or null to have none of its own (its ancestors' then applies).
    std::optional<std::int64_t> default_min;
    if (auto it = body.find("default_min_runtime"); it != body.end()) {
      const auto most = ctl->snapshot()->policy.max_min_runtime;
      if (it->is_null()) {
        default_min = -1;
      } else if (!it->is_number_integer() || it->get<std::int64_t>() < 0 ||
                 it->get<std::int64_t>() > most) {
        throw HttpError{400, "default_min_runtime",
                        "must be null or whole seconds between 0 and " + std::to_string(most)};
      } else {
        default_min = it->get<std::int64_t>();
      }
    }
    if (!share && !members && !owners && !limits && !default_min) {
      throw HttpError{400, "share",
                      "give a share, members, owners, submit_limits or default_min_runtime"};
    }
    require(can_manage_budget(p, path), "change budget " + path);
    if (!expect.empty()) {
      const bool exists = ctl->snapshot()->budgets->find(path).has_value();
      if (expect == "existing" && !exists) {
        throw HttpError{
            404, "path",
            "no budget " + path + ": create it with 'allot budget create " + path + " --share S'"};
      }
      if (expect == "new" && exists) {
        throw HttpError{
            409, "path",
            "budget " + path + " exists: change it with 'allot budget set " + path + "'"};
      }
      // A leaf's queued and running jobs are funded by it as a leaf: it gets no sub-budgets
      // until they end. (Checked for `expect`; a plain upsert keeps its old behaviour.)
      const auto tree = ctl->snapshot()->budgets;
      std::string parent = path.substr(0, path.rfind('/'));
      while (!parent.empty() && !tree->find(parent)) parent = parent.substr(0, parent.rfind('/'));
      if (!exists && !parent.empty() && tree->is_leaf(*tree->find(parent))) {
        store::JobQuery q;
        q.states = {"pending", "starting", "running", "preempting", "requeued"};
        q.budget = parent;
        q.budget_subtree = false;
        q.limit = 1000;
        const auto live = store->jobs(q).size();
        if (live > 0) {
          throw HttpError{409, "parent",
                          parent + " has " + std::to_string(live) + (live == 1000 ? "+" : "") +
                              " job" + (live == 1 ? "" : "s") +
                              " queued or running: a budget with jobs cannot get sub-budgets "
                              "until they end (or are cancelled)"};
        }
      }
    }
    auto r =
        ctl->set_budget(path, share, members, p.subject, owners, p.token_id, limits, default_min);
    if (!r.ok()) check(r.error());
    json out = {{"path", r.value().path},
                {"share", r.value().share},
                {"members", r.value().members},
                {"owners", r.value().owners}};
    if (!r.value().submit_limits.empty()) {
      out["submit_limits"] = json::parse(r.value().submit_limits, nullptr, false);
    }
    if (r.value().default_min_runtime >= 0) {
      out["default_min_runtime"] = r.value().default_min_runtime;
    }
    send(res, 200, out);
  });

  route("DELETE", "/api/v1/budgets", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    check_query(req, {"path"});
    auto path = req.get_param_value("path");
    if (!req.has_param("path")) throw HttpError{400, "path", "required: the budget to remove"};
    if (!valid_budget_path(path) || path == "/") {
      throw HttpError{400, "path", "must be a budget path like /org/team"};
    }
    require(can_manage_budget(p, path), "remove budget " + path);
    auto r = ctl->remove_budget(path, p.subject, p.token_id);
    if (!r.ok()) {
      const bool missing = r.error().reason.rfind("no budget", 0) == 0;
      check(r.error(), missing ? 404 : 409);
    }
    send(res, 200, {{"path", path}, {"removed", r.value()}});
  });

  // ---- users' own submission limits (administrators) ----
  route("GET", "/api/v1/submit-limits",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {});
          require(p.is_admin(), "read the submission limits (administrators only)");
          const auto& l = quota.limits();
          json out = {{"server",
                       {{"rate", l.rate},
                        {"burst", l.burst},
                        {"max_waiting", l.max_waiting},
                        {"max_waiting_total", l.max_waiting_total}}},
                      {"users", json::array()}};
          for (const auto& [user, own] : ctl->snapshot()->user_limits) {
            out["users"].push_back(
                {{"user", user}, {"submit_limits", json::parse(own, nullptr, false)}});
          }
          send(res, 200, out);
        });
  route("POST", "/api/v1/submit-limits",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          require(p.is_admin(), "set a user's submission limits (administrators only)");
          auto body = parse_body(req, {"user", "submit_limits"});
          const auto user = str_field(body, "user", true, 128);
          if (!valid_name(user)) throw HttpError{400, "user", "must be a user name"};
          auto it = body.find("submit_limits");
          if (it == body.end()) {
            throw HttpError{400, "submit_limits",
                            "required: an object of rate, burst and max_waiting, or null to "
                            "drop the user's own limits"};
          }
          const std::string limits = it->is_null() ? std::string() : budget_limits_json(*it);
          ctl->set_user_limits(user, limits, p.subject, p.token_id);
          json out = {{"user", user}, {"submit_limits", json()}};
          if (!limits.empty()) out["submit_limits"] = json::parse(limits);
          send(res, 200, out);
        });

  route("GET", "/api/v1/budgets/audit",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {"path", "limit"});
          auto path = req.has_param("path") ? req.get_param_value("path") : std::string("/");
          if (!valid_budget_path(path)) throw HttpError{400, "path", "not a budget path"};
          require(can_see_budget_usage(p, path), "read the audit log of " + path);
          auto limit = static_cast<int>(query_int(req, "limit", 100, 1, 1000));
          json out = {{"entries", json::array()}};
          for (const auto& a : store->audit(path == "/" ? "" : path, limit)) {
            out["entries"].push_back({{"id", a.id},
                                      {"time", a.time},
                                      {"actor", a.actor},
                                      {"actor_token", a.actor_token},
                                      {"path", a.path},
                                      {"field", a.field},
                                      {"old", a.old_value},
                                      {"new", a.new_value}});
          }
          send(res, 200, out);
        });
}

}  // namespace allot::server
