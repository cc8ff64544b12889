// How report.html writes numbers: a percentage with one decimal, and a number in a printf format.
// Shared by report_html.cpp and report_budgets.cpp so that the pages agree.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdio>
#include <string>

namespace allot::sim {

inline std::string pct(double x) {
  char b[16];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * x);
  return b;
}

inline std::string fmt(double x, const char* f = "%.0f") {
  char b[32];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

}  // namespace allot::sim
