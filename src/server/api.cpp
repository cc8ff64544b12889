#include "server/api.h"

#include <httplib.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_map>

#include "server/auth.h"
#include "server/job_spec.h"

namespace allot::server {

using json = nlohmann::json;
using core::Error;
namespace op = store::op;

core::Result<std::string> create_token(store::Store& store, const std::string& name,
                                       const std::string& role, const std::string& subject,
                                       const std::string& scope, core::Time now) {
  std::string secret = new_token_secret();
  store::TokenRecord t;
  t.hash = sha256_hex(secret);
  t.name = name;
  t.role = role;
  t.subject = subject;
  t.scope = scope;
  t.created = now;
  auto st = store.write({op::PutToken{t}});
  if (!st.ok()) return st.error();
  return secret;
}

namespace {

const char* kRoutes[][2] = {
    {"GET", "/api/v1/health"},
    {"GET", "/api/v1/whoami"},
    {"POST", "/api/v1/jobs"},
    {"GET", "/api/v1/jobs"},
    {"GET", "/api/v1/jobs/{id}"},
    {"POST", "/api/v1/jobs/{id}/cancel"},
    {"GET", "/api/v1/jobs/{id}/why"},
    {"GET", "/api/v1/jobs/{id}/events"},
    {"GET", "/api/v1/budgets"},
    {"POST", "/api/v1/budgets"},
    {"GET", "/api/v1/budgets/audit"},
    {"GET", "/api/v1/nodes"},
    {"POST", "/api/v1/nodes"},
    {"GET", "/api/v1/nodes/{name}"},
    {"POST", "/api/v1/nodes/{name}/heartbeat"},
    {"POST", "/api/v1/nodes/{name}/drain"},
    {"POST", "/api/v1/nodes/{name}/undrain"},
    {"POST", "/api/v1/nodes/{name}/cordon"},
    {"POST", "/api/v1/nodes/{name}/uncordon"},
    {"GET", "/api/v1/usage"},
    {"GET", "/api/v1/report"},
    {"GET", "/api/v1/agent/nodes/{name}/assignments"},
    {"POST", "/api/v1/agent/nodes/{name}/reports"},
    {"GET", "/api/v1/tokens"},
    {"POST", "/api/v1/tokens"},
    {"DELETE", "/api/v1/tokens/{id}"},
};

std::string to_regex(const std::string& path) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '{') {
      auto end = path.find('}', i);
      auto name = path.substr(i + 1, end - i - 1);
      out += name == "id" ? "(\\d{1,19})" : "([A-Za-z0-9._@-]{1,128})";
      i = end;
    } else if (path[i] == '.') {
      out += "\\.";
    } else {
      out += path[i];
    }
  }
  return out;
}

json job_json(const store::JobRecord& j) {
  json o = {{"id", j.id},
            {"name", j.name},
            {"owner", j.owner},
            {"budget", j.budget},
            {"state", j.state},
            {"reason", j.reason},
            {"submit_time", j.submit_time},
            {"updated_at", j.updated_at},
            {"idempotency_key", j.idempotency_key},
            {"runs", j.runs},
            {"allocated", j.allocated}};
  auto spec = json::parse(j.spec_json, nullptr, false);
  o["spec"] = spec.is_discarded() ? json::object() : spec;
  if (j.runs > 0) {
    o["cluster"] = j.cluster;
    auto p = json::parse(j.placement_json, nullptr, false);
    o["placement"] = p.is_discarded() ? json::array() : p;
    o["run_start"] = j.run_start;
    o["protected_until"] = j.protected_until;
  }
  o["exit_code"] = j.exit_code ? json(*j.exit_code) : json(nullptr);
  return o;
}

json node_json(const store::NodeRecord& n) {
  auto labels = json::parse(n.labels_json, nullptr, false);
  return {{"name", n.name},
          {"cluster", n.cluster},
          {"model", n.model},
          {"gpus", n.gpus},
          {"block", n.block},
          {"labels", labels.is_discarded() ? json::object() : labels},
          {"health", n.health},
          {"health_reason", n.health_reason},
          {"cordoned", n.cordoned},
          {"simulated", n.simulated},
          {"registered_at", n.registered_at},
          {"last_heartbeat", n.last_heartbeat}};
}

