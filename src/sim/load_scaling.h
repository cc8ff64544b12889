// Load: the GPU-time a workload asks for over the GPU-time the cluster offers while it arrives.
//   ratio = demand of the jobs arriving in the window / (cluster GPUs x window length)
// The window runs from the 1st to the 99th percentile of submit times, so that a few stragglers
// far from the rest (the openb trace has 14 pods spread over the 110 days before its other 7,050)
// do not stretch it: with all jobs, the ratio would be that of an almost empty period.
// Above 1 the queue grows for as long as jobs arrive (Ai2 reports outstanding requests of 2-3x).
// Scaling compresses (or stretches) inter-arrival times around the first submission.
#pragma once

#include "sim/workload.h"

namespace allot::sim {

struct LoadInfo {
  double demand_gpu_seconds = 0;         // every job
  double window_demand_gpu_seconds = 0;  // jobs submitted within the window
  core::Time window_from = 0, window_to = 0;
  double span_seconds = 0;  // window_to - window_from
  double capacity_gpus = 0;
  double ratio = 0;
};

// `w` sorted by submit time.
LoadInfo measure_load(const Workload& w, double capacity_gpus);
// Rescales submit times so that the ratio becomes `target`; returns the factor applied to
// inter-arrival times (< 1 compresses). Does nothing (returns 1) when the window is empty.
double scale_arrivals(Workload& w, double capacity_gpus, double target);

// "2.50", "0.0071": two decimals, or three significant digits below 0.1.
std::string load_text(double ratio);

}  // namespace allot::sim
