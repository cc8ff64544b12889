#include "server/service.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace allot::server {

using core::Error;
using json = nlohmann::json;

namespace {

core::Result<double> fraction_field(const json& a, const char* f, double def, double hi,
                                    const std::string& where) {
  auto it = a.find(f);
  if (it == a.end()) return def;
  if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0 ||
      it->get<double>() > hi) {
    return Error{where + f, "must be a number from 0 to " + std::to_string(static_cast<int>(hi))};
  }
  return it->get<double>();
}

core::Result<Autoscale> parse_autoscale(const json& b) {
  Autoscale a;
  auto it = b.find("autoscale");
  if (it == b.end()) return a;
  if (!it->is_object()) return Error{"autoscale", "must be an object"};
  static const std::set<std::string> known = {"memory_high", "memory_low", "load_high",
                                              "load_low",    "cooldown",   "load_max_age"};
  for (const auto& [k, v] : it->items()) {
    if (!known.count(k)) return Error{"autoscale." + k, "unknown field"};
  }
  const std::string w = "autoscale.";
  auto mh = fraction_field(*it, "memory_high", a.memory_high, 1, w);
  if (!mh.ok()) return mh.error();
  auto ml = fraction_field(*it, "memory_low", a.memory_low, 1, w);
  if (!ml.ok()) return ml.error();
  auto lh = fraction_field(*it, "load_high", a.load_high, 1e9, w);
  if (!lh.ok()) return lh.error();
  auto ll = fraction_field(*it, "load_low", a.load_low, 1e9, w);
  if (!ll.ok()) return ll.error();
  auto cd = get_int(*it, "cooldown", a.cooldown, 0, core::kDay, w);
  if (!cd.ok()) return cd.error();
  auto age = get_int(*it, "load_max_age", a.load_max_age, 1, core::kDay, w);
  if (!age.ok()) return age.error();
  a.memory_high = mh.value();
  a.memory_low = ml.value();
  a.load_high = lh.value();
  a.load_low = ll.value();
  a.cooldown = cd.value();
  a.load_max_age = age.value();
  // Hysteresis: a gap between the watermarks, so that one replica more or less does not flip
  // the decision straight back.
  if (!(a.memory_low < a.memory_high)) {
    return Error{"autoscale.memory_low", "must be below autoscale.memory_high"};
  }
  if ((a.load_high > 0 || a.load_low > 0) && !(a.load_low < a.load_high)) {
    return Error{"autoscale.load_low", "must be below autoscale.load_high"};
  }
  return a;
}

}  // namespace

core::Status check_replicas(int min_replicas, int max_replicas, const ServiceLimits& limits) {
  if (min_replicas < 0 || min_replicas > limits.max_replicas) {
    return Error{"min_replicas", "must be from 0 to " + std::to_string(limits.max_replicas)};
  }
  if (max_replicas < 1 || max_replicas > limits.max_replicas) {
    return Error{"max_replicas", "must be from 1 to " + std::to_string(limits.max_replicas)};
  }
  if (min_replicas > max_replicas) return Error{"min_replicas", "must be at most max_replicas"};
  return core::ok_status();
}

