// The API server's insides, shared by the files that register its routes (api_*.cpp; one file
// per group of routes, listed in install()). Not for use outside src/server/api*.cpp.
#pragma once

#include <httplib.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/api.h"
#include "server/api_fields.h"
#include "server/api_json.h"
#include "server/auth.h"
#include "server/change_feed.h"
#include "server/edge.h"
#include "server/event_server.h"
#include "server/http_server.h"
#include "server/job_array.h"
#include "server/job_spec.h"
#include "server/logs.h"
#include "server/prometheus.h"
#include "server/shape_history.h"
#include "server/telemetry_series.h"
#include "server/tls_connections.h"

namespace allot::server {

using json = nlohmann::json;
namespace op = store::op;

// The regular expression cpp-httplib matches for an OpenAPI path ("/jobs/{id}").
std::string to_regex(const std::string& path);

// What the routes share: the store, the controller, the token cache, the log store and the
// submission quota. Handlers run on the HTTP workers (and submit() on the event loops) at once:
// what they share is either safe to share (store, controller, quota) or under token_mu.
struct ApiServer::Impl {
  // Set before serving starts and only read while it serves. Null when the Impl only lists its
  // routes (ApiServer::routes()).
  store::Store* store;  // thread-safe itself
  Controller* ctl;      // thread-safe itself
  ApiOptions opts;
  std::unique_ptr<httplib::Server> svr;    // HTTPS: serves; HTTP: a RequestProcessor for `events`
  std::unique_ptr<EventServer> events;     // plain HTTP
  std::shared_ptr<AssignmentWatch> watch;  // plain HTTP: agents' held assignment requests
  bool watch_closed = false;               // stop() closed it (and left the controller)
  std::thread thread;                      // HTTPS: the accepting thread
  std::unique_ptr<TlsConnections> tls_connections;  // HTTPS: open connections per address
  std::unique_ptr<LogStore> logs;  // thread-safe itself; null without a logs directory
  std::vector<Route> routes;       // every route install() registered, in order

  // Thread-safe themselves.
  SubmitQuota quota;
  TelemetrySeries telemetry_series;  // running jobs' recent points, for the sparklines
  ShapeHistory shape_history;        // recent jobs per budget and shape, for submission hints
  RequestLimiter request_limiter;

  std::mutex token_mu;
  // Guarded by token_mu.
  std::unordered_map<std::string, Principal> token_cache;  // secret -> principal

  Impl(store::Store* s, Controller* c, ApiOptions o)
      : store(s),
        ctl(c),
        opts(std::move(o)),
        quota(opts.submit_limits),
        request_limiter(opts.request_limits.max_tracked) {
    if (!opts.logs_dir.empty()) logs = std::make_unique<LogStore>(opts.logs_dir);
  }

  json node_out(const store::NodeRecord& n) {
    json out = node_json(n, ctl->node_telemetry(n.name));
    // GPUs being re-partitioned (dynamic MIG, docs/policy.md section 7.5): ordered, not yet
    // reported made by the node's agent; they take no work meanwhile.
    json re = json::array();
    const auto snap = ctl->snapshot();
    if (auto a = snap->assignments.find(n.name); a != snap->assignments.end()) {
      for (const auto& m : a->second.mig_layouts) {
        re.push_back({{"gpu", m.gpu}, {"profiles", m.profiles}});
      }
    }
    out["mig_reconfiguring"] = std::move(re);
    return out;
  }
  // An agent call: checks the token may act for the node and that the node exists, and counts as
  // contact with it.
  std::string agent_call(const httplib::Request& req, const Principal& p) {
    std::string name = req.matches[1];
    require(can_act_for_node(p, name), "act for node " + name);
    if (!ctl->contact(name)) throw HttpError{404, "name", "no such node " + name};
    return name;
  }

