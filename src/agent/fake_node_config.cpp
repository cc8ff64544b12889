#include "agent/fake_node_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <initializer_list>

#include "agent/gpu_backend.h"

namespace allot::agent {
namespace {

constexpr const char* kFieldNames[kFakeFields] = {
    "util_pct", "mem_used_mib", "temp_c", "power_w", "ecc_uncorrected", "ecc_corrected", "lost"};

// Thrown inside the parser only; parse_fake_node() turns it into its Result.
struct Failure {
  core::Error error;
};

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& field,
                         const std::string& reason) const {
    std::string where = file_;
    if (at.IsDefined() && at.Mark().line >= 0) where += ":" + std::to_string(at.Mark().line + 1);
    throw Failure{core::Error{where + ": " + field, reason}};
  }

  double number(const YAML::Node& n, const std::string& field, double lo, double hi) const {
    double v = 0;
    bool ok = n.IsScalar();
    if (ok) {
      try {
        v = n.as<double>();
      } catch (const YAML::Exception&) {
        ok = false;
      }
    }
    if (!ok || !std::isfinite(v)) fail(n, field, "expected a number, got '" + text(n) + "'");
    if (v < lo || v > hi) {
      fail(n, field, "must be between " + format(lo) + " and " + format(hi) + ", got " + format(v));
    }
    return v;
  }

  std::int64_t integer(const YAML::Node& n, const std::string& field, double lo, double hi) const {
    const double v = number(n, field, lo, hi);
    if (v != std::floor(v)) fail(n, field, "expected a whole number, got " + format(v));
    return static_cast<std::int64_t>(v);
  }

  std::string string(const YAML::Node& n, const std::string& field) const {
    if (!n.IsScalar()) fail(n, field, "expected a string");
    return n.as<std::string>();
  }

  bool boolean(const YAML::Node& n, const std::string& field) const {
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
      fail(n, field, "expected true or false, got '" + text(n) + "'");
    }
    return v;
  }

  // Refuses keys outside `allowed` (a typo would otherwise silently do nothing).
  void only(const YAML::Node& map, const std::string& where,
            std::initializer_list<const char*> allowed) const {
    for (const auto& kv : map) {
      const std::string key = kv.first.Scalar();
      if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; })) {
        std::string list;
        for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
        fail(kv.first, where.empty() ? key : where + "." + key,
             "unknown field (expected one of: " + list + ")");
      }
    }
  }

  static std::string text(const YAML::Node& n) {
    if (n.IsScalar()) return n.Scalar();
    if (n.IsSequence()) return "a list";
    if (n.IsMap()) return "a mapping";
    return "nothing";
  }

  static std::string format(double v) {
    if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
    std::string s = std::to_string(v);
    while (!s.empty() && s.back() == '0') s.pop_back();
    return s;
  }

 private:
  std::string file_;
};

// The bounds of a telemetry value set by the YAML or a script.
std::pair<double, double> field_range(FakeField f) {
  switch (f) {
    case FakeField::UtilPct:
      return {0, 100};
    case FakeField::TempC:
      return {0, 200};
    case FakeField::Lost:
      return {0, 1};
    default:
      return {0, 1e12};
  }
}

double field_value(const Reader& r, const YAML::Node& n, FakeField f, const std::string& where) {
  if (f == FakeField::Lost) return r.boolean(n, where) ? 1 : 0;
  auto [lo, hi] = field_range(f);
  return r.number(n, where, lo, hi);
}

