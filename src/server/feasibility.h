// Whether a job could ever run on the cluster as it is: a request larger than every node, for a
// GPU model no node has, or with no command to run would otherwise wait (or fail) forever. Pure,
// so that the rule is tested without a server; the API asks it at submission (400).
#pragma once

#include <string>
#include <vector>

#include "core/gpu_catalog.h"
#include "core/job.h"
#include "core/status.h"

namespace allot::server {

// What a node offers, as far as a request's fit is concerned (its health may change: ignored).
struct NodeShape {
  core::ClusterId cluster = 0;
  core::GpuModelId model = 0;
  int gpus = 0;
  bool simulated = false;  // runs no processes: a job without a command is fine there
};

// The most GPUs of one node that the job's clusters and models accept (0: no such node known):
// what `gpus` (a total) is shaped against, by the core's rule (core/gang_shape.h).
int largest_node_for(const core::JobSpec& spec, const std::vector<NodeShape>& nodes);

// Ok if some cluster the job accepts has nodes that could hold it, or if no node is known yet in
// those clusters (nothing to judge by: the nodes may still register). Else the field at fault and
// what to ask for instead, in the words of the command line ("--nodes 2 --gpus 8").
core::Status check_satisfiable(const core::JobSpec& spec, bool command_empty,
                               const std::vector<NodeShape>& nodes, const core::GpuCatalog& catalog,
                               const std::vector<std::string>& cluster_names);

}  // namespace allot::server