  static void send_error(httplib::Response& res, int status, const std::string& field,
                         const std::string& reason) {
    json e = {{"error", {{"status", status}, {"field", field}, {"reason", reason}}}};
    res.status = status;
    res.set_content(dump_json(e), "application/json");
  }
  static void send(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(dump_json(body), "application/json");
  }
  static void send_text(httplib::Response& res, int status, const std::string& body) {
    res.status = status;
    res.set_content(body, "application/json");
  }

  // Records a token's minting or revocation in the audit log; a failed write is said in the
  // server's log but does not undo the change it records.
  void audit_token(const Principal& p, const std::string& old_value, const std::string& new_value) {
    store::AuditEntry e{0, ctl->now(), p.subject, "/", "token", old_value, new_value, p.token_id};
    auto st = store->write({op::AddAudit{e}});
    if (!st.ok()) std::fprintf(stderr, "allot: audit: %s\n", st.error().message().c_str());
  }

  // The roles that may make one kind of request only, and the route that admits them: a metrics
  // token reads GET /metrics, a service token reports its service's load (`Narrow::Any`: the
  // connection's gate, before the route is known). Every other route refuses them with 403.
  enum class Narrow { None, Metrics, Service, Any };
  // `charge`: the request counts toward its principal's request rate, or, refused for want of a
  // valid token, toward its address's (request_limits.h; 429 beyond either).
  Principal authenticate(const httplib::Request& req, Narrow narrow = Narrow::None,
                         bool charge = true) {
    Principal p;
    try {
      p = identify(req, narrow);
    } catch (const HttpError& e) {
      if (charge && e.status == 401) limit_unauthenticated(req);
      throw;
    }
    if (charge) limit_principal(p, req);
    return p;
  }
  // 429 when the address of a request without a valid token is over its rate.
  void limit_unauthenticated(const httplib::Request& req) {
    const auto& l = opts.request_limits;
    if (const int wait =
            request_limiter.take("address " + req.remote_addr, 1, l.unauthenticated_rate,
                                 l.unauthenticated_burst, RequestLimiter::Clock::now())) {
      throw HttpError{429, "",
                      req.remote_addr + " is over the rate of requests without a valid token: " +
                          number_text(l.unauthenticated_rate) + " a second",
                      wait};
    }
  }
  // 429 when `p` is over its request rate (administrators are not limited): a bucket per token
  // subject, and per node for agents (an agent token acts for one node; several may share a
  // subject). /usage, /report and /advice cost more than one request.
  void limit_principal(const Principal& p, const httplib::Request& req) {
    if (p.is_admin()) return;
    const auto& l = opts.request_limits;
    const bool expensive = req.path.ends_with("/usage") || req.path.ends_with("/report") ||
                           req.path.ends_with("/advice");
    const bool agent = p.role == "agent";
    if (const int wait = request_limiter.take(agent ? "node " + p.scope : "principal " + p.subject,
                                              expensive ? l.expensive_cost : 1, l.rate, l.burst,
                                              RequestLimiter::Clock::now())) {
      throw HttpError{429, "",
                      (agent ? "the agent of " + p.scope : p.subject) +
                          " is over the request rate: " + number_text(l.rate) +
                          " a second, bursts of " + number_text(l.burst) +
                          (expensive ? " (this route costs " + number_text(l.expensive_cost) + ")"
                                     : std::string()),
                      wait};
    }
  }
  Principal identify(const httplib::Request& req, Narrow narrow) {
    auto h = req.get_header_value("Authorization");
    if (h.size() < 8 || h.compare(0, 7, "Bearer ") != 0) {
      throw HttpError{401, "Authorization", "missing: send 'Authorization: Bearer <token>'"};
    }
    auto secret = h.substr(7);
    if (secret.size() > 256) throw HttpError{401, "Authorization", "invalid token"};
    // Valid tokens seen since the last revocation, by secret: the store keeps only hashes, and
    // this spares a SHA-256 per request (the secret is in this process's memory anyway while
    // the request is). Bounded; cleared by every revocation.
    Principal p;
    bool cached = false;
    {
      std::lock_guard lk(token_mu);
      auto it = token_cache.find(secret);
      if (it != token_cache.end()) {
        p = it->second;
        cached = true;
      }
    }
    if (!cached) {
      auto t = store->token_by_hash(sha256_hex(secret));
      if (!t || t->revoked) throw HttpError{401, "Authorization", "invalid or revoked token"};
      p = Principal{t->id, t->role, t->subject, t->scope, {}};
      std::lock_guard lk(token_mu);
      if (token_cache.size() >= 10000) token_cache.clear();
      token_cache.emplace(std::move(secret), p);
    }
    if (p.role == "metrics" && narrow != Narrow::Metrics && narrow != Narrow::Any) {
      throw HttpError{403, "Authorization", "a metrics token only reads GET /metrics"};
    }
    if (p.role == "service" && narrow != Narrow::Service && narrow != Narrow::Any) {
      throw HttpError{403, "Authorization",
                      "a service token only reports its service's load: POST "
                      "/api/v1/services/" +
                          p.scope + "/load"};
    }
    // What it manages follows the budgets' owners as they are now.
    if (p.role == "manager" || p.role == "user") {
      auto snap = ctl->snapshot();
      add_managed(p, snap->owned_by);
    }
    return p;
  }

