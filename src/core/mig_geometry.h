// Where MIG instances sit on one GPU (docs/policy.md section 7.5, "MIG layouts"): the placement
// rules of the A100, H100, H200 and B200 family, whose GPUs have 7 compute slices and 8 memory
// slices. An instance of a profile occupies a run of memory slices (1, 2, 4 or 8) that must start
// at one of the offsets NVIDIA allows for it (nvmlDeviceGetGpuInstancePossiblePlacements); two
// instances of one GPU never overlap, their compute slices add up to at most 7, and at most one
// of them has the media engines (+me).
//
// Used by the scheduler's layout planner, to decide only layouts the driver can make, and by the
// agent's fake backend, to refuse the layouts the driver would refuse.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace allot::core {

constexpr int kMigComputeSlices = 7;
constexpr int kMigMemorySlices = 8;

struct MigGeometry {
  int compute_slices = 0;   // of 7: "3g" is 3
  int memory_slices = 0;    // of 8: 1, 2, 4 or 8
  std::vector<int> starts;  // the memory slices an instance may start at
  bool media = false;       // "+me": holds the GPU's media engines
};

// The geometry of a GPU-instance profile ("1g.18gb", "1g.10gb+me", "3g.71gb") on a GPU of
// `gpu_memory_gib` (the whole GPU's, as the catalogue states it: 80, 141, ...): its memory slices
// are its memory over the GPU's, in eighths. None for a name that is not "<N>g.<M>gb[+me]" or
// whose memory matches no slice count of that GPU.
std::optional<MigGeometry> mig_geometry(std::string_view profile, int gpu_memory_gib);

// The first memory slice of each instance of `profiles`, in the order given, for a layout of one
// GPU with all of them; none when they cannot share one GPU (overlap, more than 7 compute slices,
// two with media engines, 4g beside 3g, or a profile mig_geometry does not know). Empty profiles:
// an empty layout (the GPU whole).
std::optional<std::vector<int>> mig_layout_starts(const std::vector<std::string>& profiles,
                                                  int gpu_memory_gib);

}  // namespace allot::core
