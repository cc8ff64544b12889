// The native JSON Lines workload format.
#include <nlohmann/json.hpp>
#include <sstream>

#include "sim/csv_line.h"
#include "sim/duration_text.h"
#include "sim/text_file.h"
#include "sim/trace_loaders.h"

namespace allot::sim {
namespace {

// A time or duration field: a number of seconds or a string like "2h30m", from 0 to
// kMaxTraceSeconds (checked before any conversion: 1e300 or 2^64 would not convert).
std::optional<core::Duration> duration_field(const nlohmann::json& v) {
  std::optional<core::Duration> d;
  if (v.is_number_unsigned()) {
    if (v.get<std::uint64_t>() <= static_cast<std::uint64_t>(kMaxTraceSeconds)) {
      d = v.get<core::Duration>();
    }
  } else if (v.is_number_integer()) {
    d = v.get<core::Duration>();
  } else if (v.is_number()) {
    const double x = v.get<double>();
    if (x >= 0 && x <= static_cast<double>(kMaxTraceSeconds)) d = static_cast<core::Duration>(x);
  } else if (v.is_string()) {
    d = parse_duration(v.get<std::string>());
  }
  if (d && (*d < 0 || *d > kMaxTraceSeconds)) return std::nullopt;
  return d;
}

// An integer field from lo to hi (compared before narrowing: 2^32 + 1 must not read as 1).
std::optional<int> int_field(const nlohmann::json& v, int lo, int hi) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) {
    return std::nullopt;
  }
  if (v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi) return std::nullopt;
  return static_cast<int>(v.get<std::int64_t>());
}

// The most GPUs one trace job may ask for.
constexpr int kMaxJobGpus = 100000;

}  // namespace

core::Result<Workload> parse_native_workload(const std::string& text, const std::string& name,
                                             Diagnostics& diag) {
  Workload w;
  w.source = name;
  w.format = "native";
  std::istringstream in(text);
  std::string line;
  std::size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[0] == '#') continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      diag.skip(name, n, "json", e.what());
      continue;
    }
    if (!j.is_object()) {
      diag.skip(name, n, "json", "expected one JSON object per line");
      continue;
    }
    auto bad = [&](const char* field, const std::string& reason) {
      diag.skip(name, n, field, reason);
    };
    SimJob job;
    job.line = n;
    job.id = w.jobs.size() + 1;
    if (!j.contains("submit") || !duration_field(j["submit"])) {
      bad("submit", "missing or not a time in seconds from 0 to 10^10");
      continue;
    }
    job.submit = *duration_field(j["submit"]);
    // A path below the root: the root "/" holds no jobs.
    if (!j.contains("budget") || !j["budget"].is_string() ||
        j["budget"].get<std::string>().size() < 2 || j["budget"].get<std::string>()[0] != '/') {
      bad("budget", "missing or not a budget path like \"/org/team\"");
      continue;
    }
    job.budget = j["budget"].get<std::string>();
    if (!j.contains("duration") || !duration_field(j["duration"]) ||
        *duration_field(j["duration"]) <= 0) {
      bad("duration", "missing or not a positive duration");
      continue;
    }
    job.duration = *duration_field(j["duration"]);
    bool ok = true;
    if (j.contains("gpus")) {
      auto g = int_field(j["gpus"], 1, kMaxJobGpus);
      if (!g) {
        bad("gpus", "must be an integer from 1 to " + std::to_string(kMaxJobGpus));
        continue;
      }
      job.gpus = *g;
    }
    if (j.contains("nodes") || j.contains("gpus_per_node")) {
      auto nodes = int_field(j.value("nodes", nlohmann::json()), 1, kMaxJobGpus);
      auto per_node = int_field(j.value("gpus_per_node", nlohmann::json()), 1, kMaxJobGpus);
      if (!nodes || !per_node) {
        bad("nodes", "nodes and gpus_per_node go together, both positive integers");
        continue;
      }
      if (static_cast<long long>(*nodes) * *per_node > kMaxJobGpus) {
        bad("nodes", "nodes x gpus_per_node must be at most " + std::to_string(kMaxJobGpus));
        continue;
      }
      job.nodes = *nodes;
      job.gpus_per_node = *per_node;
      job.gpus = job.nodes * job.gpus_per_node;
    }
    if (j.contains("gpu_milli")) {
      auto m = int_field(j["gpu_milli"], 1, 1000);
      if (!m) {
        bad("gpu_milli", "must be an integer between 1 and 1000");
        continue;
      }
      job.gpu_milli = *m;
    }
    if (j.contains("mig")) {
      const auto& m = j["mig"];
      if (!m.is_string() || m.get<std::string>().empty() || m.get<std::string>().size() > 32 ||
          job.gpus != 1 || job.nodes > 0 || j.contains("gpu_milli")) {
        bad("mig", "must be a MIG profile name (\"1g.10gb\"), for one GPU, without gpu_milli");
        continue;
      }
      job.mig = m.get<std::string>();
    }
    if (j.contains("min_runtime")) {
      auto d = duration_field(j["min_runtime"]);
      if (!d || *d < 0) {
        bad("min_runtime", "must be a duration of 0 or more");
        continue;
      }
      job.min_runtime = *d;
    }
    if (j.contains("resumable")) {
      if (!j["resumable"].is_boolean()) {
        bad("resumable", "must be true or false");
        continue;
      }
      job.resumable = j["resumable"].get<bool>();
    }
    if (j.contains("kind")) {
      auto k =
          j["kind"].is_string() ? core::parse_job_kind(j["kind"].get<std::string>()) : std::nullopt;
      if (!k) {
        bad("kind", "must be one of batch, interactive, debug, inference");
        continue;
      }
      job.kind = *k;
    }
    if (j.contains("priority")) {
      auto p = j["priority"].is_string() ? core::parse_priority(j["priority"].get<std::string>())
                                         : std::nullopt;
      if (!p) {
        bad("priority", "must be one of low, normal, high, urgent");
        continue;
      }
      job.priority = *p;
    }
    if (j.contains("utilization")) {
      if (!j["utilization"].is_number() || j["utilization"].get<double>() < 0 ||
          j["utilization"].get<double>() > 1) {
        bad("utilization", "must be a number between 0 and 1");
        continue;
      }
      job.utilization = j["utilization"].get<double>();
      job.utilization_known = true;
    }
    if (j.contains("gpu_models")) {
      if (!j["gpu_models"].is_array()) {
        bad("gpu_models", "must be a list of model names");
        continue;
      }
      for (const auto& m : j["gpu_models"]) {
        if (!m.is_string()) {
          ok = false;
          break;
        }
        job.gpu_models.push_back(m.get<std::string>());
      }
      if (!ok) {
        bad("gpu_models", "must be a list of model names");
        continue;
      }
    }
    w.jobs.push_back(std::move(job));
  }
  sort_jobs(w, false);
  return w;
}

core::Result<Workload> load_native_workload(const std::string& path, Diagnostics& diag) {
  auto text = read_text_file(path, "workload file");
  if (!text.ok()) return text.error();
  return parse_native_workload(text.value(), path, diag);
}

}  // namespace allot::sim
