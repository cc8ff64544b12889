// Load: the GPU-time a workload asks for over the GPU-time the cluster offers while it arrives.
//   ratio = sum(GPUs x duration) / (cluster GPUs x (last submit - first submit))
// Above 1 the queue grows for as long as jobs arrive (Ai2 reports outstanding requests of 2-3x).
// Scaling compresses (or stretches) inter-arrival times around the first submission.
#pragma once

#include "sim/workload.h"

namespace allot::sim {

struct LoadInfo {
  double demand_gpu_seconds = 0;
  double span_seconds = 0;
  double capacity_gpus = 0;
  double ratio = 0;
};

LoadInfo measure_load(const Workload& w, double capacity_gpus);
// Rescales submit times so that the ratio becomes `target`; returns the factor applied to
// inter-arrival times (< 1 compresses). Does nothing (returns 1) for fewer than two jobs.
double scale_arrivals(Workload& w, double capacity_gpus, double target);

}  // namespace allot::sim