FakeScriptEvent script_event(const Reader& r, const YAML::Node& e, const std::string& where,
                             int gpus) {
  if (!e.IsMap()) r.fail(e, where, "expected a mapping like {at: 30, gpu: 3, temp_c: 95}");
  FakeScriptEvent ev;
  if (!e["at"]) r.fail(e, where + ".at", "missing (seconds since the agent started)");
  ev.at = r.number(e["at"], where + ".at", 0, 1e9);
  if (!e["gpu"]) r.fail(e, where + ".gpu", "missing (a GPU index or 'all')");
  if (e["gpu"].IsScalar() && e["gpu"].Scalar() == "all") {
    ev.gpu = -1;
  } else {
    ev.gpu = static_cast<int>(r.integer(e["gpu"], where + ".gpu", 0, gpus - 1));
  }
  for (const auto& kv : e) {
    const std::string key = kv.first.Scalar();
    if (key == "at" || key == "gpu") continue;
    if (key == "xid") {
      ev.xid = static_cast<int>(r.integer(kv.second, where + ".xid", 1, 1e6));
    } else if (key == "set") {
      if (!kv.second.IsMap()) r.fail(kv.second, where + ".set", "expected a mapping of fields");
      for (const auto& f : kv.second) {
        auto field = fake_field(f.first.Scalar());
        if (!field) r.fail(f.first, where + ".set." + f.first.Scalar(), "unknown field");
        ev.set.emplace_back(*field,
                            field_value(r, f.second, *field, where + ".set." + f.first.Scalar()));
      }
    } else if (auto field = fake_field(key)) {
      ev.set.emplace_back(*field, field_value(r, kv.second, *field, where + "." + key));
    } else {
      r.fail(kv.first, where + "." + key,
             "unknown field (expected at, gpu, set, xid, lost or a telemetry field)");
    }
  }
  if (ev.set.empty() && !ev.xid) r.fail(e, where, "changes nothing (give set, lost, xid, ...)");
  return ev;
}

FakeNodeConfig parse(const std::string& text, const Reader& r) {
  const YAML::Node root = YAML::Load(text);  // a syntax error is reported by parse_fake_node()
  if (!root.IsMap()) r.fail(root, "node", "expected a mapping with gpus, memory_mib, ...");
  r.only(root, "",
         {"model", "name", "gpus", "memory_mib", "uuid_seed", "mig", "telemetry", "script",
          "control_dir", "mig_reconfigure_seconds"});
  FakeNodeConfig c;
  if (!root["gpus"]) r.fail(root, "gpus", "missing (how many GPUs the node has)");
  c.gpus = static_cast<int>(r.integer(root["gpus"], "gpus", 1, 64));
  if (!root["memory_mib"]) r.fail(root, "memory_mib", "missing (each GPU's memory, MiB)");
  c.memory_mib = r.integer(root["memory_mib"], "memory_mib", 1, 1e8);
  if (root["name"]) c.name = r.string(root["name"], "name");
  if (root["model"]) c.model = r.string(root["model"], "model");
  if (c.name.empty() && c.model.empty()) r.fail(root, "model", "missing (give model or name)");
  if (c.name.empty()) c.name = "NVIDIA " + c.model;
  if (c.model.empty()) c.model = catalog_model_name(c.name);
  if (root["uuid_seed"]) c.uuid_seed = r.string(root["uuid_seed"], "uuid_seed");
  if (root["control_dir"]) c.control_dir = r.string(root["control_dir"], "control_dir");
  if (root["mig_reconfigure_seconds"]) {
    c.mig_reconfigure_seconds =
        r.number(root["mig_reconfigure_seconds"], "mig_reconfigure_seconds", 0, 600);
  }

  if (const YAML::Node mig = root["mig"]) {
    if (!mig.IsMap()) r.fail(mig, "mig", "expected a mapping: GPU index -> list of profiles");
    for (const auto& kv : mig) {
      const std::string where = "mig." + kv.first.Scalar();
      const int gpu = static_cast<int>(r.integer(kv.first, where, 0, c.gpus - 1));
      // "0" and "00" are different keys for the same GPU: their slices would add up unchecked.
      if (c.mig.count(gpu)) r.fail(kv.first, where, "GPU " + std::to_string(gpu) + " given twice");
      if (!kv.second.IsSequence() || kv.second.size() == 0) {
        r.fail(kv.second, where, "expected a non-empty list of profiles like [1g.10gb, 3g.40gb]");
      }
      int slices = 0;
      std::vector<std::string>& profiles = c.mig[gpu];
      for (std::size_t i = 0; i < kv.second.size(); ++i) {
        const std::string w = where + "[" + std::to_string(i) + "]";
        const std::string name = r.string(kv.second[i], w);
        auto p = parse_mig_profile(name);
        if (!p) r.fail(kv.second[i], w, "not a MIG profile like 1g.10gb or 1c.3g.40gb: " + name);
        slices += p->gpu_slices;
        profiles.push_back(name);
      }
      if (slices > kMigSlices) {
        r.fail(kv.second, where,
               "profiles use " + std::to_string(slices) + " GPU slices, more than the " +
                   std::to_string(kMigSlices) + " a GPU has");
      }
    }
  }

  if (const YAML::Node t = root["telemetry"]) {
    if (!t.IsMap()) r.fail(t, "telemetry", "expected a mapping like {util_pct: 0, temp_c: 40}");
    for (const auto& kv : t) {
      auto field = fake_field(kv.first.Scalar());
      if (!field || *field == FakeField::Lost) {
        r.fail(kv.first, "telemetry." + kv.first.Scalar(),
               "unknown field (expected util_pct, mem_used_mib, temp_c, power_w, "
               "ecc_uncorrected or ecc_corrected)");
      }
      c.defaults[static_cast<std::size_t>(*field)] =
          field_value(r, kv.second, *field, "telemetry." + kv.first.Scalar());
    }
    if (c.defaults[static_cast<std::size_t>(FakeField::MemUsedMib)] >
        static_cast<double>(c.memory_mib)) {
      r.fail(t, "telemetry.mem_used_mib", "more than memory_mib");
    }
  }

  if (const YAML::Node s = root["script"]) {
    if (!s.IsSequence()) r.fail(s, "script", "expected a list of timed events");
    for (std::size_t i = 0; i < s.size(); ++i) {
      c.script.push_back(script_event(r, s[i], "script[" + std::to_string(i) + "]", c.gpus));
    }
    std::stable_sort(
        c.script.begin(), c.script.end(),
        [](const FakeScriptEvent& a, const FakeScriptEvent& b) { return a.at < b.at; });
  }
  return c;
}

}  // namespace