core::Result<ServiceSpec> parse_service_request(
    const json& b, const core::GpuCatalog& catalog,
    const std::map<std::string, core::ClusterId>& clusters, const core::BudgetTree& budgets,
    const core::PolicyConfig& policy, const std::vector<NodeShape>& nodes,
    const ServiceLimits& limits) {
  static const std::set<std::string> known = {
      "name",       "budget",     "job",           "min_replicas",  "max_replicas",
      "ready_path", "ready_port", "ready_command", "ready_timeout", "autoscale"};
  if (!b.is_object()) return Error{"body", "must be a JSON object"};
  for (const auto& [k, v] : b.items()) {
    if (!known.count(k)) return Error{k, "unknown field"};
  }
  ServiceSpec s;
  auto name = b.find("name");
  if (name == b.end() || !name->is_string() || !valid_name(name->get<std::string>(), 63)) {
    return Error{"name", "required: a name ([A-Za-z0-9._@-], at most 63 characters)"};
  }
  s.name = name->get<std::string>();
  auto budget = b.find("budget");
  if (budget == b.end() || !budget->is_string()) {
    return Error{"budget", "required: the budget path its replicas are charged to"};
  }
  s.budget = budget->get<std::string>();
  auto mn = get_int(b, "min_replicas", 1, 0, limits.max_replicas, "");
  if (!mn.ok()) return mn.error();
  auto mx =
      get_int(b, "max_replicas", std::max<std::int64_t>(1, mn.value()), 1, limits.max_replicas, "");
  if (!mx.ok()) return mx.error();
  s.min_replicas = static_cast<int>(mn.value());
  s.max_replicas = static_cast<int>(mx.value());
  if (auto st = check_replicas(s.min_replicas, s.max_replicas, limits); !st.ok()) {
    return st.error();
  }
  if (auto p = b.find("ready_path"); p != b.end()) {
    if (!p->is_string() || p->get<std::string>().empty() || p->get<std::string>()[0] != '/' ||
        p->get<std::string>().size() > limits.max_ready) {
      return Error{"ready_path", "must be an HTTP path starting with /"};
    }
    s.ready_path = p->get<std::string>();
  }
  if (auto c = b.find("ready_command"); c != b.end()) {
    std::size_t total = 0;
    if (!c->is_array() || c->empty() || c->size() > 64) {
      return Error{"ready_command", "must be a command: a list of 1 to 64 strings"};
    }
    for (const auto& a : *c) {
      if (!a.is_string()) return Error{"ready_command", "must be a list of strings"};
      total += a.get<std::string>().size();
      s.ready_command.push_back(a.get<std::string>());
    }
    if (total > limits.max_ready) {
      return Error{"ready_command", "at most " + std::to_string(limits.max_ready) + " characters"};
    }
    if (s.ready_command[0].empty()) return Error{"ready_command", "names no program"};
    if (!s.ready_path.empty()) return Error{"ready_command", "give ready_path or ready_command"};
  }
  auto port = get_int(b, "ready_port", 0, 1, 65535, "");
  if (!port.ok()) return port.error();
  s.ready_port = static_cast<int>(port.value());
  if (!s.ready_path.empty() && s.ready_port == 0) {
    return Error{"ready_port", "required with ready_path: the port the replica listens on"};
  }
  if (s.ready_path.empty() && s.ready_port != 0) {
    return Error{"ready_port", "is the port of ready_path: give ready_path too"};
  }
  auto rt = get_int(b, "ready_timeout", s.ready_timeout, 10, core::kDay, "");
  if (!rt.ok()) return rt.error();
  s.ready_timeout = rt.value();
  auto as = parse_autoscale(b);
  if (!as.ok()) return as.error();
  s.autoscale = as.value();

  auto job = b.find("job");
  if (job == b.end() || !job->is_object()) {
    return Error{"job", "required: the replicas' job (command, gpus or gpu_milli, ...)"};
  }
  for (const char* f : {"name", "budget", "idempotency_key"}) {
    if (job->contains(f)) {
      return Error{std::string("job.") + f, "is the service's: give it at the service's level"};
    }
  }
  if (auto k = job->find("kind"); k != job->end() && *k != "inference") {
    return Error{"job.kind", "a replica is an inference job (leave kind out)"};
  }
  json body = *job;
  body["kind"] = "inference";
  body["budget"] = s.budget;
  body["name"] = s.name;
  body["idempotency_key"] = "service " + s.name;
  if (!body.contains("min_runtime")) body["min_runtime"] = policy.max_min_runtime;
  auto parsed = parse_job_request(body, catalog, clusters, budgets, policy, JobSpecLimits{}, nodes);
  if (!parsed.ok()) {
    auto e = parsed.error();
    if (e.field != "budget" && e.field != "name") e.field = "job." + e.field;
    return e;
  }
  const auto& pj = parsed.value();
  if (pj.spec.shape.nodes != 1) return Error{"job.nodes", "a replica runs on one node"};
  s.contract = pj.spec.min_runtime;
  if (s.contract <= 0 && s.min_replicas > 0) {
    return Error{"job.min_runtime",
                 "must be above 0: it is the protected replicas' contract (leave it out for the "
                 "policy's maximum)"};
  }
  if (auto cmd = body.find("command"); cmd == body.end()) {
    return Error{"job.command", "required: what each replica runs"};
  }
  s.job = json::parse(pj.canonical_json);
  s.job.erase("idempotency_key");
  s.job.erase("min_runtime");
  return s;
}

json service_to_json(const ServiceSpec& s) {
  json j = {{"name", s.name},
            {"budget", s.budget},
            {"min_replicas", s.min_replicas},
            {"max_replicas", s.max_replicas},
            {"contract", s.contract},
            {"job", s.job},
            {"autoscale",
             {{"memory_high", s.autoscale.memory_high},
              {"memory_low", s.autoscale.memory_low},
              {"load_high", s.autoscale.load_high},
              {"load_low", s.autoscale.load_low},
              {"cooldown", s.autoscale.cooldown},
              {"load_max_age", s.autoscale.load_max_age}}}};
  if (!s.ready_path.empty()) j["ready_path"] = s.ready_path;
  if (s.ready_port != 0) j["ready_port"] = s.ready_port;
  if (!s.ready_command.empty()) j["ready_command"] = s.ready_command;
  j["ready_timeout"] = s.ready_timeout;
  return j;
}

