// Owed GPU-time: the one definition the simulator, the server's GET /report and `allot demo` use
// (docs/metrics.md). Interval by interval (an hour), a budget is owed its allocated fraction of the
// GPU-time available in the interval, capped at the GPU-time its submitted, unfinished jobs asked
// for in it; the GPU-time delivered to it counts toward the owed amount up to it. Impact is what
// counted over what was owed. Its share uncapped (fraction x available) is its entitlement, not
// what it is owed: a budget that asks for nothing is owed nothing.
//
// Thread-safety: plain values; copies may be read from several threads while none writes.
#pragma once

#include <algorithm>

namespace allot::core {

struct OwedTally {
  double entitled = 0;   // sum of fraction x available
  double demand = 0;     // sum of what its jobs asked for
  double owed = 0;       // sum of min(entitled, demand)
  double delivered = 0;  // sum of what it got (allocated and unallocated)
  double counted = 0;    // sum of min(delivered, owed)

  // One interval, every figure in the same unit (GPU-seconds, milli-GPU-seconds...).
  void add(double entitlement, double asked, double got) {
    const double o = std::min(entitlement, asked);
    entitled += entitlement;
    demand += asked;
    owed += o;
    delivered += got;
    counted += std::min(got, o);
  }
  double impact() const { return owed > 0 ? counted / owed : 1.0; }
};

}  // namespace allot::core
