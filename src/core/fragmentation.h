// GPU fragmentation of a node for a workload, and the placement that adds the least of it
// (docs/policy.md section 14; Weng et al., "Beware of Fragmentation", USENIX ATC'23).
//
// A node's fragmentation for one request is the free GPU capacity on it that the request could
// not use: all of it when the request does not fit the node at all (too few GPUs with room, too
// little CPU or memory, a model it does not accept), otherwise the free capacity of the GPUs that
// each have less room than the request needs per GPU. For a workload (requests with
// probabilities) it is the expected value. The fragmentation-aware rule places a request where
// that expected value rises least.
//
// Pure: no I/O, threads or clock.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/types.h"

namespace allot::core {

// What one request asks of a node. gpus = 0: CPU and memory only.
struct FragRequest {
  int gpus = 1;
  Milli milli = kWholeGpu;  // per GPU; < 1000 only when gpus == 1 (a shared GPU)
  std::int64_t cpu_milli = 0;
  std::int64_t memory_mib = 0;
  std::vector<std::string> models;  // accepted GPU models; empty = any
  bool operator==(const FragRequest&) const = default;
};

// One kind of request in the target workload and its share of requests (shares sum to 1).
struct WorkloadShare {
  FragRequest request;
  double probability = 0;
};

// `requests` as a workload: identical requests grouped, each with its share of them, in order of
// first appearance. Empty for no requests.
std::vector<WorkloadShare> shares_of(std::span<const FragRequest> requests);

// A node's free resources.
struct FragNode {
  std::string model;
  std::vector<Milli> gpu_free;  // free thousandths of each GPU
  std::int64_t cpu_free = 0;
  std::int64_t memory_free = 0;
};

// Whether `request` fits `node` as it is.
bool fits(const FragNode& node, const FragRequest& request);

// Free GPU capacity of `node` (milli) that `request` could not use.
Milli fragmentation(const FragNode& node, const FragRequest& request);

// Expected free GPU capacity of `node` (milli) that a request drawn from `workload` could not use.
double fragmentation(const FragNode& node, std::span<const WorkloadShare> workload);

// A choice of node and of GPUs on it (one entry per GPU taken, `milli` each).
struct FragChoice {
  std::size_t node = 0;
  std::vector<int> gpus;
  Milli milli = kWholeGpu;
  double increase = 0;  // rise of the node's expected fragmentation
};

// `node` after taking `choice`'s GPUs and `request`'s CPU and memory.
FragNode after(const FragNode& node, const FragRequest& request, const std::vector<int>& gpus);

// The fragmentation-aware placement (fragmentation gradient descent): of every node `request`
// fits and every way to take its GPUs there (for a shared GPU: each GPU with room; for whole GPUs:
// the free GPUs of lowest index), the one whose node's expected fragmentation for `workload` rises
// least; ties go to the lower node index, then the lower GPU index. nullopt: it fits nowhere.
// `before` (optional, one per node) holds each node's current fragmentation(node, workload), so
// that a caller that keeps it saves recomputing it.
std::optional<FragChoice> least_fragmenting(std::span<const FragNode> nodes,
                                            const FragRequest& request,
                                            std::span<const WorkloadShare> workload,
                                            std::span<const double> before = {});

}  // namespace allot::core
