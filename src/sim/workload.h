// A workload: the jobs a simulation submits, whatever file they came from.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/job.h"
#include "core/types.h"

namespace allot::sim {

// How a request for more GPUs than a node holds is split over nodes (shape_for).
enum class GangShape : std::uint8_t {
  Even,    // the fewest nodes that split it evenly: 12 GPUs on 8-GPU nodes = 2 x 6 (allot's jobs)
  Uneven,  // whole nodes plus one with the remainder: 12 = 8 + 4 (Slurm's --gpus, Helios)
};

struct SimJob {
  std::uint64_t id = 0;   // 1-based, in file order (the logical job; reruns get new core ids)
  core::Time submit = 0;  // seconds
  std::string budget;     // leaf path, e.g. "/philly/6214e9"
  int gpus = 1;           // whole GPUs in all (1 for a fractional request)
  int nodes = 0;          // 0: chosen from the cluster's node size (see shape_for)
  int gpus_per_node = 0;  // with nodes > 0
  core::Milli gpu_milli = core::kWholeGpu;  // < 1000: a fraction of one GPU
  std::string mig;  // a MIG profile the job names ("1g.10gb"): its fraction is the profile's
  core::Duration duration = 0;          // seconds of work when it runs undisturbed
  double utilization = 1.0;             // mean used / assigned over its life
  bool utilization_known = false;       // the workload gave `utilization` (else assumed 1)
  std::vector<std::string> gpu_models;  // accepted models; empty = any
  // Unknown in traces: filled in by assign_missing() from seeded distributions.
  std::optional<core::Duration> min_runtime;
  std::optional<core::JobKind> kind;
  std::optional<bool> resumable;
  std::optional<core::Priority> priority;
  std::size_t line = 0;  // where it came from, for messages
  // The person who submitted it, for a closed loop (JobSource) that answers each end with that
  // person's next job; 0 = nobody in particular (traces).
  std::uint32_t user = 0;
};

struct Workload {
  std::string source;        // file name, for messages and the report
  std::string format;        // "native", "philly", "openb"
  std::vector<SimJob> jobs;  // sorted by submit time, then id
};

// Sorts by (submit, id) and renumbers ids 1..n in that order when `renumber`.
void sort_jobs(Workload& w, bool renumber);

// GPU-seconds the workload asks for (whole GPUs x duration; fractions count their fraction).
double demand_gpu_seconds(const Workload& w);

}  // namespace allot::sim
