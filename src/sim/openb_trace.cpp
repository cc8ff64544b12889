// The Alibaba GPU cluster trace in the openb format (Weng et al., ATC'23).
#include <map>
#include <sstream>

#include "sim/csv_line.h"
#include "sim/text_file.h"
#include "sim/trace_loaders.h"

namespace allot::sim {
namespace {

// A pod's GPUs at most (the openb traces ask 0-8; the bound keeps a damaged figure from being
// narrowed into something else).
constexpr long long kMaxPodGpus = 4096;

core::Result<std::vector<std::string>> split_lines(const std::string& text,
                                                   const std::string& name) {
  std::istringstream in(text);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(std::move(line));
  if (lines.empty()) return core::Error{name, "the file is empty"};
  return lines;
}

// Column positions by name; empty if one is missing.
std::map<std::string, std::size_t> columns(std::string_view header,
                                           std::initializer_list<const char*> needed,
                                           std::string* missing) {
  std::map<std::string, std::size_t> at;
  const auto f = split_csv(header);
  for (std::size_t i = 0; i < f.size(); ++i) at[std::string(f[i])] = i;
  for (const char* n : needed) {
    if (!at.count(n)) {
      *missing = n;
      return {};
    }
  }
  return at;
}

}  // namespace

core::Result<Workload> load_openb_pods(const std::string& path, Diagnostics& diag) {
  auto text = read_text_file(path, "openb pod list");
  if (!text.ok()) return text.error();
  return parse_openb_pods(text.value(), path, diag);
}

core::Result<Workload> parse_openb_pods(const std::string& text, const std::string& path,
                                        Diagnostics& diag) {
  auto lines = split_lines(text, path);
  if (!lines.ok()) return lines.error();
  std::string missing;
  auto col = columns(lines.value()[0],
                     {"num_gpu", "gpu_milli", "gpu_spec", "qos", "creation_time", "deletion_time",
                      "scheduled_time"},
                     &missing);
  if (col.empty()) return core::Error{path + ":1: " + missing, "column missing from the header"};
  Workload w;
  w.source = path;
  w.format = "openb";
  const std::size_t width = split_csv(lines.value()[0]).size();
  for (std::size_t i = 1; i < lines.value().size(); ++i) {
    const std::size_t n = i + 1;
    const std::string& line = lines.value()[i];
    if (line.empty() || line == "\r") continue;
    const auto f = split_csv(line);
    if (f.size() != width) {
      diag.skip(path, n, "line",
                "expected " + std::to_string(width) + " fields, found " + std::to_string(f.size()));
      continue;
    }
    const auto gpus = parse_int(f[col["num_gpu"]]);
    if (!gpus || *gpus < 0 || *gpus > kMaxPodGpus) {  // bounded before it is narrowed to an int
      diag.skip(path, n, "num_gpu",
                "expected an integer between 0 and " + std::to_string(kMaxPodGpus));
      continue;
    }
    if (*gpus == 0) {  // CPU-only pod: not GPU work
      diag.ignore();
      continue;
    }
    const auto milli = parse_int(f[col["gpu_milli"]]);
    if (!milli || *milli < 1 || *milli > 1000) {
      diag.skip(path, n, "gpu_milli", "expected an integer between 1 and 1000");
      continue;
    }
    const auto created = parse_int(f[col["creation_time"]]);
    const auto deleted = parse_int(f[col["deletion_time"]]);
    if (!created || *created < 0) {
      diag.skip(path, n, "creation_time", "expected seconds >= 0");
      continue;
    }
    if (!deleted || *deleted < *created) {
      diag.skip(path, n, "deletion_time", "expected seconds >= creation_time");
      continue;
    }
    const std::string_view sched_text = f[col["scheduled_time"]];
    core::Time began = *created;
    if (!sched_text.empty()) {
      const auto s = parse_int(sched_text);
      if (!s || *s < *created) {
        diag.skip(path, n, "scheduled_time", "expected seconds >= creation_time, or empty");
        continue;
      }
      began = *s;
    }
    SimJob j;
    j.line = n;
    j.submit = *created;
    j.duration = std::max<core::Duration>(1, *deleted - began);
    j.gpus = static_cast<int>(*gpus);
    if (*gpus == 1 && *milli < 1000) j.gpu_milli = *milli;
    const std::string_view qos = f[col["qos"]];
    j.budget = "/openb/" + std::string(qos.empty() ? "none" : qos);
    std::string_view spec = f[col["gpu_spec"]];
    while (!spec.empty()) {  // "V100M16|V100M32"
      const auto bar = spec.find('|');
      j.gpu_models.emplace_back(spec.substr(0, bar));
      spec = bar == std::string_view::npos ? std::string_view() : spec.substr(bar + 1);
    }
    w.jobs.push_back(std::move(j));
  }
  sort_jobs(w, true);
  return w;
}

core::Result<ClusterConfig> load_openb_nodes(const std::string& path, Diagnostics& diag) {
  auto text = read_text_file(path, "openb node list");
  if (!text.ok()) return text.error();
  return parse_openb_nodes(text.value(), path, diag);
}

core::Result<ClusterConfig> parse_openb_nodes(const std::string& text, const std::string& path,
                                              Diagnostics& diag) {
  auto lines = split_lines(text, path);
  if (!lines.ok()) return lines.error();
  std::string missing;
  auto col = columns(lines.value()[0], {"gpu", "model"}, &missing);
  if (col.empty()) return core::Error{path + ":1: " + missing, "column missing from the header"};
  std::map<std::pair<std::string, int>, int> count;  // (model, GPUs per node) -> nodes
  for (std::size_t i = 1; i < lines.value().size(); ++i) {
    const std::string& line = lines.value()[i];
    if (line.empty() || line == "\r") continue;
    const auto f = split_csv(line);
    if (f.size() <= std::max(col["gpu"], col["model"])) {
      diag.skip(path, i + 1, "line", "too few fields");
      continue;
    }
    const auto gpus = parse_int(f[col["gpu"]]);
    if (!gpus || *gpus < 0 || *gpus > 64) {
      diag.skip(path, i + 1, "gpu", "expected an integer between 0 and 64");
      continue;
    }
    if (*gpus == 0 || f[col["model"]].empty()) {
      diag.ignore();
      continue;
    }
    ++count[{std::string(f[col["model"]]), static_cast<int>(*gpus)}];
  }
  ClusterConfig c;
  c.name = "openb";
  for (const auto& [key, nodes] : count) {
    NodePool p;
    p.name = key.first + "x" + std::to_string(key.second);
    p.gpu_model = key.first;
    p.gpus_per_node = key.second;
    p.nodes = nodes;
    c.pools.push_back(p);
  }
  if (c.pools.empty()) return core::Error{path, "no GPU nodes"};
  return c;
}

core::Result<Workload> load_workload(const std::string& path, const std::string& format,
                                     Diagnostics& diag) {
  std::string f = format;
  if (f.empty() || f == "auto") {
    const auto slash = path.rfind('/');
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    if (base.find("openb_pod_list") != std::string::npos) {
      f = "openb";
    } else if (base.find("philly") != std::string::npos) {
      f = "philly";
    } else {
      f = "native";
    }
  }
  if (f == "philly") return load_philly_trace(path, diag);
  if (f == "openb") return load_openb_pods(path, diag);
  if (f == "native") return load_native_workload(path, diag);
  return core::Error{"format",
                     "unknown workload format '" + format + "' (expected native, philly or openb)"};
}

}  // namespace allot::sim
