// The autoscaler's decision for an inference service (docs/policy.md section 15, "Autoscaling"):
// a pure function of the service's bounds, what it wants now, and the figures measured on its
// serving replicas. The server (src/server/controller_services.cpp) and the simulator
// (src/sim/simulation_services.cpp) both decide with it.
#pragma once

#include <optional>
#include <string>

#include "core/types.h"

namespace allot::core {

struct Autoscale {
  // Mean fraction of GPU memory used on the running replicas' GPUs: above `memory_high` one more
  // replica, below `memory_low` one fewer (0 < low < high <= 1).
  double memory_high = 0.8;
  double memory_low = 0.3;
  // The service's reported load per running replica (requests/s, or p90 latency in ms: whatever
  // the service posts; POST /services/NAME/load): above `load_high` out, below `load_low` in.
  // 0 and 0: the signal is not used.
  double load_high = 0;
  double load_low = 0;
  Duration cooldown = 60;  // seconds between two scale decisions of the service
  // A reported load older than this is ignored (the service stopped reporting).
  Duration load_max_age = 120;
};

// One scale decision, as `allot serve show` lists it.
struct ScaleDecision {
  Time at = 0;
  int from = 0;
  int to = 0;
  std::string reason;
  std::optional<double> memory;  // the mean memory pressure seen (0..1)
  std::optional<double> load;    // the load per replica seen
};

// The figures a scale decision reads: measured over the replicas serving now (running and, where
// the service has a readiness check, ready).
struct ScaleSignals {
  int running = 0;               // replicas serving
  std::optional<double> memory;  // mean fraction of GPU memory used on their GPUs
  std::optional<double> load;    // the service's latest fresh report, total
};

// What the decision needs of a service: its bounds and what it wants now.
struct ScaleState {
  int min_replicas = 0;
  int max_replicas = 0;
  int desired = 0;      // replicas wanted, between min and max
  Time last_scale = 0;  // of the last decision (0: none yet)
};

// The next decision for a service wanting `state.desired` replicas, or nothing. Out when memory
// or load per replica is above its high watermark, in when every signal in use is below its low
// one (and none above); never inside the cool-down, never past min/max, and only once the
// replicas wanted are all running (a scale-out waits for the last one to start).
std::optional<ScaleDecision> scale_decision(const Autoscale& a, const ScaleState& state,
                                            const ScaleSignals& sig, Time now);

}  // namespace allot::core