struct HttpError {
  int status;
  std::string field;
  std::string reason;
};

}  // namespace

struct ApiServer::Impl {
  store::Store& store;
  Controller& ctl;
  ApiOptions opts;
  std::unique_ptr<httplib::Server> svr;
  std::thread thread;
  std::mutex token_mu;
  std::unordered_map<std::string, Principal> token_cache;

  Impl(store::Store& s, Controller& c, ApiOptions o) : store(s), ctl(c), opts(std::move(o)) {}

  static void send_error(httplib::Response& res, int status, const std::string& field,
                         const std::string& reason) {
    json e = {{"error", {{"status", status}, {"field", field}, {"reason", reason}}}};
    res.status = status;
    res.set_content(e.dump(), "application/json");
  }
  static void send(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(), "application/json");
  }

  Principal authenticate(const httplib::Request& req) {
    auto h = req.get_header_value("Authorization");
    if (h.size() < 8 || h.compare(0, 7, "Bearer ") != 0) {
      throw HttpError{401, "Authorization", "missing: send 'Authorization: Bearer <token>'"};
    }
    auto secret = h.substr(7);
    if (secret.size() > 256) throw HttpError{401, "Authorization", "invalid token"};
    auto hash = sha256_hex(secret);
    {
      std::lock_guard lk(token_mu);
      auto it = token_cache.find(hash);
      if (it != token_cache.end()) return it->second;
    }
    auto t = store.token_by_hash(hash);
    if (!t || t->revoked) throw HttpError{401, "Authorization", "invalid or revoked token"};
    Principal p{t->id, t->role, t->subject, t->scope};
    std::lock_guard lk(token_mu);
    token_cache[hash] = p;
    return p;
  }

  static json parse_body(const httplib::Request& req, const std::set<std::string>& known,
                         bool empty_ok = false) {
    if (req.body.empty() && empty_ok) return json::object();
    auto b = json::parse(req.body, nullptr, false);
    if (b.is_discarded()) throw HttpError{400, "body", "is not valid JSON"};
    if (!b.is_object()) throw HttpError{400, "body", "must be a JSON object"};
    for (const auto& [k, v] : b.items()) {
      if (!known.count(k)) throw HttpError{400, k, "unknown field"};
    }
    return b;
  }
  static void check_query(const httplib::Request& req, const std::set<std::string>& known) {
    for (const auto& [k, v] : req.params) {
      if (!known.count(k)) throw HttpError{400, k, "unknown query parameter"};
      if (v.size() > 512) throw HttpError{400, k, "too long"};
    }
  }
  static std::int64_t query_int(const httplib::Request& req, const std::string& name,
                                std::int64_t def, std::int64_t lo, std::int64_t hi) {
    if (!req.has_param(name)) return def;
    const auto v = req.get_param_value(name);
    std::size_t pos = 0;
    std::int64_t out = 0;
    try {
      out = std::stoll(v, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos == 0 || pos != v.size() || out < lo || out > hi) {
      throw HttpError{
          400, name,
          "must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi)};
    }
    return out;
  }
  static std::string str_field(const json& b, const std::string& f, bool required,
                               std::size_t max = 128) {
    auto it = b.find(f);
    if (it == b.end()) {
      if (required) throw HttpError{400, f, "required"};
      return "";
    }
    if (!it->is_string() || it->get<std::string>().size() > max) {
      throw HttpError{400, f, "must be a string of at most " + std::to_string(max) + " characters"};
    }
    return it->get<std::string>();
  }
  static void check(const core::Error& e, int status = 400) {
    throw HttpError{status, e.field, e.reason};
  }

  template <typename F>
  void route(const std::string& method, const std::string& path, F fn) {
    auto handler = [this, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const HttpError& e) {
        send_error(res, e.status, e.field, e.reason);
      } catch (const std::exception& e) {
        send_error(res, 500, "", e.what());
      }
    };
    auto re = to_regex(path);
    if (method == "GET") svr->Get(re, handler);
    if (method == "POST") svr->Post(re, handler);
    if (method == "DELETE") svr->Delete(re, handler);
  }

  store::JobRecord visible_job(const Principal& p, const std::string& id_text) {
    JobId id = 0;
    try {
      id = std::stoull(id_text);
    } catch (...) {
      throw HttpError{400, "id", "must be a job id"};
    }
    auto j = store.job(id);
    if (!j || !can_see_job(p, *j)) throw HttpError{404, "id", "no such job"};
    return *j;
  }
  static void require(bool ok, const std::string& what) {
    if (!ok) throw HttpError{403, "", "not allowed: " + what};
  }
  static void not_agent(const Principal& p) {
    require(p.role != "agent", "node agent tokens only use the agent and heartbeat routes");
  }

  void install();
};

