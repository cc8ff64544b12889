// Seeded random numbers whose values do not depend on the standard library's distributions (those
// differ between libstdc++ and libc++): std::mt19937_64 is specified bit for bit, and the few
// distributions the simulator needs are written here.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace allot::sim {

// Mixes a seed with a stream number so that independent streams (one per node, one per purpose)
// are reproducible whatever order they are used in (SplitMix64's finaliser).
inline std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  bool bernoulli(double p) { return uniform() < p; }
  // Exponential with the given mean.
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
  // Log-uniform between lo and hi (both > 0).
  double log_uniform(double lo, double hi) { return std::exp(uniform(std::log(lo), std::log(hi))); }

 private:
  std::mt19937_64 engine_;
};

}  // namespace allot::sim
