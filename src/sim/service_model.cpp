#include "sim/service_model.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <numbers>
#include <set>
#include <sstream>

#include "sim/duration_text.h"
#include "sim/rng.h"
#include "sim/text_file.h"

namespace allot::sim {

double service_load(const SimService& s, std::size_t index, std::uint64_t seed, core::Time t) {
  const double hour = static_cast<double>(((t % core::kDay) + core::kDay) % core::kDay) / 3600.0;
  const double phase = std::cos(2 * std::numbers::pi * (hour - s.load.peak_hour) / 24.0);
  double load = s.load.trough + (s.load.peak - s.load.trough) * (1 + phase) / 2;
  if (s.load.noise > 0) {
    const std::uint64_t tick =
        static_cast<std::uint64_t>(t / std::max<core::Duration>(1, s.report_every));
    Rng rng(mix_seed(mix_seed(seed, 0x5e41 + index), tick));
    load *= 1 + s.load.noise * rng.uniform(-1, 1);
  }
  return std::max(0.0, load);
}

std::optional<double> service_memory(const SimService& s, double load, int serving) {
  if (!s.memory_modelled || serving <= 0) return std::nullopt;
  return std::min(1.0, s.memory_idle + s.memory_per_request * load / serving);
}

namespace {

bool service_name(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  core::Error error(const YAML::Node& n, const std::string& field, const std::string& why) const {
    return core::Error{file_ + ":" + std::to_string(n.Mark().line + 1) + ": " + field, why};
  }
  // The keys of a mapping not in `known`, as an error naming the first.
  std::optional<core::Error> unknown(const YAML::Node& m, const std::string& prefix,
                                     const std::set<std::string>& known) const {
    for (const auto& kv : m) {
      const std::string k = kv.first.as<std::string>();
      if (!known.count(k)) return error(kv.first, prefix + k, "unknown field");
    }
    return std::nullopt;
  }
  std::optional<core::Error> number(const YAML::Node& m, const std::string& key,
                                    const std::string& field, double lo, double hi,
                                    double& out) const {
    if (!m[key]) return std::nullopt;
    double v = 0;
    try {
      v = m[key].as<double>();
    } catch (const YAML::Exception&) {
      return error(m[key], field, "expected a number");
    }
    if (!std::isfinite(v) || v < lo || v > hi) {
      std::ostringstream why;
      why << "must be between " << lo << " and " << hi;
      return error(m[key], field, why.str());
    }
    out = v;
    return std::nullopt;
  }
  std::optional<core::Error> integer(const YAML::Node& m, const std::string& key,
                                     const std::string& field, int lo, int hi, int& out) const {
    double v = out;
    if (auto e = number(m, key, field, lo, hi, v)) return e;
    if (v != std::floor(v)) return error(m[key], field, "must be a whole number");
    out = static_cast<int>(v);
    return std::nullopt;
  }
  std::optional<core::Error> duration(const YAML::Node& m, const std::string& key,
                                      const std::string& field, core::Duration lo,
                                      core::Duration hi, core::Duration& out) const {
    if (!m[key]) return std::nullopt;
    const auto d = parse_duration(m[key].as<std::string>());
    if (!d || *d < lo || *d > hi) {
      return error(m[key], field,
                   "expected a duration from " + duration_text(lo) + " to " + duration_text(hi) +
                       " (\"90s\", \"5m\", \"8h\")");
    }
    out = *d;
    return std::nullopt;
  }

 private:
  std::string file_;
};

core::Result<SimService> parse_one(const YAML::Node& n, std::size_t i, const Reader& r) {
  const std::string at = "services[" + std::to_string(i) + "].";
  if (!n.IsMap()) return r.error(n, "services[" + std::to_string(i) + "]", "expected a mapping");
  if (auto e =
          r.unknown(n, at,
                    {"name", "budget", "gpus", "mig", "min_replicas", "max_replicas", "contract",
                     "start_delay", "capacity", "load", "memory", "report_every", "autoscale"})) {
    return *e;
  }
  SimService s;
  s.line = static_cast<std::size_t>(n.Mark().line) + 1;
  if (!n["name"]) return r.error(n, at + "name", "missing");
  s.name = n["name"].as<std::string>();
  if (!service_name(s.name)) {
    return r.error(n["name"], at + "name", "1-63 characters of a-z, 0-9 and '-'");
  }
  if (!n["budget"]) return r.error(n, at + "budget", "missing");
  s.budget = n["budget"].as<std::string>();
  if (n["mig"]) {
    if (n["gpus"]) return r.error(n["mig"], at + "mig", "a replica asks gpus or a MIG profile");
    s.mig = n["mig"].as<std::string>();
  }
  if (auto e = r.integer(n, "gpus", at + "gpus", 1, 1024, s.gpus)) return *e;
  s.min_replicas = 1;
  if (auto e = r.integer(n, "min_replicas", at + "min_replicas", 0, 1024, s.min_replicas)) {
    return *e;
  }
  s.max_replicas = s.min_replicas;
  if (auto e = r.integer(n, "max_replicas", at + "max_replicas", 1, 1024, s.max_replicas)) {
    return *e;
  }
  if (s.max_replicas < 1) {  // min_replicas 0 and no max
    return r.error(n, at + "max_replicas", "a service runs at least one replica: give 1 or more");
  }
  if (s.max_replicas < s.min_replicas) {
    return r.error(n["max_replicas"] ? n["max_replicas"] : n, at + "max_replicas",
                   "must be at least min_replicas");
  }
  if (auto e = r.duration(n, "contract", at + "contract", 0, 8 * core::kHour, s.contract)) {
    return *e;
  }
  if (auto e = r.duration(n, "start_delay", at + "start_delay", 0, core::kDay, s.start_delay)) {
    return *e;
  }
  if (auto e = r.duration(n, "report_every", at + "report_every", 1, core::kHour, s.report_every)) {
    return *e;
  }
  if (auto e = r.number(n, "capacity", at + "capacity", 0, 1e9, s.capacity)) return *e;
  if (const YAML::Node l = n["load"]) {
    if (!l.IsMap()) return r.error(l, at + "load", "expected a mapping");
    if (auto e = r.unknown(l, at + "load.", {"trough", "peak", "peak_hour", "noise"})) return *e;
    if (auto e = r.number(l, "trough", at + "load.trough", 0, 1e9, s.load.trough)) return *e;
    if (auto e = r.number(l, "peak", at + "load.peak", 0, 1e9, s.load.peak)) return *e;
    if (auto e = r.number(l, "peak_hour", at + "load.peak_hour", 0, 24, s.load.peak_hour)) {
      return *e;
    }
    if (auto e = r.number(l, "noise", at + "load.noise", 0, 1, s.load.noise)) return *e;
    if (s.load.peak < s.load.trough) {
      return r.error(l, at + "load.peak", "must be at least load.trough");
    }
  }
  if (const YAML::Node m = n["memory"]) {
    if (!m.IsMap()) return r.error(m, at + "memory", "expected a mapping");
    if (auto e = r.unknown(m, at + "memory.", {"idle", "per_request"})) return *e;
    s.memory_modelled = true;
    if (auto e = r.number(m, "idle", at + "memory.idle", 0, 1, s.memory_idle)) return *e;
    if (auto e =
            r.number(m, "per_request", at + "memory.per_request", 0, 1, s.memory_per_request)) {
      return *e;
    }
  }
  auto& as = s.autoscale;
  if (const YAML::Node a = n["autoscale"]) {
    if (!a.IsMap()) return r.error(a, at + "autoscale", "expected a mapping");
    if (auto e = r.unknown(a, at + "autoscale.",
                           {"load_high", "load_low", "memory_high", "memory_low", "cooldown"})) {
      return *e;
    }
    if (auto e = r.number(a, "memory_high", at + "autoscale.memory_high", 0, 1, as.memory_high)) {
      return *e;
    }
    if (auto e = r.number(a, "memory_low", at + "autoscale.memory_low", 0, 1, as.memory_low)) {
      return *e;
    }
    if (!(as.memory_low > 0 && as.memory_low < as.memory_high)) {
      return r.error(a, at + "autoscale.memory_low",
                     "must be above 0 and below autoscale.memory_high");
    }
    if (auto e = r.number(a, "load_high", at + "autoscale.load_high", 0, 1e9, as.load_high)) {
      return *e;
    }
    if (auto e = r.number(a, "load_low", at + "autoscale.load_low", 0, 1e9, as.load_low)) {
      return *e;
    }
    if (auto e = r.duration(a, "cooldown", at + "autoscale.cooldown", 0, core::kDay, as.cooldown)) {
      return *e;
    }
    if ((as.load_high > 0 || as.load_low > 0) && !(as.load_low < as.load_high)) {
      return r.error(a, at + "autoscale.load_low", "must be below autoscale.load_high");
    }
  }
  s.autoscale.load_max_age = core::kNever;  // the simulated service always reports
  if (s.max_replicas > s.min_replicas && s.autoscale.load_high <= 0 && !s.memory_modelled) {
    return r.error(n, at + "autoscale.load_high",
                   "a service with max_replicas above min_replicas scales on its load or its "
                   "memory: give load_high and load_low, or memory");
  }
  return s;
}

}  // namespace

core::Result<ServiceFile> parse_services(const std::string& text, const std::string& file) {
  const Reader r(file);
  ServiceFile out;
  out.path = file;
  try {
    const YAML::Node root = YAML::Load(text);
    if (!root.IsMap() || !root["services"] || !root["services"].IsSequence()) {
      return core::Error{file + ": services", "expected a mapping with a 'services' list"};
    }
    if (auto e = r.unknown(root, "", {"services", "budgets"})) return *e;
    if (root["budgets"]) {
      auto b = parse_budget_config(text, file);
      if (!b.ok()) return b.error();
      out.budgets = std::move(b.value());
    }
    const YAML::Node list = root["services"];
    constexpr std::size_t kMaxServices = 256;
    if (list.size() > kMaxServices) {
      return r.error(list, "services", "at most " + std::to_string(kMaxServices) + " services");
    }
    std::set<std::string> names;
    for (std::size_t i = 0; i < list.size(); ++i) {
      auto s = parse_one(list[i], i, r);
      if (!s.ok()) return s.error();
      if (!names.insert(s.value().name).second) {
        return r.error(list[i]["name"], "services[" + std::to_string(i) + "].name",
                       "'" + s.value().name + "' is given twice");
      }
      out.services.push_back(std::move(s.value()));
    }
  } catch (const YAML::Exception& e) {
    return core::Error{file + ":" + std::to_string(e.mark.line + 1) + ": yaml", e.what()};
  }
  if (out.services.empty()) return core::Error{file + ": services", "the list is empty"};
  return out;
}

core::Result<ServiceFile> load_services(const std::string& path) {
  auto text = read_text_file(path, "services file");
  if (!text.ok()) return text.error();
  return parse_services(text.value(), path);
}

}  // namespace allot::sim
