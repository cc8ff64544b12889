// A node's health verdict from its GPU samples (backend errors, GPUs lost, ECC and XID
// thresholds, temperature) and an optional operator-supplied check script. evaluate() is pure;
// run_health_script() runs a real process with a timeout.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "agent/gpu_backend.h"

namespace allot::agent {

struct HealthThresholds {
  std::int64_t max_ecc_uncorrected = 0;  // more than this many volatile uncorrected errors
  double max_temp_c = 90;
  // XIDs that mean the GPU needs attention (NVIDIA's list: 48 DBE, 62, 64, 74 NVLink, 79 fell
  // off the bus, 92, 94, 95 uncontained ECC, ...).
  std::vector<int> fatal_xids = {48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120};
  std::string script;  // operator hook: exit 0 = healthy; otherwise its first output line is why
  std::chrono::milliseconds script_timeout{10000};
};

struct HealthVerdict {
  bool healthy = true;
  std::string reason;  // for an unhealthy verdict: every failed check, "; "-separated
};

// `expected`: what discovery found at start (a GPU missing from the samples is a failure).
HealthVerdict evaluate(const std::vector<GpuDevice>& expected,
                       const core::Result<std::vector<GpuSample>>& samples,
                       const HealthThresholds& thresholds);

// Runs the script (via /bin/sh -c) and kills it at the timeout.
HealthVerdict run_health_script(const std::string& script, std::chrono::milliseconds timeout);

}  // namespace allot::agent