  // The body's JSON object (api_fields.h), of `known` fields only.
  static json parse_body(const httplib::Request& req, const std::set<std::string>& known,
                         bool empty_ok = false) {
    return server::parse_body(req.body, known, empty_ok);
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
  static void check(const core::Error& e, int status = 400) {
    throw HttpError{status, e.field, e.reason};
  }

  // Runs fn(); what it throws becomes the answer in `res` (an HttpError's status, field and
  // reason, or 500).
  template <typename F>
  static void answering(httplib::Response& res, F fn) {
    try {
      fn();
    } catch (const HttpError& e) {
      send_error(res, e.status, e.field, e.reason);
      if (e.retry_after > 0) res.set_header("Retry-After", std::to_string(e.retry_after));
    } catch (const std::exception& e) {
      send_error(res, 500, "", e.what());
    } catch (...) {
      send_error(res, 500, "", "internal error");
    }
  }

  template <typename F>
  void route(const std::string& method, const std::string& path, F fn) {
    auto handler = [fn, this, method, path](const httplib::Request& req, httplib::Response& res) {
      const auto began = std::chrono::steady_clock::now();
      answering(res, [&] { fn(req, res); });
      if (opts.prometheus) opts.prometheus->request(method, path, res.status, seconds_since(began));
    };
    routes.push_back({method, path});
    if (!svr) return;  // listing only
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
    auto j = store->job(id);
    if (!j || !can_see_job(p, *j)) throw HttpError{404, "id", "no such job"};
    return *j;
  }
  // The edge's checks (edge.h) for a request that does not pass through cpp-httplib's routing.
  static void refuse_at_edge(const httplib::Request& req) {
    if (auto why = check_request(req)) throw HttpError{400, why->field, why->reason};
  }
  static void require(bool ok, const std::string& what) {
    if (!ok) throw HttpError{403, "", "not allowed: " + what};
  }
  // Narrows a job listing to the jobs `p` may see (docs/api.md): administrators all, managers
  // those in the budgets they manage and their own, users their own. A user asking for another
  // owner's jobs (`owner_asked`) is refused. GET /jobs and GET /queue both list through it.
  static void only_visible_jobs(const Principal& p, const std::string& owner_asked,
                                store::JobQuery& q) {
    if (p.is_admin()) return;
    if (p.manages.empty()) {
      if (!owner_asked.empty() && owner_asked != p.subject) {
        throw HttpError{403, "owner", "users see only their own jobs"};
      }
      q.owner = p.subject;
    } else {
      q.budgets_within = p.manages;
      q.owner_or_within = p.subject;
    }
  }
  // Usage and reports: administrators read all, managers their subtrees, and everyone the
  // budgets they belong to (their own standing, like Slurm's sshare).
  static bool can_read_usage(const Principal& p, const std::string& scope, const Members& members) {
    return can_see_budget_usage(p, scope) ||
           (p.is_human() && !p.subject.empty() && is_member(members, scope, p.subject));
  }
  // The scope of a usage or report request that names none: everything for administrators, else
  // the first budget the caller manages, else the first it belongs to; so that a plain request
  // answers with what its caller may see rather than a 403 for "/".
  static std::string default_scope(const Principal& p, const Members& members) {
    if (p.is_admin()) return "/";
    if (!p.manages.empty()) return p.manages.front();
    if (p.is_human()) {
      for (const auto& [budget, users] : members) {
        if (std::find(users.begin(), users.end(), p.subject) != users.end()) return budget;
      }
    }
    return "/";
  }
  static void not_agent(const Principal& p) {
    require(p.role != "agent", "node agent tokens only use the agent and heartbeat routes");
  }

  // POST /api/v1/jobs. Everything is checked on the caller's thread; the job is then written
  // and `reply` is called from the store's thread once it is durable (201), or at once when it is
  // refused. A retried submit (its idempotency key taken) answers with the job it made (200).
  // Reserves `n` waiting jobs of `who` (not an administrator) under their caps (quota.h), from
  // the newest snapshot; throws the 429 naming the cap it would pass.
  std::shared_ptr<WaitingHold> reserve_waiting(const std::string& who, const SubmitLimits& limits,
                                               const std::string& waiting_in, std::int64_t n);
  void submit(const httplib::Request& req, EventServer::Reply reply);
  // The submit fields that are not the job's spec (docs/api.md), taken out of `body`: hold,
  // after and after_any (jobs `p` can see) and array. Errors name their field.
  struct GateFields {
    bool hold = false;
    std::vector<JobId> after, after_any;
    std::optional<ArraySpec> array;
  };
  GateFields gate_fields(const Principal& p, json& body);

  // Registers every route: one line per group below, each group in its own file.
  void install();
  void install_identity_routes();   // api_tokens.cpp: health, whoami
  void install_job_routes();        // api_jobs.cpp
  void install_job_log_routes();    // api_logs.cpp: reading a job's logs
  void install_budget_routes();     // api_budgets.cpp
  void install_node_routes();       // api_nodes.cpp
  void install_usage_routes();      // api_usage.cpp: usage and report
  void install_advice_routes();     // api_advice.cpp: right-sizing advice from telemetry
  void install_service_routes();    // api_services.cpp: inference services
  void install_standing_routes();   // api_standing.cpp: each budget's standing (allot me)
  void install_agent_routes();      // api_agent.cpp: the agent protocol
  void install_agent_log_routes();  // api_logs.cpp: agents uploading logs
  void install_token_routes();      // api_tokens.cpp
  void install_dashboard_routes();  // api_dashboard.cpp: the web dashboard, and its views
  void install_view_routes();       // api_views.cpp: read-only views the dashboard needs
  void install_event_routes();      // api_events.cpp: what changed, as server-sent events
  // Plain HTTP: GET /api/v1/events/stream on the event loops, once `events` exists.
  void serve_event_stream();
  // Plain HTTP: the agents' watches (GET .../assignments?wait=S) held on the event loops.
  void serve_assignment_watch();
  // A watch's query (wait=SECONDS&since=VERSION): how long the agent waits for a change from
  // the version it saw (`wait` at most max_wait; over HTTPS it is answered at once).
  struct WatchAsk {
    int wait = 0;
    std::string since;
  };
  static WatchAsk watch_query(const httplib::Request& req, int max_wait);
  // A node's assignments as the agent protocol answers them, with their version.
  json assignments_json(const Snapshot& snap, const std::string& node) const;
  // Whether `node` may still write logs and reports for run `run` of job `id`: it holds the run
  // now, or held it and the run ended at most opts.agent_write_grace_seconds ago (api_logs.cpp).
  bool writes_for_run(const std::string& node, JobId id, int run);
};

}  // namespace allot::server
