#include "server/api.h"

#include <httplib.h>
#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_map>

#include "server/auth.h"
#include "server/edge.h"
#include "server/event_server.h"
#include "server/http_server.h"
#include "server/job_spec.h"
#include "server/logs.h"
#include "server/metrics.h"
#include "server/prometheus.h"
#include "server/telemetry.h"

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

// JSON string literal of `v` (UTF-8 kept as is; quotes, backslashes and controls escaped; bytes
// that are not UTF-8, which a store written before the edge checked them may hold, as U+FFFD).
void append_quoted(std::string& out, std::string_view v) {
  out += '"';
  for (std::size_t i = 0; i < v.size(); ++i) {
    const char c = v[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      const auto n = utf8_sequence(v.substr(i));
      if (n == 0) {
        out += "\xef\xbf\xbd";
      } else {
        out.append(v.substr(i, n));
        i += n - 1;
      }
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      static const char* hex = "0123456789abcdef";
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\r') {
        out += "\\r";
      } else {
        out += "\\u00";
        out += hex[u >> 4];
        out += hex[u & 15];
      }
    } else {
      out += c;
    }
  }
  out += '"';
}

// A job as the API shows it, written straight to text: the canonical spec and the placement are
// stored as JSON already and go in as they are (a submit storm encodes thousands a second).
void append_job(std::string& out, const store::JobRecord& j) {
  auto field = [&](const char* name) {
    out += out.back() == '{' ? "\"" : ",\"";
    out += name;
    out += "\":";
  };
  auto text = [&](const char* name, std::string_view v) {
    field(name);
    append_quoted(out, v);
  };
  auto number = [&](const char* name, std::int64_t v) {
    field(name);
    out += std::to_string(v);
  };
  auto raw = [&](const char* name, const std::string& v, const char* fallback) {
    field(name);
    out += v.empty() ? std::string(fallback) : v;  // the server wrote it: valid JSON
  };
  out += '{';
  number("id", static_cast<std::int64_t>(j.id));
  text("name", j.name);
  text("owner", j.owner);
  text("budget", j.budget);
  text("state", j.state);
  text("reason", j.reason);
  number("submit_time", j.submit_time);
  number("updated_at", j.updated_at);
  text("idempotency_key", j.idempotency_key);
  number("runs", j.runs);
  field("allocated");
  out += j.allocated ? "true" : "false";
  raw("spec", j.spec_json, "{}");
  if (j.runs > 0) {
    text("cluster", j.cluster);
    raw("placement", j.placement_json, "[]");
    number("run_start", j.run_start);
    number("protected_until", j.protected_until);
  }
  field("exit_code");
  out += j.exit_code ? std::to_string(*j.exit_code) : std::string("null");
  out += '}';
}

// Who did something, for the records that say so: the token's subject and the token's id (a
// subject may hold several tokens; revoking the right one needs the id).
std::string acting(const Principal& p) {
  return p.subject + " (token " + std::to_string(p.token_id) + ")";
}

std::string token_words(std::int64_t id, const std::string& name, const std::string& role,
                        const std::string& subject, const std::string& scope) {
  return "token " + std::to_string(id) + " " + name + ": " + role + " for " + subject +
         (scope.empty() ? "" : " in " + scope);
}

std::string job_text(const store::JobRecord& j) {
  std::string out;
  out.reserve(512 + j.spec_json.size() + j.placement_json.size());
  append_job(out, j);
  return out;
}

json parsed_or(const std::string& text, const json& fallback) {
  auto j = json::parse(text, nullptr, false);
  return j.is_discarded() ? fallback : j;
}

// `gpus`: the node's latest GPU telemetry ({"time": ..., "gpus": [...]}), "" if none.
json node_json(const store::NodeRecord& n, const std::string& gpus) {
  auto labels = json::parse(n.labels_json, nullptr, false);
  return {{"name", n.name},
          {"address", n.address},
          {"devices", parsed_or(n.devices_json, json::array())},
          {"agent", parsed_or(n.agent_json, json::object())},
          {"telemetry", gpus.empty() ? json() : parsed_or(gpus, json())},
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
  int retry_after = 0;  // seconds, sent as Retry-After (429)
};

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Field checks for nested objects of agent bodies; `where` prefixes the field ("devices[2].").
// `name`: the object's own field name ("devices[2]"), "" for the body.
void known_fields(const json& o, const std::set<std::string>& known, const std::string& name) {
  if (!o.is_object()) throw HttpError{400, name.empty() ? "body" : name, "must be an object"};
  for (const auto& [k, v] : o.items()) {
    if (!known.count(k)) throw HttpError{400, name.empty() ? k : name + "." + k, "unknown field"};
  }
}
std::optional<double> number_in(const json& o, const std::string& f, double lo, double hi,
                                const std::string& where, bool required = false) {
  auto it = o.find(f);
  if (it == o.end()) {
    if (required) throw HttpError{400, where + f, "required"};
    return std::nullopt;
  }
  if (!it->is_number() || it->get<double>() < lo || it->get<double>() > hi) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "must be a number between %g and %g", lo, hi);
    throw HttpError{400, where + f, buf};
  }
  return it->get<double>();
}
std::optional<std::int64_t> integer_in(const json& o, const std::string& f, std::int64_t lo,
                                       std::int64_t hi, const std::string& where,
                                       bool required = false) {
  auto it = o.find(f);
  if (it == o.end()) {
    if (required) throw HttpError{400, where + f, "required"};
    return std::nullopt;
  }
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) ||
      it->get<std::int64_t>() < lo || it->get<std::int64_t>() > hi) {
    throw HttpError{
        400, where + f,
        "must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi)};
  }
  return it->get<std::int64_t>();
}
std::string string_in(const json& o, const std::string& f, std::size_t max,
                      const std::string& where, bool required = false) {
  auto it = o.find(f);
  if (it == o.end()) {
    if (required) throw HttpError{400, where + f, "required"};
    return "";
  }
  if (!it->is_string() || it->get<std::string>().size() > max) {
    throw HttpError{400, where + f,
                    "must be a string of at most " + std::to_string(max) + " characters"};
  }
  for (unsigned char c : it->get<std::string>()) {
    if (c < 0x20 || c == 0x7f)
      throw HttpError{400, where + f, "must not contain control characters"};
  }
  return it->get<std::string>();
}
const json& list_in(const json& o, const std::string& f, std::size_t max,
                    const std::string& where) {
  static const json empty = json::array();
  auto it = o.find(f);
  if (it == o.end()) return empty;
  if (!it->is_array() || it->size() > max) {
    throw HttpError{400, where + f,
                    "must be a list of at most " + std::to_string(max) + " entries"};
  }
  return *it;
}

