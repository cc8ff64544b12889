// `allot nodes`, like Slurm's sinfo: per node its GPUs free, allocated, unallocated and down, the
// jobs on it, its health and cordon, when a draining node will be empty, and GPU utilisation
// where an agent reports it; in natural name order (n2 before n10). Reads GET /nodes (the node
// records) and GET /gpus (each GPU's state), joined by name.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "cli/contract.h"
#include "cli/flags.h"

namespace allot::cli::client {

namespace {

// What a node's agent achieved, in a few words: whose account jobs run as, whether cgroup v2
// limits them, and how GPUs are kept apart ("-" when the agent did not say).
std::string isolation_of(const json& node) {
  const auto agent = node.find("agent");
  if (agent == node.end() || !agent->is_object() || !agent->contains("achieved")) return "-";
  const auto& h = (*agent)["achieved"];
  return std::string(h.value("jobs_as_owner", false) ? "as-owner" : "as-agent") +
         (h.value("cgroup_limits", false) ? ",cgroup" : ",no-cgroup") +
         ",gpus:" + h.value("gpu_devices", std::string("none"));
}

}  // namespace

// "n2" < "n10": runs of digits compare as numbers, the rest as text.
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    const bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      std::size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      std::size_t is = i, js = j;  // leading zeros do not count
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      if (ie - is != je - js) return ie - is < je - js;
      const int c = a.compare(is, ie - is, b, js, je - js);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

int cmd_nodes(const Args& a, const Conn& c) {
  auto records = request(c, "GET", "/api/v1/nodes");
  auto view = request(c, "GET", "/api/v1/gpus");
  std::map<std::string, json> gpus_of_node;
  for (const auto& n : view.value("nodes", json::array())) {
    gpus_of_node[n.value("name", "")] = n;
  }
  std::vector<json> nodes;
  for (const auto& rec : records.value("nodes", json::array())) {
    json n = rec;
    const auto v = gpus_of_node.find(rec.value("name", ""));
    std::map<std::string, int> count;
    std::set<unsigned long long> jobs;
    long long other_jobs = 0;
    double util_sum = 0;
    int util_n = 0;
    if (v != gpus_of_node.end()) {
      for (const auto& g : v->second.value("gpus", json::array())) {
        ++count[g.value("state", "")];
        for (const auto& id : g.value("jobs", json::array()))
          jobs.insert(id.get<unsigned long long>());
        other_jobs = std::max(other_jobs, g.value("other_jobs", 0LL));
      }
      const auto& t = v->second["telemetry"];
      if (t.is_object()) {
        for (const auto& g : t.value("gpus", json::array())) {
          if (g.contains("util_pct") && g["util_pct"].is_number()) {
            util_sum += g["util_pct"].get<double>();
            ++util_n;
          }
        }
      }
      n["drain_eta"] = v->second.value("drain_eta", json());
      n["draining"] = v->second.value("draining", false);
    } else {
      n["drain_eta"] = json();
      n["draining"] = rec.value("health", "") == "draining" || rec.value("cordoned", false);
    }
    n["free_gpus"] = count["idle"];
    n["allocated_gpus"] = count["allocated"];
    n["unallocated_gpus"] = count["unallocated"];
    n["down_gpus"] = count["down"];
    n["draining_idle_gpus"] = count["draining"];  // idle, but no new job may start there
    n["jobs"] = jobs;
    n["other_jobs"] = other_jobs;  // at least this many jobs the caller may not see
    n["utilization_pct"] = util_n > 0 ? json(util_sum / util_n) : json();
    nodes.push_back(std::move(n));
  }
  std::sort(nodes.begin(), nodes.end(), [](const json& x, const json& y) {
    return natural_less(x.value("name", ""), y.value("name", ""));
  });
  if (a.has("json")) {
    std::printf("%s\n", json(nodes).dump(2).c_str());
    return kOk;
  }
  const long long now = static_cast<long long>(std::time(nullptr));
  std::vector<std::vector<std::string>> rows;
  for (const auto& n : nodes) {
    std::string jobs;
    for (const auto& id : n["jobs"]) {
      jobs += (jobs.empty() ? "" : ",") + std::to_string(id.get<unsigned long long>());
    }
    if (n["other_jobs"].get<long long>() > 0) {
      jobs += (jobs.empty() ? "" : ",") + std::string("+") +
              std::to_string(n["other_jobs"].get<long long>());
    }
    std::string health = n.value("health", "");
    if (n.value("cordoned", false)) health += ",cordoned";
    if (!n.value("mig_reconfiguring", json::array()).empty()) health += ",mig-reconfiguring";
    std::string eta = "-";
    if (n["draining"].get<bool>()) {
      const auto& e = n["drain_eta"];
      const bool busy = !n["jobs"].empty() || n["other_jobs"].get<long long>() > 0;
      eta = !busy ? "empty" : e.is_number() ? local_time(e.get<long long>(), now) : "unknown";
    }
    char util[16] = "-";
    if (n["utilization_pct"].is_number()) {
      std::snprintf(util, sizeof util, "%.0f%%", n["utilization_pct"].get<double>());
    }
    rows.push_back({n.value("name", ""), n.value("cluster", ""), n.value("model", ""),
                    std::to_string(n.value("gpus", 0)), std::to_string(n["free_gpus"].get<int>()),
                    std::to_string(n["allocated_gpus"].get<int>()),
                    std::to_string(n["unallocated_gpus"].get<int>()),
                    std::to_string(n["down_gpus"].get<int>() + n["draining_idle_gpus"].get<int>()),
                    jobs.empty() ? "-" : jobs, health, eta, util,
                    n.value("simulated", false) ? "simulated" : "agent", isolation_of(n),
                    n.value("health_reason", "")});
  }
  table({"NAME", "CLUSTER", "MODEL", "GPUS", "FREE", "ALLOC", "UNALLOC", "DOWN", "JOBS", "HEALTH",
         "EMPTY-AT", "UTIL", "KIND", "ISOLATION", "REASON"},
        rows);
  return kOk;
}

}  // namespace allot::cli::client