void ApiServer::Impl::install() {
  route("GET", "/api/v1/health", [this](const auto&, auto& res) {
    auto snap = ctl.snapshot();
    send(res, 200, {{"status", "ok"}, {"cycles", snap ? snap->cycles : 0}});
  });
  route("GET", "/api/v1/whoami", [this](const auto& req, auto& res) {
    auto p = authenticate(req);
    send(res, 200, {{"role", p.role}, {"subject", p.subject}, {"scope", p.scope}});
  });

  // ---- jobs ----
  route("POST", "/api/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    auto body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw HttpError{400, "body", "is not valid JSON"};
    if (body.is_object() && !body.contains("idempotency_key") &&
        req.has_header("Idempotency-Key")) {
      body["idempotency_key"] = req.get_header_value("Idempotency-Key");
    }
    auto snap = ctl.snapshot();
    auto parsed =
        parse_job_request(body, *snap->catalog, snap->cluster_ids, *snap->budgets, snap->policy);
    if (!parsed.ok()) check(parsed.error());
    auto& pj = parsed.value();
    require(can_submit(p, pj.budget, snap->members),
            "submit to " + pj.budget + " (ask its manager to add you as a member)");
    auto replay = [&](const store::JobRecord& existing) {
      if (existing.spec_json != pj.canonical_json || existing.budget != pj.budget) {
        throw HttpError{
            409, "idempotency_key",
            "already used for job " + std::to_string(existing.id) + " with a different request"};
      }
      send(res, 200, job_json(existing));
    };
    if (auto existing = store.job_by_key(p.subject, pj.idempotency_key)) return replay(*existing);
    store::JobRecord rec;
    rec.id = ctl.next_job_id();
    rec.owner = p.subject;
    rec.idempotency_key = pj.idempotency_key;
    rec.name = pj.name;
    rec.budget = pj.budget;
    rec.spec_json = pj.canonical_json;
    rec.state = "pending";
    rec.reason = "submitted";
    rec.submit_time = ctl.now();
    rec.updated_at = rec.submit_time;
    auto st = store.write(
        {op::InsertJob{rec}, op::AddEvent{{rec.id, rec.submit_time, "", "pending", "submitted"}}});
    if (!st.ok()) {
      if (st.error().field == "idempotency_key") {
        if (auto existing = store.job_by_key(p.subject, pj.idempotency_key)) {
          return replay(*existing);
        }
      }
      throw HttpError{503, "store", st.error().reason};
    }
    auto spec = pj.spec;
    spec.id = rec.id;
    spec.owner = rec.owner;
    spec.submit_time = rec.submit_time;
    ctl.submitted(rec, spec);
    send(res, 201, job_json(rec));
  });

  route("GET", "/api/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    check_query(req, {"state", "owner", "budget", "after", "limit", "order"});
    store::JobQuery q;
    if (req.has_param("state")) {
      const auto v = req.get_param_value("state");
      std::size_t start = 0;
      while (start <= v.size()) {
        auto comma = v.find(',', start);
        if (comma == std::string::npos) comma = v.size();
        auto s = v.substr(start, comma - start);
        if (!parse_job_status(s)) throw HttpError{400, "state", "unknown state '" + s + "'"};
        q.states.push_back(s);
        start = comma + 1;
      }
    }
    q.owner = req.get_param_value("owner");
    if (!q.owner.empty() && !valid_name(q.owner)) throw HttpError{400, "owner", "not a user name"};
    q.budget = req.get_param_value("budget");
    if (!q.budget.empty() && !valid_budget_path(q.budget)) {
      throw HttpError{400, "budget", "not a budget path"};
    }
    q.after = static_cast<JobId>(query_int(req, "after", 0, 0, INT64_MAX));
    q.limit = static_cast<int>(query_int(req, "limit", 100, 1, 1000));
    auto order = req.get_param_value("order");
    if (!order.empty() && order != "asc" && order != "desc") {
      throw HttpError{400, "order", "must be asc or desc"};
    }
    q.descending = order == "desc";
    if (p.role == "user") {
      if (!q.owner.empty() && q.owner != p.subject) {
        throw HttpError{403, "owner", "users see only their own jobs"};
      }
      q.owner = p.subject;
    } else if (p.role == "manager") {
      q.budgets_within = {p.scope};
      q.owner_or_within = p.subject;
    }
    auto rows = store.jobs(q);
    json out = {{"jobs", json::array()}};
    for (const auto& j : rows) out["jobs"].push_back(job_json(j));
    out["next"] = static_cast<int>(rows.size()) == q.limit ? json(rows.back().id) : json(nullptr);
    send(res, 200, out);
  });

  route("GET", "/api/v1/jobs/{id}", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    send(res, 200, job_json(visible_job(p, req.matches[1])));
  });

  route("POST", "/api/v1/jobs/{id}/cancel",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          auto body = parse_body(req, {"reason"}, true);
          auto reason = str_field(body, "reason", false, 512);
          auto j = visible_job(p, req.matches[1]);
          auto r =
              ctl.cancel(j.id, "cancelled by " + p.subject + (reason.empty() ? "" : ": " + reason));
          if (!r.ok()) check(r.error(), 409);
          send(res, 200, job_json(r.value()));
        });

  route("GET", "/api/v1/jobs/{id}/why",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          auto j = visible_job(p, req.matches[1]);
          auto snap = ctl.snapshot();
          json out = {{"id", j.id}, {"state", j.state}};
          auto it = snap->why.find(j.id);
          if (it != snap->why.end()) {
            out["code"] = it->second.code;
            out["explanation"] = it->second.text;
            out["rank"] = it->second.rank;
            out["funded"] = it->second.funded;
            out["expected_start"] = it->second.expected_start == core::kNever
                                        ? json(nullptr)
                                        : json(it->second.expected_start);
          } else if (j.state == "pending" || j.state == "requeued") {
            out["code"] = "not-yet-considered";
            out["explanation"] =
                "submitted after the last scheduling cycle; the next one considers it";
          } else {
            out["code"] = j.state;
            out["explanation"] = j.reason;
          }
          send(res, 200, out);
        });

  route("GET", "/api/v1/jobs/{id}/events",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          auto j = visible_job(p, req.matches[1]);
          json out = {{"id", j.id}, {"events", json::array()}};
          for (const auto& e : store.job_events(j.id)) {
            out["events"].push_back(
                {{"time", e.time}, {"from", e.from}, {"to", e.to}, {"reason", e.reason}});
          }
          send(res, 200, out);
        });

  // ---- budgets ----
  route("GET", "/api/v1/budgets", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    auto snap = ctl.snapshot();
    const auto& tree = *snap->budgets;
    json out = {{"budgets", json::array()}};
    for (core::BudgetId id = 0; id < tree.size(); ++id) {
      const auto& n = tree.node(id);
      if (n.removed) continue;
      json b = {{"path", n.path}, {"share", n.share}, {"depth", n.depth}};
      auto m = snap->members.find(n.path);
      b["members"] = m == snap->members.end() ? json::array() : json(m->second);
      json fr = json::object();
      for (const auto& [name, cid] : snap->cluster_ids) fr[name] = tree.allocated_fraction(id, cid);
      b["fraction"] = fr;
      out["budgets"].push_back(b);
    }
    send(res, 200, out);
  });

  route("POST", "/api/v1/budgets", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    auto body = parse_body(req, {"path", "share", "members"});
    auto path = str_field(body, "path", true, 512);
    if (!valid_budget_path(path) || path == "/") {
      throw HttpError{400, "path", "must be a budget path like /org/team"};
    }
    std::optional<double> share;
    if (auto it = body.find("share"); it != body.end()) {
      if (!it->is_number() || it->get<double>() < 0 || it->get<double>() > 1e6) {
        throw HttpError{400, "share", "must be a number between 0 and 1000000"};
      }
      share = it->get<double>();
    }
    std::optional<std::vector<std::string>> members;
    if (auto it = body.find("members"); it != body.end()) {
      if (!it->is_array() || it->size() > 1000) {
        throw HttpError{400, "members", "must be a list of at most 1000 user names"};
      }
      members.emplace();
      for (const auto& m : *it) {
        if (!m.is_string() || !valid_name(m.get<std::string>())) {
          throw HttpError{400, "members", "entries must be user names"};
        }
        members->push_back(m.get<std::string>());
      }
    }
    if (!share && !members) throw HttpError{400, "share", "give a share, members, or both"};
    require(can_manage_budget(p, path), "change budget " + path);
    auto r = ctl.set_budget(path, share, members, p.subject);
    if (!r.ok()) check(r.error());
    send(res, 200,
         {{"path", r.value().path}, {"share", r.value().share}, {"members", r.value().members}});
  });

  route("GET", "/api/v1/budgets/audit",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {"path", "limit"});
          auto path = req.has_param("path") ? req.get_param_value("path") : std::string("/");
          if (!valid_budget_path(path)) throw HttpError{400, "path", "not a budget path"};
          require(p.is_admin() || (p.role == "manager" && path_within(path, p.scope)),
                  "read the audit log of " + path);
          auto limit = static_cast<int>(query_int(req, "limit", 100, 1, 1000));
          json out = {{"entries", json::array()}};
          for (const auto& a : store.audit(path == "/" ? "" : path, limit)) {
            out["entries"].push_back({{"id", a.id},
                                      {"time", a.time},
                                      {"actor", a.actor},
                                      {"path", a.path},
                                      {"field", a.field},
                                      {"old", a.old_value},
                                      {"new", a.new_value}});
          }
          send(res, 200, out);
        });

  // ---- nodes ----
  route("GET", "/api/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    json out = {{"nodes", json::array()}};
    for (const auto& n : store.nodes()) out["nodes"].push_back(node_json(n));
    send(res, 200, out);
  });
  route("GET", "/api/v1/nodes/{name}", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    require(p.role != "agent" || p.scope == req.matches[1].str(), "read another node");
    auto n = store.node(req.matches[1]);
    if (!n) throw HttpError{404, "name", "no such node"};
    send(res, 200, node_json(*n));
  });
  route("POST", "/api/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    auto body = parse_body(req, {"name", "cluster", "model", "gpus", "block", "labels"});
    store::NodeRecord n;
    n.name = str_field(body, "name", true);
    if (!valid_name(n.name)) throw HttpError{400, "name", "must be a name ([A-Za-z0-9._@-])"};
    require(p.is_admin() || (p.role == "agent" && p.scope == n.name), "register node " + n.name);
    n.cluster = str_field(body, "cluster", false);
    if (n.cluster.empty()) n.cluster = "default";
    if (!valid_name(n.cluster)) throw HttpError{400, "cluster", "must be a name"};
    n.model = str_field(body, "model", true, 32);
    n.block = str_field(body, "block", false);
    auto g = body.find("gpus");
    if (g == body.end() || !g->is_number_integer() || g->get<int>() < 1 || g->get<int>() > 64) {
      throw HttpError{400, "gpus", "required: an integer between 1 and 64"};
    }
    n.gpus = g->get<int>();
    if (auto l = body.find("labels"); l != body.end()) {
      if (!l->is_object() || l->size() > 64) {
        throw HttpError{400, "labels", "must be an object of at most 64 string values"};
      }
      for (const auto& [k, v] : l->items()) {
        if (k.size() > 128 || !v.is_string() || v.get<std::string>().size() > 256) {
          throw HttpError{400, "labels", "keys and values must be short strings"};
        }
      }
      n.labels_json = l->dump();
    }
    auto r = ctl.register_node(n);
    if (!r.ok()) check(r.error(), r.error().field == "name" ? 409 : 400);
    send(res, 201, node_json(r.value()));
  });
  route("POST", "/api/v1/nodes/{name}/heartbeat",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          const std::string name = req.matches[1];
          require(can_act_for_node(p, name), "act for node " + name);
          auto body = parse_body(req, {"health", "reason"}, true);
          auto health = str_field(body, "health", false);
          auto reason = str_field(body, "reason", false, 512);
          if (!health.empty() && health != "healthy" && health != "unhealthy") {
            throw HttpError{400, "health", "an agent reports healthy or unhealthy"};
          }
          if (!health.empty()) {
            auto cur = store.node(name);
            // An agent does not undo an operator's drain by reporting healthy.
            if (cur && cur->health == "draining" && health == "healthy") health.clear();
          }
          if (!health.empty()) {
            auto r = ctl.set_node(name, health, reason, std::nullopt);
            if (!r.ok()) check(r.error(), 404);
          }
          auto st = ctl.heartbeat(name);
          if (!st.ok()) check(st.error(), 404);
          send(res, 200, {{"ok", true}});
        });
  auto node_admin = [this](const std::string& path, std::string health,
                           std::optional<bool> cordon) {
    route("POST", path,
          [this, health, cordon](const httplib::Request& req, httplib::Response& res) {
            auto p = authenticate(req);
            require(p.is_admin(), "drain, undrain or cordon nodes (administrators only)");
            auto body = parse_body(req, {"reason"}, true);
            auto reason = str_field(body, "reason", false, 512);
            if (reason.empty()) reason = "by " + p.subject;
            auto r = ctl.set_node(req.matches[1], health, reason, cordon);
            if (!r.ok()) check(r.error(), 404);
            send(res, 200, node_json(r.value()));
          });
  };
  node_admin("/api/v1/nodes/{name}/drain", "draining", std::nullopt);
  node_admin("/api/v1/nodes/{name}/undrain", "healthy", std::nullopt);
  node_admin("/api/v1/nodes/{name}/cordon", "", true);
  node_admin("/api/v1/nodes/{name}/uncordon", "", false);

  // ---- accounting ----
  auto period = [](const httplib::Request& req, core::Time now) {
    auto to = query_int(req, "to", now, 0, INT64_MAX / 2);
    auto from = query_int(req, "from", to - 7 * core::kDay, 0, INT64_MAX / 2);
    if (from >= to) throw HttpError{400, "from", "must be before to"};
    return std::pair<core::Time, core::Time>(from, to);
  };
  // Ledger entries plus the open segments of jobs running now, clipped to [from, to).
  auto usage_entries = [this](core::Time from, core::Time to) {
    auto entries = store.ledger(from, to);
    store::JobQuery q;
    q.states = {"starting", "running", "preempting"};
    q.limit = 100000;
    const auto now = ctl.now();
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
  };
  route("GET", "/api/v1/usage",
        [this, period, usage_entries](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {"from", "to", "by", "budget"});
          auto [from, to] = period(req, ctl.now());
          auto by = req.has_param("by") ? req.get_param_value("by") : std::string("budget");
          if (by != "budget" && by != "user") throw HttpError{400, "by", "must be budget or user"};
          auto scope = req.has_param("budget") ? req.get_param_value("budget") : std::string("/");
          if (!valid_budget_path(scope)) throw HttpError{400, "budget", "not a budget path"};
          require(can_see_budget_usage(p, scope), "see usage of " + scope);
          std::map<std::string, std::pair<double, double>> rows;  // key -> (allocated, unallocated)
          for (const auto& e : usage_entries(from, to)) {
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
          json out = {{"from", from}, {"to", to}, {"by", by}, {"rows", json::array()}};
          for (const auto& [k, v] : rows) {
            out["rows"].push_back({{by == "user" ? "user" : "budget", k},
                                   {"allocated_gpu_seconds", v.first},
                                   {"unallocated_gpu_seconds", v.second}});
          }
          send(res, 200, out);
        });
  route("GET", "/api/v1/report",
        [this, period, usage_entries](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {"from", "to", "budget"});
          auto [from, to] = period(req, ctl.now());
          auto scope = req.has_param("budget") ? req.get_param_value("budget") : std::string("/");
          if (!valid_budget_path(scope)) throw HttpError{400, "budget", "not a budget path"};
          require(can_see_budget_usage(p, scope), "see the report of " + scope);
          auto snap = ctl.snapshot();
          const auto& tree = *snap->budgets;
          std::map<std::string, std::pair<double, double>> used;
          for (const auto& e : usage_entries(from, to)) {
            if (e.end <= e.start) continue;
            const double gs =
                static_cast<double>(e.milli) * static_cast<double>(e.end - e.start) / 1000.0;
            std::string path = e.budget;
            for (;;) {
              (e.allocated ? used[path].first : used[path].second) += gs;
              if (path == "/") break;
              auto slash = path.rfind('/');
              path = slash == 0 ? "/" : path.substr(0, slash);
            }
          }
          const double secs = static_cast<double>(to - from);
          json out = {{"from", from}, {"to", to}, {"budgets", json::array()}};
          for (core::BudgetId id = 0; id < tree.size(); ++id) {
            const auto& n = tree.node(id);
            if (n.removed || !path_within(n.path, scope)) continue;
            double owed = 0;
            for (const auto& c : snap->clusters) {
              auto cid = snap->cluster_ids.at(c.name);
              owed += tree.allocated_fraction(id, cid) * static_cast<double>(c.capacity) / 1000.0 *
                      secs;
            }
            auto u = used[n.path];
            out["budgets"].push_back({{"budget", n.path},
                                      {"owed_gpu_seconds", owed},
                                      {"allocated_gpu_seconds", u.first},
                                      {"unallocated_gpu_seconds", u.second},
                                      {"delivered_fraction", owed > 0 ? u.first / owed : 0.0}});
          }
          send(res, 200, out);
        });

  // ---- the agent protocol ----
  route("GET", "/api/v1/agent/nodes/{name}/assignments",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          const std::string name = req.matches[1];
          require(can_act_for_node(p, name), "act for node " + name);
          if (!store.node(name)) throw HttpError{404, "name", "no such node"};
          auto snap = ctl.snapshot();
          json out = {{"node", name}, {"run", json::array()}, {"stop", json::array()}};
          auto it = snap->assignments.find(name);
          if (it != snap->assignments.end()) {
            for (const auto& r : it->second.run) {
              auto spec = json::parse(r.spec_json, nullptr, false);
              out["run"].push_back(
                  {{"job", r.job},
                   {"state", r.state},
                   {"gpus", r.gpus},
                   {"gpu_milli", r.milli},
                   {"command",
                    spec.is_object() ? spec.value("command", json::array()) : json::array()}});
            }
            out["stop"] = it->second.stop;
          }
          send(res, 200, out);
        });
  route("POST", "/api/v1/agent/nodes/{name}/reports",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          const std::string name = req.matches[1];
          require(can_act_for_node(p, name), "act for node " + name);
          auto body = parse_body(req, {"reports"});
          auto reps = body.find("reports");
          if (reps == body.end() || !reps->is_array() || reps->size() > 1000) {
            throw HttpError{400, "reports", "required: a list of at most 1000 reports"};
          }
          // Validate all before applying any.
          for (const auto& r : *reps) {
            if (!r.is_object()) throw HttpError{400, "reports", "entries must be objects"};
            for (const auto& [k, v] : r.items()) {
              if (k != "job" && k != "event" && k != "exit_code") {
                throw HttpError{400, "reports." + k, "unknown field"};
              }
            }
            if (!r.contains("job") || !r["job"].is_number_unsigned()) {
              throw HttpError{400, "reports.job", "required: a job id"};
            }
            auto ev = r.value("event", "");
            if (ev != "started" && ev != "exited" && ev != "preempted") {
              throw HttpError{400, "reports.event", "must be started, exited or preempted"};
            }
            if (r.contains("exit_code") && !r["exit_code"].is_number_integer()) {
              throw HttpError{400, "reports.exit_code", "must be an integer"};
            }
          }
          json out = {{"results", json::array()}};
          for (const auto& r : *reps) {
            auto x = ctl.agent_report(name, r["job"].get<JobId>(), r["event"].get<std::string>(),
                                      r.value("exit_code", 0));
            if (x.ok()) {
              out["results"].push_back({{"job", r["job"]}, {"state", x.value().state}});
            } else {
              out["results"].push_back({{"job", r["job"]}, {"error", x.error().message()}});
            }
          }
          send(res, 200, out);
        });

  // ---- tokens ----
  route("GET", "/api/v1/tokens", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    require(p.is_admin(), "list tokens (administrators only)");
    json out = {{"tokens", json::array()}};
    for (const auto& t : store.tokens()) {
      out["tokens"].push_back({{"id", t.id},
                               {"name", t.name},
                               {"role", t.role},
                               {"subject", t.subject},
                               {"scope", t.scope},
                               {"created", t.created},
                               {"revoked", t.revoked != 0}});
    }
    send(res, 200, out);
  });
  route("POST", "/api/v1/tokens", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    auto body = parse_body(req, {"name", "role", "subject", "scope"});
    auto name = str_field(body, "name", true);
    auto role = str_field(body, "role", true);
    auto subject = str_field(body, "subject", false);
    auto scope = str_field(body, "scope", false, 512);
    if (!valid_name(name)) throw HttpError{400, "name", "must be a name"};
    if (!valid_role(role)) throw HttpError{400, "role", "must be admin, manager, user or agent"};
    if (subject.empty()) subject = name;
    if (!valid_name(subject)) throw HttpError{400, "subject", "must be a user name"};
    if (role == "manager" && !valid_budget_path(scope)) {
      throw HttpError{400, "scope", "a manager token needs the budget path it manages"};
    }
    if (role == "agent" && !valid_name(scope)) {
      throw HttpError{400, "scope", "an agent token needs the name of its node"};
    }
    if ((role == "admin" || role == "user") && !scope.empty()) {
      throw HttpError{400, "scope", "only manager and agent tokens have a scope"};
    }
    require(p.is_admin(), "create tokens (administrators only)");
    auto secret = create_token(store, name, role, subject, scope, ctl.now());
    if (!secret.ok()) check(secret.error(), 409);
    auto rec = store.token_by_hash(sha256_hex(secret.value()));
    send(res, 201,
         {{"id", rec ? rec->id : 0},
          {"token", secret.value()},
          {"role", role},
          {"subject", subject},
          {"scope", scope}});
  });
  route("DELETE", "/api/v1/tokens/{id}",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          require(p.is_admin(), "revoke tokens (administrators only)");
          std::int64_t id = 0;
          try {
            id = std::stoll(req.matches[1]);
          } catch (...) {
            throw HttpError{404, "id", "no such token"};  // out of range: no token has it
          }
          bool found = false;
          for (const auto& t : store.tokens()) found = found || t.id == id;
          if (!found) throw HttpError{404, "id", "no such token"};
          auto st = store.write({op::RevokeToken{id, ctl.now()}});
          if (!st.ok()) check(st.error(), 503);
          {
            std::lock_guard lk(token_mu);
            token_cache.clear();
          }
          send(res, 200, {{"id", id}, {"revoked", true}});
        });
}