// Each entry of the list `f` of `o` (at most `max`), which must be an object of `known` fields;
// `fn(entry, prefix)` gets the prefix that names its fields ("devices[2].").
template <typename F>
void each_entry(const json& o, const std::string& f, std::size_t max, const std::string& where,
                const std::set<std::string>& known, F fn) {
  const auto& list = list_in(o, f, max, where);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto name = where + f + "[" + std::to_string(i) + "]";
    known_fields(list[i], known, name);
    fn(list[i], name + ".");
  }
}

constexpr std::int64_t kMaxMib = 16LL * 1024 * 1024;  // 16 TiB
constexpr double kMinShare = 1e-6, kMaxShare = 1e6;   // a budget's share (POST /budgets)
constexpr std::size_t kMaxJsonDepth = 32;             // arrays and objects in a request body
// GET /report keeps an hourly series per cluster (two) and per leaf budget in scope (two) over
// its period: at most a leap year, and at most this many hourly values in all (64 MiB).
constexpr core::Duration kMaxReportPeriod = 366 * core::kDay;
constexpr std::size_t kMaxReportValues = std::size_t{8} << 20;

// The node registration body's agent fields, validated; they become the record's JSON columns.
void parse_agent_fields(const json& body, store::NodeRecord& n) {
  if (body.contains("address")) {
    n.address = string_in(body, "address", 255, "");
    for (unsigned char c : n.address) {
      if (!(std::isalnum(c) || c == '.' || c == '-' || c == ':' || c == '[' || c == ']' ||
            c == '_' || c == '%')) {
        throw HttpError{400, "address", "must be a host name or IP address, optionally with :port"};
      }
    }
  }
  json devices = json::array();
  each_entry(
      body, "devices", 64, "", {"index", "uuid", "name", "memory_mib", "pci_bus_id", "mig"},
      [&](const json& d, const std::string& where) {
        json out = {{"index", integer_in(d, "index", 0, 63, where, true).value()},
                    {"uuid", string_in(d, "uuid", 128, where)},
                    {"name", string_in(d, "name", 128, where)},
                    {"memory_mib", integer_in(d, "memory_mib", 0, kMaxMib, where).value_or(0)},
                    {"pci_bus_id", string_in(d, "pci_bus_id", 64, where)},
                    {"mig", json::array()}};
        each_entry(
            d, "mig", 64, where, {"uuid", "profile", "milli"},
            [&](const json& m, const std::string& mw) {
              out["mig"].push_back({{"uuid", string_in(m, "uuid", 128, mw)},
                                    {"profile", string_in(m, "profile", 32, mw)},
                                    {"milli", integer_in(m, "milli", 1, 1000, mw, true).value()}});
            });
        devices.push_back(std::move(out));
      });
  n.devices_json = devices.dump();
  if (auto a = body.find("agent"); a != body.end()) {
    known_fields(*a, {"version", "backend", "isolation"}, "agent");
    json out = {{"version", string_in(*a, "version", 64, "agent.")},
                {"backend", string_in(*a, "backend", 32, "agent.")},
                {"isolation", string_in(*a, "isolation", 512, "agent.")}};
    n.agent_json = out.dump();
  }
}

// The time a run ended, from the job's events: the run-th start, then the first transition out
// of holding GPUs. nullopt while it runs (or never ran).
std::optional<core::Time> run_end(const std::vector<store::JobEvent>& events, int run) {
  int starts = 0;
  for (const auto& e : events) {
    if (e.to == "starting") {
      ++starts;
      continue;
    }
    if (starts == run && e.to != "running" && e.to != "preempting" && e.to != e.from) {
      return e.time;
    }
  }
  return std::nullopt;
}

}  // namespace

struct ApiServer::Impl {
  // Null when the Impl only lists its routes (ApiServer::routes()).
  store::Store* store;
  Controller* ctl;
  ApiOptions opts;
  std::unique_ptr<httplib::Server> svr;  // HTTPS: serves; HTTP: a RequestProcessor for `events`
  std::unique_ptr<EventServer> events;   // plain HTTP
  std::thread thread;
  std::mutex token_mu;
  std::unordered_map<std::string, Principal> token_cache;  // secret -> principal
  std::unique_ptr<LogStore> logs;
  SubmitQuota quota;

  std::vector<Route> routes;  // every route install() registered, in order

  Impl(store::Store* s, Controller* c, ApiOptions o)
      : store(s), ctl(c), opts(std::move(o)), quota(opts.submit_limits) {
    if (!opts.logs_dir.empty()) logs = std::make_unique<LogStore>(opts.logs_dir);
  }

  json node_out(const store::NodeRecord& n) { return node_json(n, ctl->node_telemetry(n.name)); }
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

  // A metrics token (role "metrics") is refused everywhere but GET /metrics (`metrics_ok`).
  Principal authenticate(const httplib::Request& req, bool metrics_ok = false) {
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
    if (p.role == "metrics" && !metrics_ok) {
      throw HttpError{403, "Authorization", "a metrics token only reads GET /metrics"};
    }
    // What it manages follows the budgets' owners as they are now.
    if (p.role == "manager" || p.role == "user") {
      auto snap = ctl->snapshot();
      add_managed(p, snap->owned_by);
    }
    return p;
  }

