#include "sim/fault_model.h"

#include <cmath>

namespace allot::sim {

FaultSchedule::FaultSchedule(const FaultModel& model, std::size_t nodes, core::Time start)
    : model_(model), at_(nodes, start), broken_(nodes, 0) {
  rng_.reserve(nodes);
  for (std::size_t n = 0; n < nodes; ++n) rng_.emplace_back(mix_seed(model.seed, 1'000'000 + n));
}

FaultEvent FaultSchedule::next(core::NodeId node) {
  Rng& rng = rng_[node];
  FaultEvent e;
  e.node = node;
  if (broken_[node]) {
    const double d = rng.exponential(static_cast<double>(model_.repair));
    e.time = at_[node] + std::max<core::Duration>(60, std::llround(d));
    e.health = core::NodeHealth::Healthy;
  } else {
    const double d = rng.exponential(static_cast<double>(model_.mtbf));
    const bool soft = rng.bernoulli(model_.unhealthy_fraction);
    e.time = at_[node] + std::max<core::Duration>(60, std::llround(d));
    e.health = soft ? core::NodeHealth::Unhealthy : core::NodeHealth::Down;
  }
  at_[node] = e.time;
  broken_[node] = !broken_[node];
  return e;
}

std::vector<FaultEvent> FaultSchedule::initial() {
  std::vector<FaultEvent> out;
  for (core::NodeId n = 0; n < at_.size(); ++n) out.push_back(next(n));
  return out;
}

}  // namespace allot::sim
