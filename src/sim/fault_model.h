// Seeded node faults. Each node fails after an exponential time with mean `mtbf`; a failure is
// either a hard one (the node goes Down at once, its jobs are lost) or, with probability
// `unhealthy_fraction`, a failed health check (the node turns Unhealthy and drains as its jobs
// reach their minimum runtime). Either way it is repaired after an exponential time with mean
// `repair`, then becomes Healthy and the clock to its next failure starts again.
//
// Each node draws from its own stream (seed, node), so the fault schedule is the same under every
// policy and does not depend on the order events are processed in.
#pragma once

#include <cstdint>
#include <vector>

#include "core/node.h"
#include "core/types.h"
#include "sim/rng.h"

namespace allot::sim {

struct FaultModel {
  bool enabled = false;
  std::uint64_t seed = 1;
  core::Duration mtbf = 60 * core::kDay;  // per node
  core::Duration repair = 6 * core::kHour;
  double unhealthy_fraction = 0.5;
};

struct FaultEvent {
  core::Time time = 0;
  core::NodeId node = 0;
  core::NodeHealth health = core::NodeHealth::Healthy;
};

// Generates each node's faults lazily: next() is the node's next health change.
class FaultSchedule {
 public:
  FaultSchedule(const FaultModel& model, std::size_t nodes, core::Time start);
  // The next change of `node` after the one just applied (call after each event of that node).
  FaultEvent next(core::NodeId node);
  // The first event of every node, in node order.
  std::vector<FaultEvent> initial();

 private:
  FaultModel model_;
  std::vector<Rng> rng_;
  std::vector<core::Time> at_;  // time of the node's last change
  std::vector<char> broken_;    // the last change was a failure
};

}  // namespace allot::sim
