// The Alibaba openb readers (src/sim/openb_trace.cpp) on any text, read both as a pod list and as
// a node list. Pods: see workload_check.h for the contract. Nodes: one pool per (model, GPUs per
// node) with 1-64 GPUs per node, pools that hold every node with GPUs the file lists. The same text
// through the fragmentation experiment's readers (src/sim/openb_resources.cpp): every data line a
// request or node, skipped or ignored; requests 0-64 GPUs, a fraction only of one GPU, CPU and
// memory >= 0; nodes 1-64 whole free GPUs and a model.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "sim/openb_resources.h"
#include "sim/trace_loaders.h"
#include "workload_check.h"

namespace {

void check_resources(const std::string& text) {
  const std::size_t lines = allot::fuzz::data_lines(text, 2, false);
  {
    allot::sim::Diagnostics diag;
    auto r = allot::sim::parse_openb_requests(text, "openb_pod_list.csv", diag);
    if (!r.ok()) {
      allot::fuzz::check_error(r.error());
    } else {
      for (const auto& q : r.value()) {
        FUZZ_CHECK(q.gpus >= 0 && q.gpus <= 64 && q.cpu_milli >= 0 && q.memory_mib >= 0 &&
                       (q.gpus == 0 ? q.milli == 0 : q.milli >= 1 && q.milli <= 1000) &&
                       (q.gpus <= 1 || q.milli == 1000),
                   "request %d x %lld", q.gpus, static_cast<long long>(q.milli));
      }
      FUZZ_CHECK(r.value().size() + diag.skipped().size() == lines, "%zu requests + %zu skipped",
                 r.value().size(), diag.skipped().size());
    }
  }
  allot::sim::Diagnostics diag;
  auto n = allot::sim::parse_openb_node_resources(text, "openb_node_list.csv", diag);
  if (!n.ok()) {
    allot::fuzz::check_error(n.error());
    return;
  }
  for (const auto& node : n.value()) {
    FUZZ_CHECK(!node.gpu_free.empty() && node.gpu_free.size() <= 64 && !node.model.empty() &&
                   node.cpu_free >= 0 && node.memory_free >= 0,
               "node of %zu GPUs", node.gpu_free.size());
  }
  FUZZ_CHECK(n.value().size() + diag.skipped().size() + diag.ignored() == lines,
             "%zu nodes + %zu skipped + %zu ignored", n.value().size(), diag.skipped().size(),
             diag.ignored());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check_resources(text);
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
