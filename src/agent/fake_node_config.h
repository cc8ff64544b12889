// The fake backend's node description, parsed from YAML (format: docs/agent.md "The fake
// backend"): the GPUs, their telemetry defaults, a script of timed changes and faults, and a
// control directory whose files override telemetry while the agent runs.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace allot::agent {

// What a script event or a control file can set on one GPU.
enum class FakeField : std::uint8_t {
  UtilPct,
  MemUsedMib,
  TempC,
  PowerW,
  EccUncorrected,
  EccCorrected,
  Lost,  // 1: the GPU fell off the bus
};
constexpr std::size_t kFakeFields = 7;
const char* fake_field_name(FakeField f);
std::optional<FakeField> fake_field(std::string_view name);

// One GPU's telemetry, indexed by FakeField.
using FakeGpuState = std::array<double, kFakeFields>;

struct FakeScriptEvent {
  double at = 0;  // seconds since the agent started
  int gpu = -1;   // -1: every GPU
  std::vector<std::pair<FakeField, double>> set;
  std::optional<int> xid;  // reported once, in the first sample at or after `at`
};

struct FakeNodeConfig {
  std::string model;  // catalogue name ("H100")
  std::string name;   // the driver's name ("NVIDIA H100 80GB HBM3")
  int gpus = 0;
  std::int64_t memory_mib = 0;
  std::string uuid_seed;                         // "" = the agent's node name
  std::map<int, std::vector<std::string>> mig;   // GPU index -> MIG profiles
  FakeGpuState defaults{0, 0, 35, 70, 0, 0, 0};  // util, mem, temp, power, ecc, ecc, lost
  std::vector<FakeScriptEvent> script;           // in time order
  std::string control_dir;                       // "" = none; may contain "{node}"
  // How long re-partitioning a GPU into MIG instances takes (GpuBackend::reconfigure_mig); a
  // driver takes seconds, which the agent's loop waits through.
  double mig_reconfigure_seconds = 1;
};

// `file` names the source in errors ("<file>:<line>: <field>").
core::Result<FakeNodeConfig> parse_fake_node(const std::string& text, const std::string& file);

// GPU-instance slices of an A100/H100/H200/B200: a fake MIG slice's share is its compute
// slices over this (1g = 142 milli).
constexpr int kMigSlices = 7;

// "1g.10gb" -> (gpu slices 1, compute slices 1, 10 GiB); "1c.3g.40gb" -> (3, 1, 40).
struct MigProfile {
  int gpu_slices = 0;
  int compute_slices = 0;
  int memory_gib = 0;
};
std::optional<MigProfile> parse_mig_profile(std::string_view name);

}  // namespace allot::agent