core::Result<ServiceSpec> service_from_json(const json& j) {
  if (!j.is_object()) return Error{"spec", "unreadable"};
  try {
    ServiceSpec s;
    s.name = j.at("name").get<std::string>();
    s.budget = j.at("budget").get<std::string>();
    s.min_replicas = j.at("min_replicas").get<int>();
    s.max_replicas = j.at("max_replicas").get<int>();
    s.contract = j.at("contract").get<core::Duration>();
    s.job = j.at("job");
    const auto& a = j.at("autoscale");
    s.autoscale.memory_high = a.at("memory_high").get<double>();
    s.autoscale.memory_low = a.at("memory_low").get<double>();
    s.autoscale.load_high = a.at("load_high").get<double>();
    s.autoscale.load_low = a.at("load_low").get<double>();
    s.autoscale.cooldown = a.at("cooldown").get<core::Duration>();
    s.autoscale.load_max_age = a.at("load_max_age").get<core::Duration>();
    s.ready_path = j.value("ready_path", "");
    s.ready_port = j.value("ready_port", 0);
    s.ready_command = j.value("ready_command", std::vector<std::string>{});
    s.ready_timeout = j.value("ready_timeout", s.ready_timeout);
    return s;
  } catch (const json::exception& e) {
    return Error{"spec", std::string("unreadable: ") + e.what()};
  }
}

json replica_job(const ServiceSpec& s, bool protected_tier) {
  json j = s.job;
  j["min_runtime"] = protected_tier ? s.contract : 0;
  j["service"] = s.name;
  j["service_tier"] = protected_tier ? "protected" : "elastic";
  // Set by the server (ALLOT_* are refused in a request's env): the replica knows its service.
  if (!j.contains("env") || !j["env"].is_object()) j["env"] = json::object();
  j["env"]["ALLOT_SERVICE"] = s.name;
  j["env"]["ALLOT_SERVICE_TIER"] = protected_tier ? "protected" : "elastic";
  if (!s.ready_command.empty()) {
    j["ready"] = {{"command", s.ready_command}};
  } else if (!s.ready_path.empty()) {
    j["ready"] = {{"path", s.ready_path}, {"port", s.ready_port}};
    j["env"]["ALLOT_SERVICE_PORT"] = std::to_string(s.ready_port);
  }
  return j;
}

bool has_ready_check(const json& replica_spec) {
  if (!replica_spec.is_object()) return false;
  auto r = replica_spec.find("ready");
  return r != replica_spec.end() && r->is_object() && !r->empty();
}

json decision_to_json(const ScaleDecision& d) {
  json j = {{"at", d.at}, {"from", d.from}, {"to", d.to}, {"reason", d.reason}};
  if (d.memory) j["memory"] = *d.memory;
  if (d.load) j["load"] = *d.load;
  return j;
}

json state_to_json(const ServiceState& s) {
  json d = json::array();
  for (const auto& x : s.decisions) d.push_back(decision_to_json(x));
  json out = {{"desired", s.desired}, {"last_scale", s.last_scale}, {"decisions", d}};
  if (!s.replacing.empty()) out["replacing"] = s.replacing;
  return out;
}

ServiceState state_from_json(const json& j) {
  ServiceState s;
  if (!j.is_object()) return s;
  s.desired = j.value("desired", 0);
  s.last_scale = j.value("last_scale", core::Time{0});
  if (auto d = j.find("decisions"); d != j.end() && d->is_array()) {
    for (const auto& x : *d) {
      if (!x.is_object()) continue;
      ScaleDecision sd;
      sd.at = x.value("at", core::Time{0});
      sd.from = x.value("from", 0);
      sd.to = x.value("to", 0);
      sd.reason = x.value("reason", "");
      if (x.contains("memory")) sd.memory = x["memory"].get<double>();
      if (x.contains("load")) sd.load = x["load"].get<double>();
      s.decisions.push_back(std::move(sd));
    }
  }
  if (auto r = j.find("replacing"); r != j.end() && r->is_array()) {
    for (const auto& x : *r) {
      if (x.is_number_unsigned()) s.replacing.push_back(x.get<core::JobId>());
    }
  }
  return s;
}

void record_decision(ServiceState& s, ScaleDecision d, const ServiceLimits& limits) {
  s.desired = d.to;
  s.last_scale = d.at;
  s.decisions.push_back(std::move(d));
  while (s.decisions.size() > limits.max_decisions) s.decisions.pop_front();
}

std::optional<ScaleDecision> scale_decision(const ServiceSpec& spec, const ServiceState& state,
                                            const ScaleSignals& sig, core::Time now) {
  return core::scale_decision(
      spec.autoscale,
      core::ScaleState{spec.min_replicas, spec.max_replicas, state.desired, state.last_scale}, sig,
      now);
}

}  // namespace allot::server
