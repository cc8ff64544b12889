#include "core/mig_geometry.h"

#include <algorithm>
#include <cctype>
#include <numeric>

namespace allot::core {
namespace {

// Reads the digits at `at` of `s` (at most 6), advancing `at`; none if there are none.
std::optional<int> digits(std::string_view s, std::size_t& at) {
  int n = 0;
  const std::size_t from = at;
  while (at < s.size() && std::isdigit(static_cast<unsigned char>(s[at])) && at - from < 6) {
    n = n * 10 + (s[at++] - '0');
  }
  if (at == from) return std::nullopt;
  return n;
}

// NVIDIA's placements (nvidia-smi mig -lgipp on A100/H100/H200/B200): by compute and memory
// slices, the memory slices an instance may start at.
std::vector<int> starts_of(int compute, int memory) {
  if (memory == 1 && compute == 1) return {0, 1, 2, 3, 4, 5, 6};
  if (memory == 2 && compute == 1) return {0, 2, 4, 6};
  if (memory == 2 && compute == 2) return {0, 2, 4};
  if (memory == 4 && compute == 3) return {0, 4};
  if (memory == 4 && compute == 4) return {0};
  if (memory == 8 && compute == 7) return {0};
  return {};
}

}  // namespace

std::optional<MigGeometry> mig_geometry(std::string_view profile, int gpu_memory_gib) {
  if (gpu_memory_gib <= 0) return std::nullopt;
  MigGeometry g;
  std::size_t at = 0;
  const auto compute = digits(profile, at);
  if (!compute || at + 1 >= profile.size() || profile.substr(at, 2) != "g.") return std::nullopt;
  at += 2;
  const auto gb = digits(profile, at);
  if (!gb || profile.substr(at, 2) != "gb") return std::nullopt;
  at += 2;
  const std::string_view rest = profile.substr(at);
  if (rest == "+me") {
    g.media = true;
  } else if (!rest.empty()) {
    return std::nullopt;
  }
  // The memory in eighths of the GPU's, to the slice count it is near: NVIDIA's names round the
  // memory of a slice (H200: 1g.18gb is 1/8 of 141 GB; B300: 1g.34gb is 1/8 of 288 GB).
  const double eighths = *gb * 8.0 / gpu_memory_gib;
  for (int slices : {1, 2, 4, 8}) {
    if (eighths >= slices * 0.92 && eighths <= slices * 1.06) g.memory_slices = slices;
  }
  g.compute_slices = *compute;
  g.starts = starts_of(g.compute_slices, g.memory_slices);
  if (g.starts.empty()) return std::nullopt;
  return g;
}

std::optional<std::vector<int>> mig_layout_starts(const std::vector<std::string>& profiles,
                                                  int gpu_memory_gib) {
  std::vector<MigGeometry> geo;
  int compute = 0, media = 0;
  bool has3 = false, has4 = false;
  for (const std::string& p : profiles) {
    auto g = mig_geometry(p, gpu_memory_gib);
    if (!g) return std::nullopt;
    compute += g->compute_slices;
    media += g->media;
    has3 |= g->compute_slices == 3;
    has4 |= g->compute_slices == 4;
    geo.push_back(std::move(*g));
  }
  // 4g beside 3g fits the memory slices but is not among NVIDIA's supported combinations: the
  // planner never asks for it.
  if (compute > kMigComputeSlices || media > 1 || (has3 && has4)) return std::nullopt;
  // Largest first, each at the first start left free: a tiny search (at most 7 instances).
  std::vector<std::size_t> order(geo.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return geo[a].memory_slices > geo[b].memory_slices;
  });
  std::vector<int> starts(geo.size(), -1);
  auto place = [&](auto& self, std::size_t k, unsigned used) -> bool {
    if (k == order.size()) return true;
    const MigGeometry& g = geo[order[k]];
    for (int s : g.starts) {
      const unsigned mask = ((1U << g.memory_slices) - 1U) << s;
      if ((used & mask) != 0) continue;
      starts[order[k]] = s;
      if (self(self, k + 1, used | mask)) return true;
    }
    return false;
  };
  if (!place(place, 0, 0)) return std::nullopt;
  return starts;
}

}  // namespace allot::core
