// Fragmentation of a node for a workload, and the placement that adds the least of it
// (docs/policy.md section 14).
#include "core/fragmentation.h"

#include <algorithm>

namespace allot::core {
namespace {

bool model_accepted(const FragNode& node, const FragRequest& request) {
  return request.models.empty() || std::find(request.models.begin(), request.models.end(),
                                             node.model) != request.models.end();
}

Milli free_total(const FragNode& node) {
  Milli total = 0;
  for (Milli f : node.gpu_free) total += f;
  return total;
}

}  // namespace

std::vector<WorkloadShare> shares_of(std::span<const FragRequest> requests) {
  std::vector<WorkloadShare> out;
  for (const FragRequest& r : requests) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const WorkloadShare& w) { return w.request == r; });
    if (it == out.end()) {
      out.push_back({r, 1});
    } else {
      it->probability += 1;
    }
  }
  for (WorkloadShare& w : out) w.probability /= static_cast<double>(requests.size());
  return out;
}

bool fits(const FragNode& node, const FragRequest& request) {
  if (node.cpu_free < request.cpu_milli || node.memory_free < request.memory_mib) return false;
  if (request.gpus == 0) return true;
  if (!model_accepted(node, request)) return false;
  int room = 0;
  for (Milli f : node.gpu_free) room += f >= request.milli ? 1 : 0;
  return room >= request.gpus;
}

Milli fragmentation(const FragNode& node, const FragRequest& request) {
  // A CPU-only request uses no GPU: every free GPU is capacity it could not use (as FGD counts).
  if (request.gpus == 0 || !fits(node, request)) return free_total(node);
  Milli unusable = 0;
  for (Milli f : node.gpu_free) unusable += f < request.milli ? f : 0;
  return unusable;
}

double fragmentation(const FragNode& node, std::span<const WorkloadShare> workload) {
  double expected = 0;
  for (const WorkloadShare& w : workload) {
    if (w.probability > 0) {
      expected += w.probability * static_cast<double>(fragmentation(node, w.request));
    }
  }
  return expected;
}

FragNode after(const FragNode& node, const FragRequest& request, const std::vector<int>& gpus) {
  FragNode n = node;
  n.cpu_free -= request.cpu_milli;
  n.memory_free -= request.memory_mib;
  for (int g : gpus) n.gpu_free[static_cast<std::size_t>(g)] -= request.milli;
  return n;
}

std::optional<FragChoice> least_fragmenting(std::span<const FragNode> nodes,
                                            const FragRequest& request,
                                            std::span<const WorkloadShare> workload,
                                            std::span<const double> before) {
  std::optional<FragChoice> best;
  std::vector<int> gpus;
  auto consider = [&](std::size_t i, const FragNode& node, double was) {
    const double increase = fragmentation(after(node, request, gpus), workload) - was;
    if (!best || increase < best->increase) {
      best = FragChoice{i, gpus, request.milli, increase};
    }
  };
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const FragNode& node = nodes[i];
    if (!fits(node, request)) continue;
    const double was = i < before.size() ? before[i] : fragmentation(node, workload);
    gpus.clear();
    if (request.gpus == 0) {
      consider(i, node, was);
    } else if (request.gpus == 1 && request.milli < kWholeGpu) {
      // Each GPU with room, once per distinct amount of room (equal room: equal outcome).
      std::vector<Milli> tried;
      for (std::size_t g = 0; g < node.gpu_free.size(); ++g) {
        const Milli f = node.gpu_free[g];
        if (f < request.milli || std::find(tried.begin(), tried.end(), f) != tried.end()) continue;
        tried.push_back(f);
        gpus.assign(1, static_cast<int>(g));
        consider(i, node, was);
      }
    } else {
      for (std::size_t g = 0;
           g < node.gpu_free.size() && static_cast<int>(gpus.size()) < request.gpus; ++g) {
        if (node.gpu_free[g] >= request.milli) gpus.push_back(static_cast<int>(g));
      }
      consider(i, node, was);
    }
  }
  return best;
}

}  // namespace allot::core
