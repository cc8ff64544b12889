// The health rules over GPU samples, and the monitor that remembers fatal XIDs between verdicts.
#include "agent/health.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace allot::agent {
namespace {

const char* xid_meaning(int xid) {
  switch (xid) {
    case 48:
      return "double-bit ECC error";
    case 61:
      return "internal micro-controller breakpoint";
    case 62:
      return "internal micro-controller halt";
    case 63:
      return "ECC page retirement or row remapping recorded";
    case 64:
      return "ECC page retirement or row remapping failed";
    case 68:
      return "video decoder exception";
    case 69:
      return "graphics engine class error";
    case 74:
      return "NVLink error";
    case 79:
      return "GPU fell off the bus";
    case 92:
      return "high single-bit ECC error rate";
    case 94:
      return "contained ECC error";
    case 95:
      return "uncontained ECC error";
    case 119:
      return "GSP RPC timeout";
    case 120:
      return "GSP error";
    case 154:
      return "the driver asks for a GPU reset or a reboot";
    default:
      return nullptr;
  }
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string xid_reason(int gpu, int xid) {
  std::string r = "GPU " + std::to_string(gpu) + ": XID " + std::to_string(xid);
  if (const char* m = xid_meaning(xid)) r += std::string(" (") + m + ")";
  return r;
}

bool is_fatal(const HealthThresholds& t, int xid) {
  return std::find(t.fatal_xids.begin(), t.fatal_xids.end(), xid) != t.fatal_xids.end();
}

bool is_recoverable(const HealthThresholds& t, int xid) {
  return std::find(t.recoverable_xids.begin(), t.recoverable_xids.end(), xid) !=
         t.recoverable_xids.end();
}

// A fatal or recoverable XID makes the node unhealthy (recoverable ones only while held).
bool counts(const HealthThresholds& t, int xid) {
  return is_fatal(t, xid) || is_recoverable(t, xid);
}

void fail(HealthVerdict& v, const std::string& why) {
  v.healthy = false;
  if (!v.reason.empty()) v.reason += "; ";
  v.reason += why;
}

}  // namespace

HealthVerdict evaluate(const std::vector<GpuDevice>& expected,
                       const core::Result<std::vector<GpuSample>>& samples,
                       const HealthThresholds& thresholds) {
  HealthVerdict v;
  if (!samples.ok()) {
    fail(v, "GPU backend: " + samples.error().message());
    return v;
  }
  std::set<int> seen;
  for (const GpuSample& s : samples.value()) seen.insert(s.index);
  for (const GpuDevice& d : expected) {
    if (!seen.count(d.index)) {
      fail(v, "GPU " + std::to_string(d.index) + " (" + d.uuid + ") missing from the samples");
    }
  }
  std::vector<const GpuSample*> by_index;
  for (const GpuSample& s : samples.value()) by_index.push_back(&s);
  std::sort(by_index.begin(), by_index.end(),
            [](const GpuSample* a, const GpuSample* b) { return a->index < b->index; });
  for (const GpuSample* s : by_index) {
    const std::string gpu = "GPU " + std::to_string(s->index);
    if (!s->present) {
      fail(v, gpu + " lost" + (s->error.empty() ? "" : ": " + s->error));
      continue;
    }
    if (s->ecc_uncorrected > thresholds.max_ecc_uncorrected) {
      fail(v, gpu + ": " + std::to_string(s->ecc_uncorrected) +
                  " uncorrected ECC errors (more than " +
                  std::to_string(thresholds.max_ecc_uncorrected) + ")");
    }
    std::set<int> reported;
    for (int xid : s->xids) {
      if (counts(thresholds, xid) && reported.insert(xid).second) {
        fail(v, xid_reason(s->index, xid));
      }
    }
    if (s->temp_c > thresholds.max_temp_c) {
      fail(v, gpu + ": temperature " + number(s->temp_c) + " C (above " +
                  number(thresholds.max_temp_c) + " C)");
    }
  }
  return v;
}

void merge(HealthVerdict& into, const HealthVerdict& other) {
  if (!other.healthy) fail(into, other.reason);
}

HealthMonitor::HealthMonitor(std::vector<GpuDevice> expected, HealthThresholds thresholds)
    : expected_(std::move(expected)), thresholds_(std::move(thresholds)) {}

void HealthMonitor::observe(double now, const core::Result<std::vector<GpuSample>>& samples) {
  now_ = now;
  last_ = samples;
  if (samples.ok()) {
    for (const GpuSample& s : samples.value()) {
      for (int xid : s.xids) {
        if (counts(thresholds_, xid)) xids_[{s.index, xid}] = now;
      }
    }
  }
  std::erase_if(xids_, [&](const auto& kv) {
    const double hold = is_fatal(thresholds_, kv.first.second)
                            ? thresholds_.xid_hold_seconds
                            : thresholds_.recoverable_xid_hold_seconds;
    return hold > 0 && now - kv.second >= hold;
  });
}

HealthVerdict HealthMonitor::verdict() const {
  if (!last_.ok()) {
    HealthVerdict v = evaluate(expected_, last_, thresholds_);
    for (const auto& [key, when] : xids_) fail(v, xid_reason(key.first, key.second));
    return v;
  }
  // The latest sample, carrying every XID still held rather than only its own.
  std::vector<GpuSample> samples = last_.value();
  std::set<int> sampled;
  for (GpuSample& s : samples) {
    s.xids.clear();
    sampled.insert(s.index);
    for (const auto& [key, when] : xids_) {
      if (key.first == s.index) s.xids.push_back(key.second);
    }
  }
  HealthVerdict v = evaluate(expected_, samples, thresholds_);
  for (const auto& [key, when] : xids_) {
    if (!sampled.count(key.first)) fail(v, xid_reason(key.first, key.second));
  }
  return v;
}

}  // namespace allot::agent
