// GET /report's numbers without HTTP: owed and delivered GPU-time per budget and the four
// metrics (server/metrics.h), from the store's records and the scheduling loop's snapshot.
// Stateless; safe from any thread (it only reads the store and an immutable snapshot).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/controller.h"
#include "store/store.h"

namespace allot::server {

// A report keeps an hourly series per cluster (two) and per leaf budget in scope (two) over its
// period: at most a leap year, and at most this many hourly values in all (64 MiB).
constexpr core::Duration kMaxReportPeriod = 366 * core::kDay;
constexpr std::size_t kMaxReportValues = std::size_t{8} << 20;
// A report with steps (GET /report?step=): each step at least an hour, at most this many.
constexpr core::Duration kMinReportStep = core::kHour;
constexpr core::Duration kMaxReportSteps = 1000;
// And at most this many budget entries over all its steps (steps x budgets in scope).
constexpr std::size_t kMaxReportStepBudgets = 100000;

// The ledger's entries over [from, to) plus the open segments of jobs running `now`, each
// clipped to [from, to): what GET /usage and GET /report count.
std::vector<store::LedgerEntry> usage_entries(const store::Store& store, core::Time now,
                                              core::Time from, core::Time to);

// The report over [from, to) for the budgets within `scope` (the JSON of GET /report, see
// docs/api.md). `entries` as usage_entries() gives them. Refused (field "from") when the period
// holds more hourly values than kMaxReportValues for the budgets and clusters in scope.
// With a `step` (seconds, 0: none), the report also has `steps`: the report of each
// [from + i x step, from + (i + 1) x step) clipped to `to`, without steps of its own, computed
// from what the whole period read from the store once; refused (field "step") when shorter than
// kMinReportStep or when more than kMaxReportSteps.
core::Result<nlohmann::json> budget_report(const store::Store& store, const Snapshot& snap,
                                           core::Time from, core::Time to, const std::string& scope,
                                           const std::vector<store::LedgerEntry>& entries,
                                           core::Duration step = 0);

}  // namespace allot::server
