// The Alibaba openb readers (src/sim/openb_trace.cpp) on any text, read both as a pod list and as
// a node list. Pods: see workload_check.h for the contract. Nodes: one pool per (model, GPUs per
// node) with 1-64 GPUs per node, pools that hold every node with GPUs the file lists.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "sim/trace_loaders.h"
#include "workload_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  {
    allot::sim::Diagnostics diag;
    auto r = allot::sim::parse_openb_pods(text, "openb_pod_list.csv", diag);
    if (!r.ok()) {
      allot::fuzz::check_error(r.error());
    } else {
      allot::fuzz::check_workload(r.value(), diag, allot::fuzz::data_lines(text, 2, false));
      for (const auto& j : r.value().jobs) {
        FUZZ_CHECK(j.budget.rfind("/openb/", 0) == 0 && j.budget.size() > 7, "budget '%s'",
                   j.budget.c_str());
      }
    }
  }
  allot::sim::Diagnostics diag;
  auto r = allot::sim::parse_openb_nodes(text, "openb_node_list.csv", diag);
  if (!r.ok()) {
    allot::fuzz::check_error(r.error());
    return 0;
  }
  std::size_t nodes = 0;
  std::set<std::string> names;
  for (const auto& p : r.value().pools) {
    FUZZ_CHECK(
        p.nodes >= 1 && p.gpus_per_node >= 1 && p.gpus_per_node <= 64 && !p.gpu_model.empty(),
        "pool %s: %d nodes of %d GPUs", p.name.c_str(), p.nodes, p.gpus_per_node);
    FUZZ_CHECK(names.insert(p.name).second, "two pools named %s", p.name.c_str());
    nodes += static_cast<std::size_t>(p.nodes);
  }
  FUZZ_CHECK(
      nodes + diag.skipped().size() + diag.ignored() == allot::fuzz::data_lines(text, 2, false),
      "%zu nodes + %zu skipped + %zu ignored", nodes, diag.skipped().size(), diag.ignored());
  return 0;
}
