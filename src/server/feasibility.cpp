#include "server/feasibility.h"

#include <algorithm>
#include <map>
#include <set>

namespace allot::server {

using core::Error;

namespace {

template <typename List, typename V>
bool accepts(const List& list, V v) {
  return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
}

}  // namespace

int largest_node_for(const core::JobSpec& spec, const std::vector<NodeShape>& nodes) {
  int largest = 0;
  for (const auto& n : nodes) {
    if (accepts(spec.clusters, n.cluster) && accepts(spec.models, n.model)) {
      largest = std::max(largest, n.gpus);
    }
  }
  return largest;
}

core::Status check_satisfiable(const core::JobSpec& spec, bool command_empty,
                               const std::vector<NodeShape>& nodes, const core::GpuCatalog& catalog,
                               const std::vector<std::string>& cluster_names) {
  std::vector<const NodeShape*> in_clusters;
  for (const auto& n : nodes) {
    if (accepts(spec.clusters, n.cluster)) in_clusters.push_back(&n);
  }
  if (in_clusters.empty()) return core::ok_status();
  auto model_name = [&](core::GpuModelId m) {
    return m < catalog.size() ? catalog.model(m).name : std::string("?");
  };

  std::vector<const NodeShape*> fit_model;
  std::set<std::string> models_here;
  for (const auto* n : in_clusters) {
    models_here.insert(model_name(n->model));
    if (accepts(spec.models, n->model)) fit_model.push_back(n);
  }
  if (fit_model.empty()) {
    std::string asked, here;
    for (auto m : spec.models) asked += (asked.empty() ? "" : ", ") + model_name(m);
    for (const auto& m : models_here) here += (here.empty() ? "" : ", ") + m;
    return Error{"models", "no node has a GPU model " + asked + "; the nodes here have " + here};
  }

  int largest = 0;
  for (const auto* n : fit_model) largest = std::max(largest, n->gpus);
  const int per_node = spec.shape.gpus_per_node;
  if (per_node > largest) {
    // The same GPUs as a gang of nodes that exist: the largest per-node count that divides the
    // total evenly (16 on 8-GPU nodes: 2 x 8).
    const int total = spec.shape.total_gpus();
    int g = largest;
    while (g > 1 && total % g != 0) --g;
    return Error{"gpus_per_node", std::to_string(per_node) +
                                      " GPUs per node, but the largest node has " +
                                      std::to_string(largest) + ": for " + std::to_string(total) +
                                      " GPUs ask for --gpus " + std::to_string(total) +
                                      " (shaped for you) or --nodes " + std::to_string(total / g) +
                                      " --gpus-per-node " + std::to_string(g)};
  }
  // A gang runs within one cluster: some cluster needs `nodes` nodes with `per_node` GPUs each.
  std::map<core::ClusterId, int> large_enough;
  for (const auto* n : fit_model) {
    if (n->gpus >= per_node) ++large_enough[n->cluster];
  }
  int most = 0;
  core::ClusterId where = 0;
  for (const auto& [c, k] : large_enough) {
    if (k > most) {
      most = k;
      where = c;
    }
  }
  if (spec.shape.nodes > most) {
    const std::string name = where < cluster_names.size() ? cluster_names[where] : "?";
    return Error{"nodes", "needs " + std::to_string(spec.shape.nodes) + " nodes with " +
                              std::to_string(per_node) + " GPUs each, but cluster " + name +
                              " has only " + std::to_string(most)};
  }
  // Checked last: the shape is the more basic mistake.
  if (command_empty && std::any_of(in_clusters.begin(), in_clusters.end(),
                                   [](const NodeShape* n) { return !n->simulated; })) {
    return Error{"command", "is empty: give the program to run (on the command line, after --)"};
  }
  return core::ok_status();
}

}  // namespace allot::server
