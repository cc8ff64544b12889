// Readers for the workload files the simulator accepts. Each returns an error only when the file
// as a whole cannot be read; a bad record is reported to `diag` (file, line, field) and skipped.
//
// Native JSON Lines (one job per line; see docs/simulator.md):
//   {"submit": 0, "budget": "/ai/nlp", "gpus": 16, "duration": "6h", "min_runtime": "2h",
//    "resumable": true, "kind": "batch", "priority": "normal", "utilization": 0.8}
// Philly (philly.csv): timestamp,duration,num_gpus,gpu_time,cluster; each VC is the leaf budget
//   /philly/<vc>.
// Alibaba openb (openb_pod_list_*.csv): pods with num_gpu > 0; each QoS class is the leaf budget
//   /openb/<qos>; the duration is deletion_time - scheduled_time (or creation_time if never
//   scheduled), which for pods still running at the end of the trace is a lower bound.
#pragma once

#include <string>

#include "core/status.h"
#include "sim/cluster_config.h"
#include "sim/diagnostics.h"
#include "sim/workload.h"

namespace allot::sim {

core::Result<Workload> load_native_workload(const std::string& path, Diagnostics& diag);
core::Result<Workload> parse_native_workload(const std::string& text, const std::string& name,
                                             Diagnostics& diag);
core::Result<Workload> load_philly_trace(const std::string& path, Diagnostics& diag);
core::Result<Workload> parse_philly_trace(const std::string& text, const std::string& name,
                                          Diagnostics& diag);
core::Result<Workload> load_openb_pods(const std::string& path, Diagnostics& diag);
core::Result<Workload> parse_openb_pods(const std::string& text, const std::string& name,
                                        Diagnostics& diag);
// The openb node list as a cluster: one pool per (GPU model, GPUs per node), nodes without GPUs
// left out.
core::Result<ClusterConfig> load_openb_nodes(const std::string& path, Diagnostics& diag);
core::Result<ClusterConfig> parse_openb_nodes(const std::string& text, const std::string& name,
                                              Diagnostics& diag);

// Picks the reader from the file name: *.jsonl / *.json -> native, *philly* -> Philly,
// *openb_pod_list* -> openb. `format` ("native", "philly", "openb") overrides the guess.
core::Result<Workload> load_workload(const std::string& path, const std::string& format,
                                     Diagnostics& diag);

// Seconds since 1970-01-01 for "YYYY-MM-DD HH:MM:SS" (UTC, no zone), or nullopt.
std::optional<core::Time> parse_timestamp(std::string_view text);

}  // namespace allot::sim
