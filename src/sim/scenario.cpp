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

core::Status add_services(Scenario& sc, const ServiceFile& file, std::uint64_t seed) {
  core::BudgetTree tree;
  (void)apply_budgets(sc.budgets, tree);
  for (const BudgetEntry& e : file.budgets.budgets) {
    if (tree.find(e.path)) {
      return core::Error{file.path + ": budgets",
                         "'" + e.path + "' is a budget of the workload's tree already"};
    }
  }
  if (auto st = apply_budgets(file.budgets, tree); !st.ok()) {
    return core::Error{file.path + ": budgets " + st.error().field, st.error().reason};
  }
  sc.budgets.budgets.insert(sc.budgets.budgets.end(), file.budgets.budgets.begin(),
                            file.budgets.budgets.end());
  // Each replica is admitted as a job of the workload is: the same checks, the same shape.
  Workload w;
  w.source = file.path;
  for (const SimService& s : file.services) {
    SimJob j;
    j.budget = s.budget;
    j.gpus = s.mig.empty() ? s.gpus : 1;
    j.mig = s.mig;
    j.kind = core::JobKind::Inference;
    j.min_runtime = 0;
    j.resumable = false;
    j.priority = core::Priority::Normal;
    j.line = s.line;
    w.jobs.push_back(std::move(j));
  }
  Diagnostics diag;
  Scenario admitted = make_scenario(sc.cluster, sc.budgets, w, diag);
  if (!diag.empty()) {
    const InputIssue& i = diag.skipped().front();
    return core::Error{i.file + ":" + std::to_string(i.line) + ": " + i.field, i.reason};
  }
  for (std::size_t k = 0; k < file.services.size(); ++k) {
    const AdmittedJob& a = admitted.jobs[k];
    if (a.shape.nodes != 1) {
      return core::Error{file.path + ":" + std::to_string(file.services[k].line) + ": gpus",
                         "a replica runs on one node: at most " +
                             std::to_string(sc.cluster.largest_node_gpus()) + " GPUs"};
    }
    sc.services.push_back(ScenarioService{file.services[k], a});
  }
  sc.service_seed = seed;
  return core::ok_status();
}

}  // namespace allot::sim