  static json parse_body(const httplib::Request& req, const std::set<std::string>& known,
                         bool empty_ok = false) {
    if (req.body.empty() && empty_ok) return json::object();
    refuse_deep(req.body);
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
  // No body of the API nests deeper than a few levels (agent telemetry: 3).
  static void refuse_deep(const std::string& body) {
    if (json_depth(body, kMaxJsonDepth + 1) > kMaxJsonDepth) {
      throw HttpError{400, "body",
                      "nests deeper than " + std::to_string(kMaxJsonDepth) + " arrays or objects"};
    }
  }
  // The edge's checks (edge.h) for a request that does not pass through cpp-httplib's routing.
  static void refuse_at_edge(const httplib::Request& req) {
    if (auto why = check_request(req)) throw HttpError{400, why->field, why->reason};
  }
  static void require(bool ok, const std::string& what) {
    if (!ok) throw HttpError{403, "", "not allowed: " + what};
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
  void submit(const httplib::Request& req, EventServer::Reply reply) {
    httplib::Response res;
    bool written = false;
    answering(res, [&] {
      refuse_at_edge(req);
      auto p = authenticate(req);
      not_agent(p);
      const bool limited = !p.is_admin();
      if (const int wait = limited ? quota.take(p.subject, SubmitQuota::Clock::now()) : 0) {
        const auto& l = quota.limits();
        throw HttpError{429, "",
                        p.subject + " is over the submission rate: " + number_text(l.rate) +
                            " a second, bursts of " + number_text(l.burst),
                        wait};
      }
      refuse_deep(req.body);
      auto body = json::parse(req.body, nullptr, false);
      if (body.is_discarded()) throw HttpError{400, "body", "is not valid JSON"};
      if (body.is_object() && !body.contains("idempotency_key") &&
          req.has_header("Idempotency-Key")) {
        body["idempotency_key"] = req.get_header_value("Idempotency-Key");
      }
      auto snap = ctl->snapshot();
      auto parsed =
          parse_job_request(body, *snap->catalog, snap->cluster_ids, *snap->budgets, snap->policy);
      if (!parsed.ok()) check(parsed.error());
      auto& pj = parsed.value();
      require(can_submit(p, pj.budget, snap->members),
              "submit to " + pj.budget + " (ask its manager to add you as a member)");
      // A request that no node could ever hold is refused now rather than waiting forever. A
      // command left out altogether stays accepted (API clients that run on simulated nodes);
      // one given empty (the CLI sends [] when none follows "--") is a mistake.
      const auto cmd = body.find("command");
      const bool command_empty =
          cmd != body.end() && cmd->is_array() &&
          (cmd->empty() || !(*cmd)[0].is_string() || (*cmd)[0].get<std::string>().empty());
      std::vector<std::string> cluster_names;
      for (const auto& c : snap->clusters) cluster_names.push_back(c.name);
      if (auto fits = check_satisfiable(pj.spec, command_empty, snap->node_shapes, *snap->catalog,
                                        cluster_names);
          !fits.ok()) {
        check(fits.error());
      }
      if (limited) {
        auto w = snap->waiting_by_owner.find(p.subject);
        const std::int64_t waiting = w == snap->waiting_by_owner.end() ? 0 : w->second;
        if (!quota.add_waiting(p.subject, snap->version, waiting)) {
          throw HttpError{429, "",
                          p.subject + " has " + std::to_string(quota.limits().max_waiting) +
                              " jobs waiting, the most allowed: submit more as they start",
                          30};
        }
      }
      // No look-up first: the store's unique (owner, key) index refuses a second job with the
      // key, and only then is the existing job read (a retried submit is the rare case).
      auto job = std::make_shared<std::pair<store::JobRecord, core::JobSpec>>();
      auto& [rec, spec] = *job;
      rec.id = ctl->next_job_id();
      rec.owner = p.subject;
      rec.idempotency_key = pj.idempotency_key;
      rec.name = pj.name;
      rec.budget = pj.budget;
      rec.spec_json = pj.canonical_json;
      rec.state = "pending";
      rec.reason = "submitted";
      rec.submit_time = ctl->now();
      rec.updated_at = rec.submit_time;
      spec = std::move(pj.spec);
      spec.id = rec.id;
      spec.owner = rec.owner;
      spec.submit_time = rec.submit_time;
      // Its creation event ("" -> pending, "submitted", at submit_time) comes with the row.
      store->write_async({op::InsertJob{rec}}, [this, job, reply](core::Status st) {
        httplib::Response res;
        answering(res, [&] {
          auto& [rec, spec] = *job;
          if (st.ok()) {
            send_text(res, 201, job_text(rec));
            ctl->submitted(std::move(rec), std::move(spec));
          } else {
            auto existing = st.error().field == "idempotency_key"
                                ? store->job_by_key(rec.owner, rec.idempotency_key)
                                : std::nullopt;
            if (!existing) throw HttpError{503, "store", st.error().reason};
            if (existing->spec_json != rec.spec_json || existing->budget != rec.budget) {
              throw HttpError{409, "idempotency_key",
                              "already used for job " + std::to_string(existing->id) +
                                  " with a different request"};
            }
            send_text(res, 200, job_text(*existing));
          }
        });
        reply(std::move(res));
      });
      written = true;
    });
    if (!written) reply(std::move(res));
  }

  void install();
  json report(core::Time from, core::Time to, const std::string& scope,
              const std::vector<store::LedgerEntry>& entries);
};

// GET /report: owed and delivered per budget, and the four metrics (server/metrics.h;
// utilization from telemetry).
json ApiServer::Impl::report(core::Time from, core::Time to, const std::string& scope,
                             const std::vector<store::LedgerEntry>& entries) {
  auto snap = ctl->snapshot();
  const auto& tree = *snap->budgets;
  auto ancestors = [](std::string path, auto fn) {
    for (;;) {
      fn(path);
      if (path == "/") break;
      auto slash = path.rfind('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  };
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
  for (const auto& t : store->telemetry_between(from, to)) {
    measured.insert(t.job);
    ancestors(t.budget, [&](const std::string& b) {
      auto& u = util[b];
      u.used += t.used_gpu_seconds;
      u.measured += t.gpu_seconds;
      u.with.insert(t.job);
    });
  }
  for (const auto& e : entries) {
    if (e.end <= e.start) continue;
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
  mi.nodes = store->nodes();
  mi.health = store->node_health(to);
  mi.ledger = entries;
  for (const auto& j : store->jobs_overlapping(from, to)) {
    if (!path_within(j.budget, scope)) continue;
    auto spec = json::parse(j.spec_json, nullptr, false);
    if (!spec.is_object()) continue;
    const auto st = parse_job_status(j.state).value_or(JobStatus::Pending);
    mi.jobs.push_back({j.budget, j.submit_time, is_terminal(st) ? j.updated_at : to,
                       static_cast<double>(spec.value("nodes", 1)) *
                           spec.value("gpus_per_node", 1) * spec.value("gpu_milli", 1000) /
                           1000.0});
  }
  for (core::BudgetId id = 0; id < tree.size(); ++id) {
    const auto& n = tree.node(id);
    if (!tree.valid(id) || !tree.is_leaf(id) || id == tree.root() || !path_within(n.path, scope)) {
      continue;
    }
    auto& f = mi.fractions[n.path];
    for (const auto& [name, cid] : snap->cluster_ids) f[name] = tree.allocated_fraction(id, cid);
  }
  {
    std::set<std::string> clusters;
    for (const auto& n : mi.nodes) clusters.insert(n.cluster);
    const auto hours = static_cast<std::size_t>((to - from + core::kHour - 1) / core::kHour);
    const std::size_t series = 2 * clusters.size() + 2 * mi.fractions.size();
    if (series > 0 && hours > kMaxReportValues / series) {
      const auto days = kMaxReportValues / series / 24;
      throw HttpError{400, "from",
                      "a report over " + std::to_string(mi.fractions.size()) + " budgets and " +
                          std::to_string(clusters.size()) + " clusters covers at most " +
                          std::to_string(days) +
                          " days: ask for a shorter period or a narrower budget"};
    }
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
    double owed = 0;
    for (const auto& c : snap->clusters) {
      auto cid = snap->cluster_ids.at(c.name);
      owed += tree.allocated_fraction(id, cid) * static_cast<double>(c.capacity) / 1000.0 * secs;
    }
    const auto u = used[n.path];
    const auto& ut = util[n.path];
    const auto bm = m.budgets.find(n.path);
    const bool has = bm != m.budgets.end();
    out["budgets"].push_back(
        {{"budget", n.path},
         {"owed_gpu_seconds", owed},
         {"allocated_gpu_seconds", u.first},
         {"unallocated_gpu_seconds", u.second},
         {"delivered_fraction", owed > 0 ? u.first / owed : 0.0},
         {"demand_gpu_seconds", has ? bm->second.demand : 0.0},
         {"owed_capped_gpu_seconds", has ? bm->second.owed : 0.0},
         {"impact", has && bm->second.owed > 0 ? json(bm->second.impact()) : json()},
         {"utilization", ratio(ut.used, ut.measured)},
         {"jobs_measured", ut.with.size()},
         {"jobs_without_telemetry", ut.without.size()}});
  }
  return out;
}

void ApiServer::Impl::install() {
  route("GET", "/api/v1/health", [this](const auto&, auto& res) {
    auto snap = ctl->snapshot();
    send(res, 200, {{"status", "ok"}, {"cycles", snap ? snap->cycles : 0}});
  });
  // Prometheus (server/prometheus.h): an admin or a metrics token.
  route("GET", "/metrics", [this](const auto& req, auto& res) {
    auto p = authenticate(req, true);
    require(p.is_admin() || p.role == "metrics", "read metrics (an admin or metrics token)");
    if (!opts.prometheus) throw HttpError{503, "", "metrics are not enabled on this server"};
    res.set_content(scrape(*opts.prometheus, *store, *ctl), kPrometheusContentType);
  });
  route("GET", "/api/v1/whoami", [this](const auto& req, auto& res) {
    auto p = authenticate(req);
    send(res, 200, {{"role", p.role}, {"subject", p.subject}, {"scope", p.scope}});
  });

  // ---- jobs ----
  // Answered by submit(): from the event loop at once, without waiting for the commit; here for
  // HTTPS (a thread per connection) and any such request the loop passes on (with a query).
  route("POST", "/api/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    std::promise<httplib::Response> answer;
    auto answered = answer.get_future();
    submit(req, [&answer](httplib::Response r) { answer.set_value(std::move(r)); });
    res = answered.get();
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
    if (!q.budget.empty()) {
      // A budget without children (now or ever: removed ones included) is matched exactly.
      const auto& tree = *ctl->snapshot()->budgets;
      bool children = false;
      for (core::BudgetId id = 0; id < tree.size() && !children; ++id) {
        const auto& n = tree.node(id);
        children = n.path.size() > q.budget.size() &&
                   n.path.compare(0, q.budget.size(), q.budget) == 0 &&
                   n.path[q.budget.size()] == '/';
      }
      q.budget_subtree = children;
    }
    q.after = static_cast<JobId>(query_int(req, "after", 0, 0, INT64_MAX));
    q.limit = static_cast<int>(query_int(req, "limit", 100, 1, 1000));
    auto order = req.get_param_value("order");
    if (!order.empty() && order != "asc" && order != "desc") {
      throw HttpError{400, "order", "must be asc or desc"};
    }
    q.descending = order == "desc";
    if (!p.is_admin()) {
      if (p.manages.empty()) {
        if (!q.owner.empty() && q.owner != p.subject) {
          throw HttpError{403, "owner", "users see only their own jobs"};
        }
        q.owner = p.subject;
      } else {
        q.budgets_within = p.manages;
        q.owner_or_within = p.subject;
      }
    }
    auto rows = store->jobs(q);
    std::string out = "{\"jobs\":[";
    out.reserve(rows.size() * 600 + 64);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (i) out += ',';
      append_job(out, rows[i]);
    }
    out += "],\"next\":";
    out += static_cast<int>(rows.size()) == q.limit ? std::to_string(rows.back().id) : "null";
    out += '}';
    send_text(res, 200, out);
  });

  route("GET", "/api/v1/jobs/{id}", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    send_text(res, 200, job_text(visible_job(p, req.matches[1])));
  });

  route("POST", "/api/v1/jobs/{id}/cancel",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          auto body = parse_body(req, {"reason"}, true);
          auto reason = str_field(body, "reason", false, 512);
          auto j = visible_job(p, req.matches[1]);
          auto r = ctl->cancel(j.id,
                               "cancelled by " + acting(p) + (reason.empty() ? "" : ": " + reason));
          if (!r.ok()) check(r.error(), 409);
          send_text(res, 200, job_text(r.value()));
        });

  route("GET", "/api/v1/jobs/{id}/why",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          auto j = visible_job(p, req.matches[1]);
          auto snap = ctl->snapshot();
          json out = {{"id", j.id}, {"state", j.state}};
          const bool queued = j.state == "pending" || j.state == "requeued";
          // The explanation holds if the job has not changed since the cycle that gave it.
          auto it = snap->why->find(j.id);
          if (queued && it != snap->why->end() && j.updated_at <= snap->explained_at) {
            out["code"] = it->second.code;
            out["explanation"] = it->second.text;
            out["rank"] = it->second.rank;
            out["funded"] = it->second.funded;
            out["expected_start"] = it->second.expected_start == core::kNever
                                        ? json(nullptr)
                                        : json(it->second.expected_start);
          } else if (queued) {
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
          for (const auto& e : store->job_events(j.id)) {
            out["events"].push_back(
                {{"time", e.time}, {"from", e.from}, {"to", e.to}, {"reason", e.reason}});
          }
          send(res, 200, out);
        });

  route("GET", "/api/v1/jobs/{id}/telemetry",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {});
          auto j = visible_job(p, req.matches[1]);
          auto snap = ctl->snapshot();
          json out = {{"id", j.id},
                      {"run", j.runs},
                      {"current", nullptr},
                      {"total", nullptr},
                      {"flags", json::array()}};
          const auto spec = parsed_or(j.spec_json, json::object());
          for (const auto& t : store->telemetry(j.id)) {
            if (t.run == 0) out["total"] = telemetry_json(t);
            if (t.run != j.runs || j.runs == 0) continue;
            out["current"] = telemetry_json(t);
            for (const auto& f : telemetry_flags(t, spec, *snap->catalog)) {
              out["flags"].push_back({{"flag", f.flag}, {"hint", f.hint}});
            }
          }
          send(res, 200, out);
        });
  route("GET", "/api/v1/jobs/{id}/logs",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {"stream", "offset", "node", "run", "limit"});
          auto j = visible_job(p, req.matches[1]);
          const auto stream =
              req.has_param("stream") ? req.get_param_value("stream") : std::string("stdout");
          if (stream != "stdout" && stream != "stderr") {
            throw HttpError{400, "stream", "must be stdout or stderr"};
          }
          const auto offset = query_int(req, "offset", 0, 0, INT64_MAX / 2);
          const auto limit = query_int(req, "limit", 1 << 20, 1, 1 << 20);
          const int run = static_cast<int>(query_int(req, "run", j.runs, 1, 1 << 30));
          if (req.has_param("run") && run > j.runs) {
            throw HttpError{
                400, "run",
                "job " + std::to_string(j.id) + " has had " + std::to_string(j.runs) + " runs"};
          }
          std::string node = req.get_param_value("node");
          if (!node.empty() && !valid_name(node)) throw HttpError{400, "node", "not a node name"};
          if (!logs) throw HttpError{503, "logs", "this server keeps no logs (no logs directory)"};
          if (node.empty() && run > 0) {
            auto nodes = logs->nodes(j.id, run);
            if (nodes.empty() && run == j.runs) nodes = placement_nodes(j.placement_json);
            if (!nodes.empty()) node = nodes.front();  // rank 0
          }
          LogRead r;
          r.start = r.next = offset;
          if (run > 0 && !node.empty()) {
            auto got = logs->read(j.id, run, node, stream, offset, limit);
            if (!got.ok()) check(got.error());
            r = std::move(got.value());
          }
          // Complete: the run ended and everything is in (the agent said so, or it had time).
          bool complete = false;
          auto st = parse_job_status(j.state).value_or(JobStatus::Pending);
          if (j.runs == 0) {
            complete = is_terminal(st);
          } else if (auto end = run_end(store->job_events(j.id), run)) {
            complete =
                r.next >= r.length && (r.final || ctl->now() >= *end + opts.logs_settle_seconds);
          }
          res.status = 200;
          res.set_header("Allot-Next-Offset", std::to_string(r.next));
          res.set_header("Allot-Offset", std::to_string(r.start));
          res.set_header("Allot-Run", std::to_string(run));
          res.set_header("Allot-Node", node);
          res.set_header("Allot-Complete", complete ? "true" : "false");
          res.set_content(r.data, "text/plain");
        });

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
      json fr = json::object();
      for (const auto& [name, cid] : snap->cluster_ids) fr[name] = tree.allocated_fraction(id, cid);
      b["fraction"] = fr;
      out["budgets"].push_back(b);
    }
    send(res, 200, out);
  });

  route("POST", "/api/v1/budgets", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    auto body = parse_body(req, {"path", "share", "members", "owners"});
    auto path = str_field(body, "path", true, 512);
    if (!valid_budget_path(path) || path == "/") {
      throw HttpError{400, "path", "must be a budget path like /org/team"};
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
    if (!share && !members && !owners) {
      throw HttpError{400, "share", "give a share, members or owners"};
    }
    require(can_manage_budget(p, path), "change budget " + path);
    auto r = ctl->set_budget(path, share, members, p.subject, owners, p.token_id);
    if (!r.ok()) check(r.error());
    send(res, 200,
         {{"path", r.value().path},
          {"share", r.value().share},
          {"members", r.value().members},
          {"owners", r.value().owners}});
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

  // ---- nodes ----
  route("GET", "/api/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    json out = {{"nodes", json::array()}};
    for (const auto& n : store->nodes()) out["nodes"].push_back(node_out(n));
    send(res, 200, out);
  });
  route("GET", "/api/v1/nodes/{name}", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    require(p.role != "agent" || p.scope == req.matches[1].str(), "read another node");
    auto n = store->node(req.matches[1]);
    if (!n) throw HttpError{404, "name", "no such node"};
    send(res, 200, node_out(*n));
  });
  route("POST", "/api/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    auto body = parse_body(req, {"name", "cluster", "model", "gpus", "block", "labels", "address",
                                 "devices", "agent"});
    store::NodeRecord n;
    n.name = str_field(body, "name", true);
    if (!valid_name(n.name)) throw HttpError{400, "name", "must be a name ([A-Za-z0-9._@-])"};
    require(p.is_admin() || (p.role == "agent" && p.scope == n.name), "register node " + n.name);
    n.cluster = str_field(body, "cluster", false);
    if (n.cluster.empty()) n.cluster = "default";
    if (!valid_name(n.cluster)) throw HttpError{400, "cluster", "must be a name"};
    n.model = str_field(body, "model", true, 32);
    n.block = str_field(body, "block", false);
    n.gpus = static_cast<int>(integer_in(body, "gpus", 1, 64, "", true).value());
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
    parse_agent_fields(body, n);
    auto r = ctl->register_node(n);
    if (!r.ok()) check(r.error(), r.error().field == "name" ? 409 : 400);
    ctl->contact(n.name);
    auto out = node_out(r.value().first);
    out["lease_seconds"] = ctl->options().lease_seconds;
    send(res, r.value().second ? 201 : 200, out);
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
          // Contact first: a node marked down for silence is back before its verdict applies.
          if (!ctl->contact(name)) throw HttpError{404, "name", "no such node " + name};
          if (!health.empty()) {
            auto cur = store->node(name);
            // An agent does not undo an operator's drain or down by reporting healthy; its own
            // verdicts (healthy, unhealthy) it may change.
            if (!cur || (cur->health != "healthy" && cur->health != "unhealthy") ||
                cur->health == health) {
              health.clear();
            }
          }
          if (!health.empty()) {
            auto r = ctl->set_node(name, health, reason, std::nullopt);
            if (!r.ok()) check(r.error(), 404);
          }
          auto st = ctl->heartbeat(name);
          if (!st.ok()) check(st.error(), 404);
          send(res, 200, {{"ok", true}, {"lease_seconds", ctl->options().lease_seconds}});
        });
  auto node_admin = [this](const std::string& path, const std::string& health,
                           std::optional<bool> cordon) {
    route("POST", path,
          [this, health, cordon](const httplib::Request& req, httplib::Response& res) {
            auto p = authenticate(req);
            require(p.is_admin(), "drain, undrain or cordon nodes (administrators only)");
            auto body = parse_body(req, {"reason"}, true);
            auto reason = str_field(body, "reason", false, 512);
            if (reason.empty()) reason = "by " + acting(p);
            auto r = ctl->set_node(req.matches[1], health, reason, cordon);
            if (!r.ok()) check(r.error(), 404);
            send(res, 200, node_out(r.value()));
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
    auto entries = store->ledger(from, to);
    store::JobQuery q;
    q.states = {"starting", "running", "preempting"};
    q.limit = 100000;
    const auto now = ctl->now();
    for (const auto& j : store->jobs(q)) {
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
          auto [from, to] = period(req, ctl->now());
          auto by = req.has_param("by") ? req.get_param_value("by") : std::string("budget");
          if (by != "budget" && by != "user") throw HttpError{400, "by", "must be budget or user"};
          auto snap = ctl->snapshot();
          auto scope = req.has_param("budget") ? req.get_param_value("budget")
                                               : default_scope(p, snap->members);
          if (!valid_budget_path(scope)) throw HttpError{400, "budget", "not a budget path"};
          require(can_read_usage(p, scope, snap->members), "see usage of " + scope);
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
        [this, period, usage_entries](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {"from", "to", "budget"});
          auto [from, to] = period(req, ctl->now());
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
          send(res, 200, report(from, to, scope, usage_entries(from, to)));
        });

  // ---- the agent protocol ----
  route("GET", "/api/v1/agent/nodes/{name}/assignments",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {});
          const auto name = agent_call(req, p);
          auto snap = ctl->snapshot();
          const int grace = ctl->options().stop_grace_seconds;
          json out = {{"node", name},
                      {"lease_seconds", ctl->options().lease_seconds},
                      {"server_time", ctl->now()},
                      {"run", json::array()},
                      {"stop", json::array()}};
          auto it = snap->assignments.find(name);
          if (it != snap->assignments.end()) {
            static const json kNoSpec = json::object();
            for (const auto& r : it->second.run) {
              const json& spec = r.spec && r.spec->is_object() ? *r.spec : kNoSpec;
              out["run"].push_back({{"job", r.job},
                                    {"run", r.run},
                                    {"state", r.state},
                                    {"gpus", r.gpus},
                                    {"gpu_milli", r.milli},
                                    {"command", spec.value("command", json::array())},
                                    {"env", spec.value("env", json::object())},
                                    {"workdir", spec.value("workdir", "")},
                                    {"memory_mib", spec.value("memory_mib", 0)},
                                    {"cpus", spec.value("cpus", json(0))},
                                    {"container", spec.value("container", "")},
                                    {"owner", r.owner},
                                    {"budget", r.budget},
                                    {"name", r.name},
                                    {"kind", spec.value("kind", "batch")},
                                    {"resumable", spec.value("resumable", false)},
                                    {"grace_seconds", grace},
                                    {"rank", r.rank},
                                    {"nodes", r.nodes ? json(*r.nodes) : json::array()},
                                    {"rendezvous", r.rendezvous}});
            }
            for (const auto& s : it->second.stop) {
              out["stop"].push_back({{"job", s.job}, {"run", s.run}, {"grace_seconds", grace}});
            }
          }
          send(res, 200, out);
        });
  route(
      "POST", "/api/v1/agent/nodes/{name}/reports",
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
        each_entry(
            body, "reports", 1000, "", {"job", "run", "event", "exit_code", "signal"},
            [&](const json& r, const std::string& where) {
              integer_in(r, "job", 1, INT64_MAX, where, true);
              integer_in(r, "run", 1, 1 << 30, where, true);
              auto ev = r.value("event", "");
              if (ev != "started" && ev != "exited" && ev != "preempted" && ev != "lost") {
                throw HttpError{400, where + "event", "must be started, exited, preempted or lost"};
              }
              integer_in(r, "exit_code", -1024, 1024, where, ev == "exited");
              integer_in(r, "signal", 1, 128, where);
            });
        if (!ctl->contact(name)) throw HttpError{404, "name", "no such node " + name};
        json out = {{"results", json::array()}};
        for (const auto& r : *reps) {
          std::optional<int> code, sig;
          if (r.contains("exit_code")) code = r["exit_code"].get<int>();
          if (r.contains("signal")) sig = r["signal"].get<int>();
          auto x = ctl->agent_report(name, r["job"].get<JobId>(), r["run"].get<int>(),
                                     r["event"].get<std::string>(), code, sig);
          if (x.error.empty()) {
            if (logs && r["event"] == "started") {
              // Which nodes held this run, recorded while it is current: later log uploads for
              // it are taken from those nodes only.
              const auto id = r["job"].get<JobId>();
              const int run = r["run"].get<int>();
              if (auto job = store->job(id); job && job->runs == run) {
                logs->set_nodes(id, run, placement_nodes(job->placement_json));
              }
            }
            out["results"].push_back({{"job", r["job"]}, {"state", x.state}});
          } else {
            out["results"].push_back({{"job", r["job"]}, {"error", x.error}});
          }
        }
        send(res, 200, out);
      });
  route("POST", "/api/v1/agent/nodes/{name}/telemetry",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          const std::string name = req.matches[1];
          require(can_act_for_node(p, name), "act for node " + name);
          auto body = parse_body(req, {"time", "gpus", "jobs"});
          integer_in(body, "time", 0, INT64_MAX / 2, "");
          json gpus = json::array();
          each_entry(body, "gpus", 64, "",
                     {"index", "util_pct", "mem_used_mib", "mem_total_mib", "temp_c", "power_w",
                      "ecc_uncorrected", "healthy"},
                     [&](const json& g, const std::string& w) {
                       json o = {{"index", integer_in(g, "index", 0, 63, w, true).value()}};
                       if (auto v = number_in(g, "util_pct", 0, 100, w)) o["util_pct"] = *v;
                       if (auto v = integer_in(g, "mem_used_mib", 0, kMaxMib, w)) {
                         o["mem_used_mib"] = *v;
                       }
                       if (auto v = integer_in(g, "mem_total_mib", 0, kMaxMib, w)) {
                         o["mem_total_mib"] = *v;
                       }
                       if (auto v = number_in(g, "temp_c", -100, 300, w)) o["temp_c"] = *v;
                       if (auto v = number_in(g, "power_w", 0, 100000, w)) o["power_w"] = *v;
                       if (auto v = integer_in(g, "ecc_uncorrected", 0, INT64_MAX / 2, w)) {
                         o["ecc_uncorrected"] = *v;
                       }
                       if (auto h = g.find("healthy"); h != g.end()) {
                         if (!h->is_boolean()) {
                           throw HttpError{400, w + "healthy", "must be true or false"};
                         }
                         o["healthy"] = *h;
                       }
                       gpus.push_back(std::move(o));
                     });
          struct Part {
            JobId job;
            int run;
            json entry;
          };
          std::vector<Part> parts;
          each_entry(body, "jobs", 1024, "",
                     {"job", "run", "samples", "seconds", "gpu_util_mean", "gpu_util_peak",
                      "mem_used_peak_mib", "mem_total_mib", "cpu_pct_mean", "io_wait_pct_mean"},
                     [&](const json& j, const std::string& w) {
                       Part part{
                           static_cast<JobId>(integer_in(j, "job", 1, INT64_MAX, w, true).value()),
                           static_cast<int>(integer_in(j, "run", 1, 1 << 30, w, true).value()), j};
                       integer_in(j, "samples", 0, 86400, w, true);
                       number_in(j, "seconds", 0, 86400, w, true);
                       number_in(j, "gpu_util_mean", 0, 100, w);
                       number_in(j, "gpu_util_peak", 0, 100, w);
                       integer_in(j, "mem_used_peak_mib", 0, 64 * kMaxMib, w);
                       integer_in(j, "mem_total_mib", 0, 64 * kMaxMib, w);
                       number_in(j, "cpu_pct_mean", 0, 102400, w);
                       number_in(j, "io_wait_pct_mean", 0, 100, w);
                       parts.push_back(std::move(part));
                     });
          if (!ctl->contact(name)) throw HttpError{404, "name", "no such node " + name};
          const auto now = ctl->now();
          ctl->set_node_telemetry(name, json{{"time", now}, {"gpus", gpus}}.dump());
          // Each entry counts for the job's current run on this node only.
          auto snap = ctl->snapshot();
          std::map<JobId, const AssignedRun*> here;
          if (auto it = snap->assignments.find(name); it != snap->assignments.end()) {
            for (const auto& r : it->second.run) here[r.job] = &r;
          }
          store::WriteBatch batch;
          json ignored = json::array();
          for (const auto& part : parts) {
            auto it = here.find(part.job);
            if (it == here.end() || it->second->run != part.run) {
              ignored.push_back(
                  {{"job", part.job},
                   {"run", part.run},
                   {"reason", it == here.end() ? "not running on this node" : "stale run"}});
              continue;
            }
            const auto& r = *it->second;
            const auto& j = part.entry;
            const double gpus_here =
                static_cast<double>(r.gpus.size()) * static_cast<double>(r.milli) / 1000.0;
            const auto samples = j["samples"].get<std::int64_t>();
            const double secs = j["seconds"].get<double>();
            const double nodes = r.nodes && !r.nodes->empty() ? double(r.nodes->size()) : 1.0;
            const double util = j.value("gpu_util_mean", 0.0);
            store::TelemetryRecord d;
            d.job = part.job;
            d.run = part.run;
            d.budget = r.budget;
            d.samples = samples;
            d.seconds = secs / nodes;
            d.gpu_seconds = secs * gpus_here;
            d.used_gpu_seconds = secs * gpus_here * util / 100.0;
            d.util_sum = util * static_cast<double>(samples);
            d.util_peak = j.value("gpu_util_peak", 0.0);
            d.mem_peak_mib = j.value("mem_used_peak_mib", std::int64_t{0});
            d.mem_total_mib = j.value("mem_total_mib", std::int64_t{0});
            d.cpu_sum = j.value("cpu_pct_mean", 0.0) * static_cast<double>(samples);
            d.io_sum = j.value("io_wait_pct_mean", 0.0) * static_cast<double>(samples);
            d.first_time = now - static_cast<core::Time>(secs);
            d.last_time = now;
            batch.push_back(store::op::AddTelemetry{d});
          }
          if (!batch.empty()) {
            auto st = store->write(std::move(batch));
            if (!st.ok()) throw HttpError{503, "store", st.error().reason};
          }
          send(res, 200,
               {{"ok", true},
                {"accepted", parts.size() - ignored.size()},
                {"ignored", ignored},
                {"lease_seconds", ctl->options().lease_seconds}});
        });
  route("POST", "/api/v1/agent/nodes/{name}/logs",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          const std::string name = req.matches[1];
          require(can_act_for_node(p, name), "act for node " + name);
          check_query(req, {"job", "run", "stream", "offset", "final"});
          const auto id = static_cast<JobId>(query_int(req, "job", 0, 1, INT64_MAX));
          if (!req.has_param("job")) throw HttpError{400, "job", "required: the job id"};
          if (!req.has_param("run")) throw HttpError{400, "run", "required: the run number"};
          if (!req.has_param("offset")) {
            throw HttpError{400, "offset", "required: the byte offset of the body in the stream"};
          }
          const int run = static_cast<int>(query_int(req, "run", 0, 1, 1 << 30));
          const auto offset = query_int(req, "offset", 0, 0, INT64_MAX / 2);
          const auto stream = req.get_param_value("stream");
          if (stream != "stdout" && stream != "stderr") {
            throw HttpError{400, "stream", "required: stdout or stderr"};
          }
          const auto fin = req.get_param_value("final");
          if (!fin.empty() && fin != "true" && fin != "false") {
            throw HttpError{400, "final", "must be true or false"};
          }
          if (!logs) throw HttpError{503, "logs", "this server keeps no logs (no logs directory)"};
          if (!ctl->contact(name)) throw HttpError{404, "name", "no such node " + name};
          // One answer for a job that does not exist, a run it never had and a run on another
          // node: an agent learns nothing about jobs that are not its node's.
          const auto not_here = [&] {
            return HttpError{403, "job",
                             "job " + std::to_string(id) + " run " + std::to_string(run) +
                                 " is not on node " + name};
          };
          auto job = store->job(id);
          if (!job || run > job->runs) throw not_here();
          if (run == job->runs) {
            // The node must hold (or have held) part of this run.
            auto nodes = placement_nodes(job->placement_json);
            if (std::find(nodes.begin(), nodes.end(), name) == nodes.end()) throw not_here();
            logs->set_nodes(id, run, nodes);
          } else {
            // An earlier run: only a node that held it (recorded when it started, or at its
            // first upload) may still upload its last bytes.
            auto held = logs->nodes(id, run);
            if (std::find(held.begin(), held.end(), name) == held.end()) throw not_here();
          }
          auto r = logs->append(id, run, name, stream, offset, req.body, fin == "true");
          if (!r.ok()) {
            check(r.error(), r.error().field == "offset" ? 409
                             : r.error().field == "body" ? 413
                                                         : 503);
          }
          send(res, 200, {{"length", r.value()}});
        });

  // ---- tokens ----
  route("GET", "/api/v1/tokens", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    check_query(req, {});
    require(p.is_admin() || (p.is_human() && !p.manages.empty()),
            "list tokens (administrators, and managers for their members)");
    auto snap = ctl->snapshot();
    json out = {{"tokens", json::array()}};
    for (const auto& t : store->tokens()) {
      if (!p.is_admin() && !(t.role == "user" && can_manage_user(p, t.subject, snap->members))) {
        continue;
      }
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
    // Who may create tokens at all comes before what the request says.
    require(p.is_admin() || (p.is_human() && !p.manages.empty()),
            "create tokens (administrators; managers create user tokens for themselves)");
    auto body = parse_body(req, {"name", "role", "subject", "scope"});
    auto name = str_field(body, "name", true);
    auto role = str_field(body, "role", true);
    auto subject = str_field(body, "subject", false);
    auto scope = str_field(body, "scope", false, 512);
    if (!valid_name(name)) throw HttpError{400, "name", "must be a name"};
    if (!valid_role(role)) {
      throw HttpError{400, "role", "must be admin, manager, user, agent or metrics"};
    }
    if (subject.empty()) subject = name;
    if (!valid_name(subject)) throw HttpError{400, "subject", "must be a user name"};
    if (role == "manager" && !valid_budget_path(scope)) {
      throw HttpError{400, "scope", "a manager token needs the budget path it manages"};
    }
    if (role == "agent" && !valid_name(scope)) {
      throw HttpError{400, "scope", "an agent token needs the name of its node"};
    }
    if ((role == "admin" || role == "user" || role == "metrics") && !scope.empty()) {
      throw HttpError{400, "scope", "only manager and agent tokens have a scope"};
    }
    if (!p.is_admin()) {
      // A token is a credential of one principal: minting one for another would let a manager
      // act as anyone it can add as a member (docs/api.md, "Identity"). A manager may mint user
      // tokens for itself only, whose rights are within its own.
      if (role != "user") throw HttpError{403, "role", "managers create user tokens only"};
      if (subject != p.subject) {
        throw HttpError{403, "subject",
                        "a token for another principal (" + subject +
                            ") is minted by an administrator; you may create tokens for " +
                            p.subject + " only"};
      }
    }
    auto secret = create_token(*store, name, role, subject, scope, ctl->now());
    if (!secret.ok()) check(secret.error(), 409);
    auto rec = store->token_by_hash(sha256_hex(secret.value()));
    // Who minted which credential for whom is audited like a change of rights (path "/").
    audit_token(p, "", token_words(rec ? rec->id : 0, name, role, subject, scope));
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
          require(p.is_admin() || (p.is_human() && !p.manages.empty()),
                  "revoke tokens (administrators; managers revoke their members' user tokens)");
          std::int64_t id = 0;
          try {
            id = std::stoll(req.matches[1]);
          } catch (...) {
            throw HttpError{404, "id", "no such token"};  // out of range: no token has it
          }
          std::optional<store::TokenRecord> found;
          for (const auto& t : store->tokens()) {
            if (t.id == id) found = t;
          }
          if (!found) throw HttpError{404, "id", "no such token"};
          if (!p.is_admin()) {
            auto snap = ctl->snapshot();
            // A token a manager may not touch is not shown to it either: 404, not 403.
            if (found->role != "user" || !can_manage_user(p, found->subject, snap->members)) {
              throw HttpError{404, "id", "no such token"};
            }
          }
          auto st = store->write({op::RevokeToken{id, ctl->now()}});
          if (!st.ok()) check(st.error(), 503);
          audit_token(p, token_words(id, found->name, found->role, found->subject, found->scope),
                      "revoked");
          {
            std::lock_guard lk(token_mu);
            token_cache.clear();
          }
          send(res, 200, {{"id", id}, {"revoked", true}});
        });
}

