// The two node filters every placement search applies (gpu_pool.cpp's best fit and
// consolidated_placement.cpp's Helios rule), kept in one place so that the two rules cannot
// drift apart on which nodes a request may use. Internal to src/core.
//
// Thread-safety: none; owned by one Scheduler and used by one thread at a time, like all of
// src/core (which has no threads, I/O or clock).
#pragma once

#include <algorithm>
#include <vector>

#include "core/gpu_pool.h"

namespace allot::core {

// Whether node n is set in the exclusion mask (nullptr: none excluded; nodes past its end are not).
inline bool excluded_node(const NodeMask* ex, NodeId n) {
  return ex && n < ex->size() && (*ex)[n];
}

// Whether a request that accepts `models` (empty: any) may run on model m.
inline bool accepts(const std::vector<GpuModelId>& models, GpuModelId m) {
  return models.empty() || std::find(models.begin(), models.end(), m) != models.end();
}

}  // namespace allot::core