const char* fake_field_name(FakeField f) {
  return kFieldNames[static_cast<std::size_t>(f)];
}

std::optional<FakeField> fake_field(std::string_view name) {
  for (std::size_t i = 0; i < kFakeFields; ++i) {
    if (name == kFieldNames[i]) return static_cast<FakeField>(i);
  }
  return std::nullopt;
}

std::optional<MigProfile> parse_mig_profile(std::string_view name) {
  // [<c>c.]<g>g.<m>gb
  auto take = [&](char unit_end, std::string_view unit) -> std::optional<int> {
    int v = 0;
    auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), v);
    if (ec != std::errc() || v <= 0) return std::nullopt;
    name.remove_prefix(static_cast<std::size_t>(p - name.data()));
    if (!name.starts_with(unit)) return std::nullopt;
    name.remove_prefix(unit.size());
    if (unit_end && (name.empty() || name.front() != unit_end)) return std::nullopt;
    if (unit_end) name.remove_prefix(1);
    return v;
  };
  MigProfile p;
  std::string_view rest = name;
  if (auto c = take('.', "c")) {
    p.compute_slices = *c;
  } else {
    name = rest;
  }
  auto g = take('.', "g");
  if (!g) return std::nullopt;
  p.gpu_slices = *g;
  if (p.compute_slices == 0) p.compute_slices = p.gpu_slices;
  auto m = take('\0', "gb");
  if (!m || !name.empty() || p.compute_slices > p.gpu_slices || p.gpu_slices > kMigSlices) {
    return std::nullopt;
  }
  p.memory_gib = *m;
  return p;
}

core::Result<FakeNodeConfig> parse_fake_node(const std::string& text, const std::string& file) {
  const Reader r(file);
  try {
    return parse(text, r);
  } catch (const Failure& f) {
    return f.error;
  } catch (const YAML::Exception& e) {
    return core::Error{file + ":" + std::to_string(e.mark.line + 1) + ": yaml", e.msg};
  }
}

}  // namespace allot::agent
