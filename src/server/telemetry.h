// What the server makes of agents' telemetry (docs/agent-protocol.md, "Telemetry"): a job's
// summary as JSON, the flags people see (idle, oversized-memory, input-bound), and the smallest
// GPU (a model of the catalogue or a MIG slice) that would hold a job's peak memory.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/gpu_catalog.h"
#include "store/store.h"

namespace allot::server {

struct TelemetryFlag {
  std::string flag;  // idle, oversized-memory, input-bound
  std::string hint;  // what a person could do about it
};

struct FlagRules {
  double idle_util_pct = 10;          // mean use below this ...
  double idle_seconds = 600;          // ... over at least this long
  double min_seconds = 60;            // other flags need this much measured time
  double headroom = 1.1;              // memory a smaller GPU must have over the peak
  double input_util_pct = 50;         // input-bound: GPU use below this while ...
  double input_io_wait_pct = 20;      // ... I/O wait is at least this, or
  double cpu_pinned_fraction = 0.95;  // ... CPU use is at this fraction of its limit
};

// A GPU a job could use instead: a catalogue model or a MIG profile of the GPU it ran on.
struct GpuFit {
  std::string name;  // "L40S", "MIG 2g.20gb"
  double memory_gib = 0;
  core::Milli milli = 0;  // a MIG profile's compute share; 0 for a whole GPU model
};
// The smallest option with at least `need_gib` of memory, if any. `gpu_gib`: the memory of each
// GPU the job ran on, whose MIG profiles are offered (none when it matches no GPU the catalogue
// splits, e.g. 0: unknown).
std::optional<GpuFit> smallest_fit(double need_gib, const core::GpuCatalog& catalog,
                                   double gpu_gib);

// `spec`: the job's canonical spec (gpus_per_node, gpu_milli, cpus).
std::vector<TelemetryFlag> telemetry_flags(const store::TelemetryRecord& t,
                                           const nlohmann::json& spec,
                                           const core::GpuCatalog& catalog,
                                           const FlagRules& rules = {});

// The summary of a row as the API shows it.
nlohmann::json telemetry_json(const store::TelemetryRecord& t);

}  // namespace allot::server
