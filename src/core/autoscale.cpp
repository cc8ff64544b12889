#include "core/autoscale.h"

#include <cstdio>

namespace allot::core {
namespace {

std::string percent(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", f * 100);
  return buf;
}

std::string figure(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

std::optional<ScaleDecision> scale_decision(const Autoscale& a, const ScaleState& state,
                                            const ScaleSignals& sig, Time now) {
  if (state.last_scale > 0 && now < state.last_scale + a.cooldown) return std::nullopt;
  if (sig.running <= 0) {
    // Scaled to zero: the service's own report is the only signal that it is wanted again.
    if (state.desired == 0 && state.max_replicas > 0 && a.load_high > 0 && sig.load &&
        *sig.load > 0) {
      return ScaleDecision{now,
                           0,
                           1,
                           "out: load " + figure(*sig.load) + " reported with no replica running",
                           std::nullopt,
                           sig.load};
    }
    return std::nullopt;
  }
  const bool load_used = a.load_high > 0 && sig.load.has_value();
  const std::optional<double> per_replica =
      load_used ? std::optional<double>(*sig.load / sig.running) : std::nullopt;
  ScaleDecision d;
  d.at = now;
  d.from = state.desired;
  d.memory = sig.memory;
  d.load = per_replica;
  std::string high;
  if (sig.memory && *sig.memory > a.memory_high) {
    high = "GPU memory " + percent(*sig.memory) + " used on its replicas' GPUs, above " +
           percent(a.memory_high);
  } else if (per_replica && *per_replica > a.load_high) {
    high = "load " + figure(*per_replica) + " per replica, above " + figure(a.load_high);
  }
  if (!high.empty()) {
    // Out only once every replica wanted runs: the last scale-out has taken effect.
    if (state.desired >= state.max_replicas || sig.running < state.desired) return std::nullopt;
    d.to = state.desired + 1;
    d.reason = "out: " + high;
    return d;
  }
  const bool memory_low = !sig.memory || *sig.memory < a.memory_low;
  const bool load_low = !per_replica || *per_replica < a.load_low;
  if (!sig.memory && !per_replica) return std::nullopt;  // nothing measured
  if (memory_low && load_low && state.desired > state.min_replicas) {
    d.to = state.desired - 1;
    std::string why;
    if (sig.memory) {
      why = "GPU memory " + percent(*sig.memory) + " used, below " + percent(a.memory_low);
    }
    if (per_replica) {
      why += std::string(why.empty() ? "" : " and ") + "load " + figure(*per_replica) +
             " per replica, below " + figure(a.load_low);
    }
    d.reason = "in: " + why;
    return d;
  }
  return std::nullopt;
}

}  // namespace allot::core