ApiServer::ApiServer(store::Store& store, Controller& controller, ApiOptions options)
    : impl_(std::make_unique<Impl>(&store, &controller, std::move(options))) {}

ApiServer::~ApiServer() {
  stop();
}

std::vector<Route> ApiServer::routes() {
  // What install() registers is the list: an Impl without a server only records them.
  Impl listing(nullptr, nullptr, {});
  listing.install();
  return listing.routes;
}

core::Result<int> ApiServer::start() {
  auto& o = impl_->opts;
  const bool tls = !o.tls_cert.empty() || !o.tls_key.empty();
  if (tls) {
    if (o.tls_cert.empty() || o.tls_key.empty()) {
      return Error{"tls", "give both a certificate and a key"};
    }
    auto s = std::make_unique<httplib::SSLServer>(o.tls_cert.c_str(), o.tls_key.c_str());
    if (!s->is_valid()) return Error{"tls", "cannot load the certificate or key"};
    impl_->svr = std::move(s);
  } else {
    impl_->svr = std::make_unique<RequestProcessor>();
  }
  auto& svr = *impl_->svr;
  svr.set_payload_max_length(o.max_body);
  impl_->install();
  // Before any route: what the edge refuses (edge.h) never reaches a handler or an error message.
  svr.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    auto why = check_request(req);
    if (!why) return httplib::Server::HandlerResponse::Unhandled;
    Impl::send_error(res, 400, why->field, why->reason);
    return httplib::Server::HandlerResponse::Handled;
  });
  // Everything under /api/v1 that matched no route, and any method not served.
  // cpp-httplib calls it outside its own try block (over HTTPS, on a thread of its own): it must
  // not throw.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    try {
      if (res.status == 404 && res.body.empty()) {
        Impl::send_error(res, 404, "path", "no route " + req.method + " " + req.path);
      } else if (res.status == 413) {
        Impl::send_error(res, 413, "body", "too large");
      } else if (res.body.empty()) {
        Impl::send_error(res, res.status, "", "request refused");
      }
    } catch (...) {
      res.body.clear();
    }
  });
  if (!tls) {
    EventServerOptions eo;
    eo.loops = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
    eo.workers = o.threads;
    eo.max_body = o.max_body;
    impl_->events =
        std::make_unique<EventServer>(static_cast<RequestProcessor&>(svr), eo, &Impl::send_error);
    // Every route needs a token: without a usable one a body is not waited for.
    impl_->events->admit([m = impl_.get()](const httplib::Headers& h, httplib::Response& res) {
      httplib::Request req;
      req.headers = h;
      try {
        m->authenticate(req, true);  // the route says what a metrics token may not do
      } catch (const HttpError& e) {
        Impl::send_error(res, e.status, e.field, e.reason);
        return false;
      } catch (...) {  // the store: the route will say so
      }
      return true;
    });
    impl_->events->handle(
        "POST", "/api/v1/jobs",
        [m = impl_.get()](const httplib::Request& req, EventServer::Reply r) {
          if (!m->opts.prometheus) return m->submit(req, std::move(r));
          m->submit(req, [m, r = std::move(r),
                          began = std::chrono::steady_clock::now()](httplib::Response res) {
            m->opts.prometheus->request("POST", "/api/v1/jobs", res.status, seconds_since(began));
            r(std::move(res));
          });
        });
    auto port = impl_->events->bind(o.host, o.port);
    if (!port.ok()) return port.error();
    impl_->events->start();
    return port;
  }
  // HTTPS: cpp-httplib's own server, a worker per connection (the rest of these settings are its
  // connection handling's; the event loop has its own).
  const int threads = o.threads;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // cpp-httplib serves a kept-alive connection on one worker until it closes: a connection is
  // closed after this many requests (the client reconnects and queues again) so that more
  // connections than workers (node agents polling every second) are all served in turn.
  svr.set_keep_alive_max_count(o.keep_alive_requests);
  svr.set_keep_alive_timeout(5);
  svr.set_read_timeout(30, 0);
  svr.set_tcp_nodelay(true);
  int port =
      o.port == 0 ? svr.bind_to_any_port(o.host) : (svr.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port <= 0) return Error{"port", "cannot listen on " + o.host + ":" + std::to_string(o.port)};
  // Agents and clients reconnect in bursts (a connection closes after keep_alive_requests): a
  // backlog of 5 dropped some, which then waited a second for TCP to retry.
  if (!set_listen_backlog(svr, SOMAXCONN)) {
    return Error{"port", "cannot set the listen backlog on " + o.host + ":" + std::to_string(port)};
  }
  impl_->thread = std::thread([this] {
    pthread_setname_np(pthread_self(), "allot-accept");
    impl_->svr->listen_after_bind();
  });
  // cpp-httplib's stop() before the listening thread reached accept() is lost and leaves it
  // blocked there: return only once it listens.
  while (!impl_->svr->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return port;
}

void ApiServer::stop() {
  if (impl_->events) impl_->events->stop();
  if (impl_->svr) impl_->svr->stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace allot::server