ApiServer::ApiServer(store::Store& store, Controller& controller, ApiOptions options)
    : impl_(std::make_unique<Impl>(store, controller, std::move(options))) {}

ApiServer::~ApiServer() {
  stop();
}

std::vector<Route> ApiServer::routes() {
  std::vector<Route> out;
  for (const auto& r : kRoutes) out.push_back({r[0], r[1]});
  return out;
}

core::Result<int> ApiServer::start() {
  auto& o = impl_->opts;
  if (!o.tls_cert.empty() || !o.tls_key.empty()) {
    if (o.tls_cert.empty() || o.tls_key.empty()) {
      return Error{"tls", "give both a certificate and a key"};
    }
    auto s = std::make_unique<httplib::SSLServer>(o.tls_cert.c_str(), o.tls_key.c_str());
    if (!s->is_valid()) return Error{"tls", "cannot load the certificate or key"};
    impl_->svr = std::move(s);
  } else {
    impl_->svr = std::make_unique<httplib::Server>();
  }
  auto& svr = *impl_->svr;
  const int threads = o.threads;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr.set_payload_max_length(o.max_body);
  svr.set_keep_alive_max_count(1 << 20);
  svr.set_keep_alive_timeout(30);
  svr.set_read_timeout(30, 0);
  svr.set_tcp_nodelay(true);
  impl_->install();
  // Everything under /api/v1 that matched no route, and any method not served.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) {
      Impl::send_error(res, 404, "path", "no route " + req.method + " " + req.path);
    } else if (res.status == 413) {
      Impl::send_error(res, 413, "body", "too large");
    } else if (res.body.empty()) {
      Impl::send_error(res, res.status, "", "request refused");
    }
  });
  int port =
      o.port == 0 ? svr.bind_to_any_port(o.host) : (svr.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port <= 0) return Error{"port", "cannot listen on " + o.host + ":" + std::to_string(o.port)};
  impl_->thread = std::thread([this] { impl_->svr->listen_after_bind(); });
  return port;
}

void ApiServer::stop() {
  if (impl_->svr) impl_->svr->stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace allot::server
