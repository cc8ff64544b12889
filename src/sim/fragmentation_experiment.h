// The fragmentation experiment of Weng et al. (FGD, USENIX ATC'23) on allot's placement rules:
// pods drawn (seeded, with replacement) from a trace's requests arrive one by one and never
// leave; each is placed by the rule under test or fails (and is dropped) when no node can take
// it; arrivals go on until the GPUs they asked for reach `arrive_until` x the cluster's GPU
// capacity. The result is the cluster's unallocated GPU capacity against the arrived workload,
// both as fractions of GPU capacity (docs/simulator.md, "Fragmentation experiment").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/fragmentation.h"
#include "core/status.h"

namespace allot::sim {

// The placement rules compared: "fgd" (core::least_fragmenting, docs/policy.md section 14),
// "best-fit" (allot's live rule, core::GpuPool::find: a fraction to the fullest GPU it fits, whole
// GPUs to the node with the fewest free that fits), "first-fit", "worst-fit".
const std::vector<std::string>& fragmentation_placements();

struct FragExperimentSpec {
  std::vector<core::FragRequest> pods;  // the trace: arrivals are drawn from these
  std::vector<core::FragNode> nodes;    // the cluster, empty
  std::vector<std::string> placements = {"fgd", "best-fit"};
  std::vector<std::uint64_t> seeds = {1};
  double arrive_until = 1.3;  // stop once arrived GPU demand reaches this x capacity
};

struct FragPoint {
  double arrived = 0;      // GPUs asked for by arrived pods / GPU capacity
  double unallocated = 0;  // free GPU capacity / GPU capacity
};

struct FragRun {
  std::string placement;
  std::uint64_t seed = 0;
  std::vector<FragPoint> curve;  // after each arrival
  std::size_t arrived_pods = 0, failed_pods = 0;
  // Failed pods by kind: a share of one GPU, whole GPUs, CPU only.
  std::size_t failed_shared = 0, failed_whole = 0, failed_cpu_only = 0;
  double first_failure = -1;  // arrived fraction at the first failed GPU pod; -1: none
};

struct FragResult {
  std::vector<FragRun> runs;
  core::Milli capacity = 0;        // GPU capacity, milli
  std::size_t workload_kinds = 0;  // distinct GPU requests in the target workload
};

// The target workload FGD measures fragmentation for: the trace's GPU pods grouped into distinct
// requests, each with its share of pods (CPU-only pods left out: they shift every node's
// fragmentation by the same amount, so they never change a choice).
std::vector<core::WorkloadShare> target_workload(const std::vector<core::FragRequest>& pods);

core::Result<FragResult> run_fragmentation_experiment(const FragExperimentSpec& spec);

// Unallocated fraction of `run` once arrivals first reach `arrived` (linear search; the last
// point if they never do).
double unallocated_at(const FragRun& run, double arrived);

// Outputs: a CSV of the curves on a 1% grid of arrived workload (placement, seed, arrived_pct,
// unallocated_pct), the mean over seeds per placement at a few loads as a text table, a JSON
// report and an HTML page with the curve.
std::string fragmentation_csv(const FragResult& r);
std::string fragmentation_table(const FragResult& r);
std::string fragmentation_json(const FragResult& r, const std::string& source);
std::string fragmentation_html(const FragResult& r, const std::string& source);

}  // namespace allot::sim
