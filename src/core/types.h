// Basic quantities of the scheduling core. Time is always an argument: the core never reads a
// clock.
//
// Thread-safety: plain values; copies may be read from several threads while none writes.
#pragma once

#include <cstdint>
#include <limits>

namespace allot::core {

using Time = std::int64_t;      // seconds since an epoch chosen by the caller; never negative
using Duration = std::int64_t;  // seconds
using JobId = std::uint64_t;
using NodeId = std::uint32_t;     // dense index into the scheduler's nodes
using ClusterId = std::uint32_t;  // dense index into the scheduler's clusters
using BudgetId = std::uint32_t;   // dense index into the budget tree
using GpuModelId = std::uint16_t;
using BlockId = std::uint32_t;  // interned topology block label
// A MIG profile in the catalogue (GpuCatalog::mig_profile); 0 = none (a whole or shared GPU).
using MigProfileId = std::uint16_t;

// GPU capacity is counted in thousandths of a GPU so that a fractional request (a MIG slice or a
// shared GPU) uses the same arithmetic as a whole one. A whole GPU is 1000.
using Milli = std::int64_t;
constexpr Milli kWholeGpu = 1000;

// Usage is charged in milli-GPU-seconds (1000 per GPU-second).
using MilliGpuSeconds = std::int64_t;

constexpr Time kNever = std::numeric_limits<Time>::max();
constexpr BudgetId kNoBudget = std::numeric_limits<BudgetId>::max();
constexpr JobId kNoJob = 0;

constexpr Duration kMinute = 60;
constexpr Duration kHour = 3600;
constexpr Duration kDay = 24 * kHour;

}  // namespace allot::core
