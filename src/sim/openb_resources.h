// The Alibaba openb traces as resource requests and node capacities (CPU, memory, GPUs), for the
// fragmentation experiment (src/sim/fragmentation_experiment.h). Unlike load_openb_pods, which
// reads pods as jobs in time, these keep what each pod asks of a node and what each node has,
// CPU-only pods included. A bad record is reported to `diag` (file, line, field) and skipped.
#pragma once

#include <string>
#include <vector>

#include "core/fragmentation.h"
#include "core/status.h"
#include "sim/diagnostics.h"

namespace allot::sim {

// Pod list (openb_pod_list_*.csv): columns cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec.
// num_gpu 0 with gpu_milli 0 is a CPU-only pod; a fraction (gpu_milli < 1000) only of one GPU.
core::Result<std::vector<core::FragRequest>> parse_openb_requests(const std::string& text,
                                                                  const std::string& name,
                                                                  Diagnostics& diag);
// Node list (openb_node_list_*.csv): columns cpu_milli, memory_mib, gpu, model. Nodes without
// GPUs are left out (ignored).
core::Result<std::vector<core::FragNode>> parse_openb_node_resources(const std::string& text,
                                                                     const std::string& name,
                                                                     Diagnostics& diag);
core::Result<std::vector<core::FragRequest>> load_openb_requests(const std::string& path,
                                                                 Diagnostics& diag);
core::Result<std::vector<core::FragNode>> load_openb_node_resources(const std::string& path,
                                                                    Diagnostics& diag);

}  // namespace allot::sim
