// Admission of a workload onto a cluster and a budget tree, once for all policies.
#include <algorithm>
#include <map>

#include "core/gang_shape.h"
#include "sim/simulation.h"

namespace allot::sim {

core::Shape shape_for(const SimJob& j, int node_gpus, GangShape rule) {
  core::Shape s;
  if (j.nodes > 0) {
    s.nodes = j.nodes;
    s.gpus_per_node = j.gpus_per_node;
    return s;
  }
  if (j.gpu_milli < core::kWholeGpu) {
    s.gpu_milli = j.gpu_milli;
    return s;
  }
  return core::shape_of_gpus(j.gpus, node_gpus, rule == GangShape::Uneven);
}

Scenario make_scenario(ClusterConfig cluster, BudgetConfig budgets, const Workload& workload,
                       Diagnostics& diag) {
  Scenario sc;
  sc.workload_source = workload.source;
  core::BudgetTree tree;
  (void)apply_budgets(budgets, tree);  // checked when the budget file was read
  core::GpuCatalog catalog = core::GpuCatalog::standard();
  intern_models(cluster, catalog);
  // Nodes by (model, GPUs per node).
  std::map<std::pair<core::GpuModelId, int>, int> nodes_of;
  for (const NodePool& p : cluster.pools) {
    if (p.nodes > 0) nodes_of[{*catalog.find(p.gpu_model), p.gpus_per_node}] += p.nodes;
  }
  const std::string& file = workload.source;
  for (const SimJob& j : workload.jobs) {
    const auto leaf = tree.find(j.budget);
    if (!leaf) {
      diag.skip(file, j.line, "budget", "unknown budget '" + j.budget + "'");
      continue;
    }
    if (!tree.is_leaf(*leaf)) {
      diag.skip(file, j.line, "budget",
                "'" + j.budget + "' has sub-budgets; a job is funded by a leaf budget");
      continue;
    }
    std::vector<core::GpuModelId> models;
    bool known = true;
    for (const std::string& m : j.gpu_models) {
      const auto id = catalog.find(m);
      if (!id) {
        diag.skip(file, j.line, "gpu_models", "no node of the cluster has model '" + m + "'");
        known = false;
        break;
      }
      models.push_back(*id);
    }
    if (!known) continue;
    auto accepted = [&](core::GpuModelId m) {
      return models.empty() || std::find(models.begin(), models.end(), m) != models.end();
    };
    int node_gpus = 0, all_gpus = 0;
    for (const auto& [key, count] : nodes_of) {
      if (!accepted(key.first)) continue;
      node_gpus = std::max(node_gpus, key.second);
      all_gpus += key.second * count;
    }
    const core::Shape shape = shape_for(j, node_gpus);
    int fitting = 0;
    for (const auto& [key, count] : nodes_of) {
      if (accepted(key.first) && key.second >= shape.gpus_per_node) fitting += count;
    }
    if (fitting < shape.nodes) {
      const bool over_cluster = shape.total_gpus() > all_gpus;
      diag.skip(file, j.line, "gpus",
                std::to_string(shape.total_gpus()) + " GPUs (" + std::to_string(shape.nodes) +
                    " x " + std::to_string(shape.gpus_per_node) + ") is larger than " +
                    (over_cluster
                         ? "the cluster (" + std::to_string(all_gpus) + " GPUs)"
                         : "the nodes allow (" + std::to_string(fitting) + " nodes with at least " +
                               std::to_string(shape.gpus_per_node) + " GPUs)"));
      continue;
    }
    AdmittedJob a;
    a.job = j;
    a.shape = shape;
    if (!j.mig.empty()) {  // the profile's share, on the models that offer it (as the server does)
      const auto p = catalog.find_mig_profile(j.mig);
      if (!p || catalog.mig_profile(*p).models.empty()) {
        diag.skip(file, j.line, "mig", "'" + j.mig + "' is not a MIG profile of the catalogue");
        continue;
      }
      a.shape.mig = *p;
      a.shape.gpu_milli = catalog.mig_profile(*p).milli;
      if (a.job.gpu_models.empty()) {
        for (core::GpuModelId m : catalog.mig_profile(*p).models) {
          a.job.gpu_models.push_back(catalog.model(m).name);
        }
      }
    }
    // The uneven shape needs nodes - 1 nodes of its full size and one more with the remainder;
    // where the cluster's mix of node sizes cannot give that, the job keeps its even shape.
    const core::Shape uneven = shape_for(j, node_gpus, GangShape::Uneven);
    int full = 0, any = 0;
    for (const auto& [key, count] : nodes_of) {
      if (!accepted(key.first)) continue;
      if (key.second >= uneven.gpus_per_node) full += count;
      if (key.second >= std::max(uneven.last_node_gpus, 1)) any += count;
    }
    const bool fits =
        full >= (uneven.uneven() ? uneven.nodes - 1 : uneven.nodes) && any >= uneven.nodes;
    a.uneven_shape = fits ? uneven : shape;
    if (a.shape.mig != 0) a.uneven_shape = a.shape;
    a.budget_path = j.budget;
    if (!a.job.kind) a.job.kind = core::JobKind::Batch;
    if (!a.job.min_runtime) a.job.min_runtime = 0;
    if (!a.job.resumable) a.job.resumable = false;
    if (!a.job.priority) a.job.priority = core::Priority::Normal;
    sc.jobs.push_back(std::move(a));
  }
  sc.cluster = std::move(cluster);
  sc.budgets = std::move(budgets);
  return sc;
}

}  // namespace allot::sim
