// A node's health verdict from its GPU samples (backend errors, GPUs lost, ECC and XID
// thresholds, temperature) and an optional operator-supplied check script. evaluate() is pure;
// HealthMonitor keeps the fatal XIDs of every 1 Hz sample (a sample carries only the XIDs seen
// since the previous one, and the verdict is sent every few seconds); run_health_script() runs a
// real process with a timeout.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "agent/gpu_backend.h"

namespace allot::agent {

struct HealthThresholds {
  std::int64_t max_ecc_uncorrected = 0;  // more than this many volatile uncorrected errors
  double max_temp_c = 90;
  // XIDs that mean the GPU needs a person or a reset (NVIDIA's XID table: 48 DBE, 62, 64, 74
  // NVLink, 79 fell off the bus, 92, 95 uncontained ECC, 154 the driver's own "recovery action"
  // signal, ...): held for xid_hold_seconds.
  std::vector<int> fatal_xids = {48, 61, 62, 63, 64, 69, 74, 79, 92, 95, 119, 120, 154};
  // XIDs whose recovery is the application's restart, not the GPU's (94: a contained ECC error,
  // 68: a video-decoder exception): the node is unhealthy while one is recent, then they clear.
  std::vector<int> recoverable_xids = {68, 94};
  double recoverable_xid_hold_seconds = 60;
  std::string script;  // operator hook: exit 0 = healthy; otherwise its first output line is why
  std::chrono::milliseconds script_timeout{10000};
  // How long a fatal XID keeps the node unhealthy (HealthMonitor); 0 = until the agent restarts.
  double xid_hold_seconds = 0;
};

struct HealthVerdict {
  bool healthy = true;
  std::string reason;  // for an unhealthy verdict: every failed check, "; "-separated
};

// `expected`: what discovery found at start (a GPU missing from the samples is a failure).
HealthVerdict evaluate(const std::vector<GpuDevice>& expected,
                       const core::Result<std::vector<GpuSample>>& samples,
                       const HealthThresholds& thresholds);

// Runs the script (via /bin/sh -c) and kills it, and what it started, at the timeout.
HealthVerdict run_health_script(const std::string& script, std::chrono::milliseconds timeout);

// `into` becomes unhealthy if `other` is, with both reasons.
void merge(HealthVerdict& into, const HealthVerdict& other);

// evaluate() over the latest sample, plus every fatal XID seen in any sample observed (each held
// for thresholds.xid_hold_seconds) and every recoverable one (held for
// recoverable_xid_hold_seconds).
class HealthMonitor {
 public:
  HealthMonitor(std::vector<GpuDevice> expected, HealthThresholds thresholds);
  void observe(double now, const core::Result<std::vector<GpuSample>>& samples);
  HealthVerdict verdict() const;

 private:
  std::vector<GpuDevice> expected_;
  HealthThresholds thresholds_;
  core::Result<std::vector<GpuSample>> last_{std::vector<GpuSample>{}};
  double now_ = 0;
  std::map<std::pair<int, int>, double> xids_;  // (GPU, XID) -> when last seen
};

}  // namespace allot::agent
