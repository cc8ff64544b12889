// The native JSON Lines workload format.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sim/duration_text.h"
#include "sim/trace_loaders.h"

namespace allot::sim {
namespace {

// A duration field: a number of seconds or a string like "2h30m".
std::optional<core::Duration> duration_field(const nlohmann::json& v) {
  if (v.is_number_integer()) return v.get<core::Duration>();
  if (v.is_number()) return static_cast<core::Duration>(v.get<double>());
  if (v.is_string()) return parse_duration(v.get<std::string>());
  return std::nullopt;
}

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
      bad("submit", "missing or not a time in seconds");
      continue;
    }
    job.submit = *duration_field(j["submit"]);
    if (!j.contains("budget") || !j["budget"].is_string() ||
        j["budget"].get<std::string>().empty() || j["budget"].get<std::string>()[0] != '/') {
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
      if (!j["gpus"].is_number_integer() || j["gpus"].get<int>() < 1) {
        bad("gpus", "must be a positive integer");
        continue;
      }
      job.gpus = j["gpus"].get<int>();
    }
    if (j.contains("nodes") || j.contains("gpus_per_node")) {
      if (!j.value("nodes", nlohmann::json()).is_number_integer() ||
          !j.value("gpus_per_node", nlohmann::json()).is_number_integer() ||
          j["nodes"].get<int>() < 1 || j["gpus_per_node"].get<int>() < 1) {
        bad("nodes", "nodes and gpus_per_node go together, both positive integers");
        continue;
      }
      job.nodes = j["nodes"].get<int>();
      job.gpus_per_node = j["gpus_per_node"].get<int>();
      job.gpus = job.nodes * job.gpus_per_node;
    }
    if (j.contains("gpu_milli")) {
      if (!j["gpu_milli"].is_number_integer() || j["gpu_milli"].get<int>() < 1 ||
          j["gpu_milli"].get<int>() > 1000) {
        bad("gpu_milli", "must be an integer between 1 and 1000");
        continue;
      }
      job.gpu_milli = j["gpu_milli"].get<int>();
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
  std::ifstream in(path);
  if (!in) return core::Error{path, "cannot open the workload file"};
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_native_workload(ss.str(), path, diag);
}

}  // namespace allot::sim
