// report.html's per-budget sections: each budget's allocation against usage over time under every
// policy (the GPUs it held, allocated and not, against its share of available capacity and its
// demand), and its impact, waits, preemptions and lost GPU-hours side by side across policies.
#pragma once

#include <string>

#include "sim/reports.h"

namespace allot::sim {

// Days from the first submission to the latest end of any run: every time axis's length, so
// the plots of different policies line up.
double report_days(const Report& r);

// The budgets-across-policies tables.
std::string budget_comparison_html(const Report& r);

// One chart per budget and policy, same axes for a budget across policies.
std::string budget_time_series_html(const Report& r);

}  // namespace allot::sim
