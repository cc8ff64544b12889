#include "server/job_spec.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <set>

#include "core/gang_shape.h"

namespace allot::server {

using core::Error;
using json = nlohmann::json;

bool valid_name(const std::string& s, std::size_t max) {
  if (s.empty() || s.size() > max) return false;
  // "." and ".." name a directory and its parent wherever a name becomes part of a path (a
  // budget path's segment, a node's log files, a user's account on a node).
  if (s == "." || s == "..") return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
          c == '@')) {
      return false;
    }
  }
  return true;
}

bool valid_budget_path(const std::string& s) {
  if (s == "/") return true;
  if (s.size() < 2 || s.size() > 512 || s[0] != '/' || s.back() == '/') return false;
  std::size_t start = 1;
  while (start <= s.size()) {
    auto slash = s.find('/', start);
    if (slash == std::string::npos) slash = s.size();
    if (!valid_name(s.substr(start, slash - start))) return false;
    start = slash + 1;
  }
  return true;
}

bool valid_env_name(const std::string& s, std::size_t max) {
  if (s.empty() || s.size() > max) return false;
  if (std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

bool reserved_env_name(const std::string& s) {
  return s.rfind("ALLOT_", 0) == 0 || s == "CUDA_VISIBLE_DEVICES" || s == "NVIDIA_VISIBLE_DEVICES";
}

core::Result<std::int64_t> get_int(const json& b, const char* f, std::int64_t def, std::int64_t lo,
                                   std::int64_t hi, const std::string& where) {
  auto it = b.find(f);
  if (it == b.end()) return def;
  if (!it->is_number_integer()) return Error{where + f, "must be an integer"};
  // Compared before narrowing: 2^64-1 read as an int64 is -1, and 2^32+8 read as an int is 8.
  const bool above =
      it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX);
  const auto v = above ? INT64_MAX : it->get<std::int64_t>();
  if (above || v < lo || v > hi) {
    return Error{where + f, "must be between " + std::to_string(lo) + " and " + std::to_string(hi)};
  }
  return v;
}

namespace {

core::Result<std::vector<std::string>> get_names(const json& b, const char* f, std::size_t max_n) {
  std::vector<std::string> out;
  auto it = b.find(f);
  if (it == b.end()) return out;
  if (!it->is_array()) return Error{f, "must be a list of names"};
  if (it->size() > max_n) return Error{f, "at most " + std::to_string(max_n) + " entries"};
  for (const auto& v : *it) {
    if (!v.is_string() || !valid_name(v.get<std::string>())) {
      return Error{f, "entries must be names ([A-Za-z0-9._@-], at most 128 characters)"};
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace

std::optional<DefaultMinRuntime> default_min_runtime(
    const std::map<std::string, std::int64_t>& defaults, const std::string& budget) {
  for (std::string b = budget; !b.empty() && b != "/"; b = b.substr(0, b.rfind('/'))) {
    if (auto it = defaults.find(b); it != defaults.end()) return DefaultMinRuntime{it->second, b};
  }
  return std::nullopt;
}

std::optional<DefaultMinRuntime> apply_default_min_runtime(
    json& body, const std::map<std::string, std::int64_t>& defaults,
    const core::PolicyConfig& policy) {
  if (!body.is_object() || body.contains("min_runtime") || defaults.empty()) return std::nullopt;
  const auto b = body.find("budget");
  if (b == body.end() || !b->is_string()) return std::nullopt;
  auto d = default_min_runtime(defaults, b->get<std::string>());
  if (!d) return std::nullopt;
  const auto k = body.find("kind");
  if (k != body.end() && k->is_string() && k->get<std::string>() == "debug") {
    d->seconds = std::min<std::int64_t>(d->seconds, policy.max_debug_min_runtime);
  }
  d->seconds = std::min<std::int64_t>(d->seconds, policy.max_min_runtime);
  body["min_runtime"] = d->seconds;
  return d;
}

namespace {

// docs/api.md, "mig": one MIG instance of a named profile. Sets the fraction (the profile's share)
// and, unless `models` narrowed them, the models whose GPUs offer it.
core::Status apply_mig_profile(const json& b, const core::GpuCatalog& catalog, core::JobSpec& s,
                               json& canon) {
  const auto& m = b["mig"];
  const auto id = m.is_string() ? catalog.find_mig_profile(m.get<std::string>()) : std::nullopt;
  if (!id || catalog.mig_profile(*id).models.empty()) {
    std::string known;
    for (const auto& n : catalog.mig_profile_names()) known += (known.empty() ? "" : ", ") + n;
    return Error{"mig", "must be a MIG profile the catalogue knows: " + known};
  }
  const core::MigProfile& p = catalog.mig_profile(*id);
  // The stored spec has both (a resubmit sends it back): gpu_milli may only repeat the share.
  if (b.contains("gpu_milli") && b["gpu_milli"] != json(p.milli)) {
    return Error{"mig", "sets the fraction itself (" + std::to_string(p.milli) + " for " + p.name +
                            "): leave gpu_milli out"};
  }
  if (s.shape.nodes != 1 || s.shape.gpus_per_node != 1 ||
      (b.contains("gpus") && b["gpus"] != json(1))) {
    return Error{"mig", "is one instance of one GPU: nodes, gpus_per_node and gpus must be 1"};
  }
  if (p.milli >= core::kWholeGpu) {
    return Error{"mig", p.name + " is the whole GPU: ask for one GPU (gpus 1) instead"};
  }
  std::vector<core::GpuModelId> models;
  json names = json::array();
  for (core::GpuModelId model : p.models) {
    if (!s.models.empty() && std::find(s.models.begin(), s.models.end(), model) == s.models.end()) {
      continue;
    }
    models.push_back(model);
    names.push_back(catalog.model(model).name);
  }
  if (models.empty()) {
    std::string offered;
    for (core::GpuModelId model : p.models) {
      offered += (offered.empty() ? "" : ", ") + catalog.model(model).name;
    }
    return Error{"mig", p.name + " is a profile of " + offered + " GPUs, which models leaves out"};
  }
  s.models = std::move(models);
  s.shape.gpu_milli = p.milli;
  s.shape.mig = *id;
  canon["models"] = std::move(names);
  canon["gpu_milli"] = p.milli;
  canon["mig"] = p.name;
  return core::ok_status();
}

}  // namespace

core::Result<ParsedJob> parse_job_request(const json& b, const core::GpuCatalog& catalog,
                                          const std::map<std::string, core::ClusterId>& clusters,
                                          const core::BudgetTree& budgets,
                                          const core::PolicyConfig& policy,
                                          const JobSpecLimits& limits,
                                          const std::vector<NodeShape>& nodes) {
  static const std::set<std::string> known = {"idempotency_key",
                                              "name",
                                              "budget",
                                              "nodes",
                                              "gpus_per_node",
                                              "gpu_milli",
                                              "models",
                                              "clusters",
                                              "min_runtime",
                                              "resumable",
                                              "priority",
                                              "kind",
                                              "expected_duration",
                                              "command",
                                              "env",
                                              "workdir",
                                              "memory_mib",
                                              "cpus",
                                              "container",
                                              "gpus",
                                              "mig"};
  if (!b.is_object()) return Error{"body", "must be a JSON object"};
  for (const auto& [k, v] : b.items()) {
    if (!known.count(k)) return Error{k, "unknown field"};
  }
  ParsedJob out;
  json canon = json::object();
  // idempotency key: required, so that a retried submit never makes two jobs.
  auto key = b.find("idempotency_key");
  if (key == b.end()) return Error{"idempotency_key", "required (any unique string per job)"};
  if (!key->is_string() || key->get<std::string>().empty() ||
      key->get<std::string>().size() > limits.max_key) {
    return Error{"idempotency_key", "must be a string of 1 to 128 characters"};
  }
  out.idempotency_key = key->get<std::string>();
  if (auto n = b.find("name"); n != b.end()) {
    if (!n->is_string() || !valid_name(n->get<std::string>(), limits.max_name)) {
      return Error{"name", "must be a name ([A-Za-z0-9._@-], at most 128 characters)"};
    }
    out.name = n->get<std::string>();
  }
  canon["name"] = out.name;
  auto bud = b.find("budget");
  if (bud == b.end()) return Error{"budget", "required: the budget path to charge"};
  if (!bud->is_string() || !valid_budget_path(bud->get<std::string>()) ||
      bud->get<std::string>() == "/") {
    return Error{"budget", "must be a budget path like /org/team"};
  }
  out.budget = bud->get<std::string>();
  canon["budget"] = out.budget;
  auto& s = out.spec;
  // gpus: the total, shaped below once the models and clusters are known.
  std::int64_t total_gpus = 0;
  if (b.contains("gpus")) {
    if (b.contains("nodes") || b.contains("gpus_per_node")) {
      return Error{"gpus", "is the total: give it, or nodes and gpus_per_node, not both"};
    }
    auto v =
        get_int(b, "gpus", 1, 1, std::int64_t{policy.max_nodes_per_job} * policy.max_gpus_per_node);
    if (!v.ok()) return v.error();
    total_gpus = v.value();
  }
  {
    auto v = get_int(b, "nodes", 1, 1, policy.max_nodes_per_job);
    if (!v.ok()) return v.error();
    s.shape.nodes = static_cast<int>(v.value());
    canon["nodes"] = v.value();
  }
  {
    auto v = get_int(b, "gpus_per_node", 1, 1, policy.max_gpus_per_node);
    if (!v.ok()) return v.error();
    s.shape.gpus_per_node = static_cast<int>(v.value());
    canon["gpus_per_node"] = v.value();
  }
  {
    auto v = get_int(b, "gpu_milli", core::kWholeGpu, 1, core::kWholeGpu);
    if (!v.ok()) return v.error();
    s.shape.gpu_milli = v.value();
    canon["gpu_milli"] = v.value();
  }
  {
    auto v = get_int(b, "min_runtime", 0, 0, policy.max_min_runtime);
    if (!v.ok()) return v.error();
    s.min_runtime = v.value();
    canon["min_runtime"] = v.value();
  }
  if (b.contains("expected_duration")) {
    auto v = get_int(b, "expected_duration", 0, 1, limits.max_expected_duration);
    if (!v.ok()) return v.error();
    s.expected_duration = v.value();
    canon["expected_duration"] = v.value();
  }
  if (auto r = b.find("resumable"); r != b.end()) {
    if (!r->is_boolean()) return Error{"resumable", "must be true or false"};
    s.resumable = r->get<bool>();
  }
  canon["resumable"] = s.resumable;
  if (auto p = b.find("priority"); p != b.end()) {
    auto pr = p->is_string() ? core::parse_priority(p->get<std::string>()) : std::nullopt;
    if (!pr) return Error{"priority", "must be one of low, normal, high, urgent"};
    s.priority = *pr;
  }
  canon["priority"] = core::to_string(s.priority);
  if (auto k = b.find("kind"); k != b.end()) {
    auto kd = k->is_string() ? core::parse_job_kind(k->get<std::string>()) : std::nullopt;
    if (!kd) return Error{"kind", "must be one of batch, interactive, debug, inference"};
    s.kind = *kd;
  }
  canon["kind"] = core::to_string(s.kind);
  auto models = get_names(b, "models", limits.max_list);
  if (!models.ok()) return models.error();
  for (const auto& m : models.value()) {
    auto id = catalog.find(m);
    if (!id) return Error{"models", "unknown GPU model '" + m + "'"};
    s.models.push_back(*id);
  }
  canon["models"] = models.value();
  if (b.contains("mig")) {
    auto st = apply_mig_profile(b, catalog, s, canon);
    if (!st.ok()) return st.error();
  }
  auto cl = get_names(b, "clusters", limits.max_list);
  if (!cl.ok()) return cl.error();
  for (const auto& c : cl.value()) {
    auto it = clusters.find(c);
    if (it == clusters.end()) return Error{"clusters", "no cluster named '" + c + "'"};
    s.clusters.push_back(it->second);
  }
  canon["clusters"] = cl.value();
  json cmd = json::array();
  if (auto c = b.find("command"); c != b.end()) {
    if (!c->is_array() || c->size() > limits.max_command_args) {
      return Error{"command", "must be a list of at most 256 strings"};
    }
    for (const auto& a : *c) {
      if (!a.is_string() || a.get<std::string>().size() > limits.max_arg) {
        return Error{"command", "entries must be strings of at most 4096 characters"};
      }
    }
    cmd = *c;
  }
  canon["command"] = cmd;
  // How the agent runs it (docs/agent-protocol.md). Kept in the canonical form only when given,
  // so that specs stored before these fields existed stay byte-for-byte what a resubmit makes.
  if (auto e = b.find("env"); e != b.end()) {
    if (!e->is_object() || e->size() > limits.max_env) {
      return Error{"env", "must be an object of at most " + std::to_string(limits.max_env) +
                              " string values"};
    }
    for (const auto& [k, v] : e->items()) {
      if (!valid_env_name(k, limits.max_env_name)) {
        // The name as given, cut to 128 bytes on a character boundary: the error goes back as
        // JSON, which a split UTF-8 sequence would make unwritable.
        std::size_t cut = std::min<std::size_t>(k.size(), 128);
        while (cut > 0 && cut < k.size() && (static_cast<unsigned char>(k[cut]) & 0xC0) == 0x80) {
          --cut;
        }
        return Error{"env." + k.substr(0, cut),
                     "names are [A-Za-z_][A-Za-z0-9_]*, at most 128 characters"};
      }
      if (reserved_env_name(k)) {
        return Error{"env." + k,
                     "is set by allot for every job (ALLOT_*, CUDA_VISIBLE_DEVICES and "
                     "NVIDIA_VISIBLE_DEVICES are reserved)"};
      }
      if (!v.is_string() || v.get<std::string>().size() > limits.max_env_value) {
        return Error{"env." + k, "must be a string of at most 4096 characters"};
      }
    }
    if (!e->empty()) canon["env"] = *e;
  }
  if (auto w = b.find("workdir"); w != b.end()) {
    if (!w->is_string() || w->get<std::string>().size() > limits.max_workdir ||
        (!w->get<std::string>().empty() && w->get<std::string>()[0] != '/') ||
        w->get<std::string>().find('\0') != std::string::npos) {
      return Error{"workdir", "must be an absolute path of at most 1024 characters"};
    }
    if (!w->get<std::string>().empty()) canon["workdir"] = *w;
  }
  {
    auto v = get_int(b, "memory_mib", 0, 0, limits.max_memory_mib);
    if (!v.ok()) return v.error();
    if (v.value() > 0) canon["memory_mib"] = v.value();
  }
  if (auto c = b.find("cpus"); c != b.end()) {
    if (!c->is_number() || c->get<double>() < 0 || c->get<double>() > limits.max_cpus) {
      return Error{"cpus", "must be a number of CPUs between 0 and 1024 (per node; 0 = no limit)"};
    }
    const double v = c->get<double>();
    if (v > 0) {
      if (v == static_cast<double>(static_cast<std::int64_t>(v))) {
        canon["cpus"] = static_cast<std::int64_t>(v);
      } else {
        canon["cpus"] = v;
      }
    }
  }
  if (auto c = b.find("container"); c != b.end()) {
    if (!c->is_string() || c->get<std::string>().size() > limits.max_container) {
      return Error{"container", "must be an image name of at most 512 characters"};
    }
    for (unsigned char ch : c->get<std::string>()) {
      if (ch <= ' ' || ch == 0x7f) return Error{"container", "must not contain spaces or controls"};
    }
    if (!c->get<std::string>().empty()) canon["container"] = *c;
  }
  if (total_gpus > 0) {
    const auto shaped =
        core::shape_of_gpus(static_cast<int>(total_gpus), largest_node_for(s, nodes));
    s.shape.nodes = shaped.nodes;
    s.shape.gpus_per_node = shaped.gpus_per_node;
    if (s.shape.nodes > policy.max_nodes_per_job ||
        s.shape.gpus_per_node > policy.max_gpus_per_node) {
      return Error{"gpus", std::to_string(total_gpus) + " GPUs would be " +
                               std::to_string(s.shape.nodes) + " x " +
                               std::to_string(s.shape.gpus_per_node) +
                               ", more than a job may ask for here"};
    }
    canon["nodes"] = s.shape.nodes;
    canon["gpus_per_node"] = s.shape.gpus_per_node;
  }
  auto leaf = budgets.find(out.budget);
  if (!leaf || !budgets.valid(*leaf)) return Error{"budget", "no budget " + out.budget};
  s.budget = *leaf;
  s.id = 1;  // validated with a placeholder id; the caller assigns the real one
  s.owner = "x";
  if (auto st = core::validate_job(s, policy, budgets); !st.ok()) return st.error();
  s.id = core::kNoJob;
  s.owner.clear();
  out.canonical_json = canon.dump();
  return out;
}

core::Result<core::JobSpec> spec_from_canonical(
    const std::string& text, const core::GpuCatalog& catalog,
    const std::map<std::string, core::ClusterId>& clusters, const core::BudgetTree& budgets) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Error{"spec", "unreadable"};
  core::JobSpec s;
  auto leaf = budgets.find(j.value("budget", ""));
  if (!leaf || !budgets.valid(*leaf)) return Error{"budget", "no longer exists"};
  s.budget = *leaf;
  s.shape.nodes = j.value("nodes", 1);
  s.shape.gpus_per_node = j.value("gpus_per_node", 1);
  s.shape.gpu_milli = j.value("gpu_milli", core::kWholeGpu);
  if (j.contains("mig")) {
    auto id = catalog.find_mig_profile(j.value("mig", ""));
    if (!id) return Error{"mig", "unknown MIG profile " + j.value("mig", "")};
    s.shape.mig = *id;
  }
  s.min_runtime = j.value("min_runtime", 0);
  if (j.contains("expected_duration")) s.expected_duration = j["expected_duration"].get<int64_t>();
  s.resumable = j.value("resumable", false);
  // A service's protected replica (set by the server, never by a request): its contract is
  // renewed while its budget can afford it (docs/policy.md §6, §15).
  s.renew_contract = j.value("service_tier", "") == "protected";
  s.priority = core::parse_priority(j.value("priority", "normal")).value_or(core::Priority::Normal);
  s.kind = core::parse_job_kind(j.value("kind", "batch")).value_or(core::JobKind::Batch);
  for (const auto& m : j.value("models", std::vector<std::string>{})) {
    auto id = catalog.find(m);
    if (!id) return Error{"models", "unknown model " + m};
    s.models.push_back(*id);
  }
  for (const auto& c : j.value("clusters", std::vector<std::string>{})) {
    auto it = clusters.find(c);
    if (it == clusters.end()) return Error{"clusters", "no cluster " + c};
    s.clusters.push_back(it->second);
  }
  return s;
}

}  // namespace allot::server
