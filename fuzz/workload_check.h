// The contract every trace loader keeps (src/sim/trace_loaders.h): every data line becomes a job,
// or is skipped with its line and field, or is left out on purpose (counted); the jobs are in
// submit order, start at time 0 or later, and ask for something a simulation can run.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>

#include "check.h"
#include "sim/diagnostics.h"
#include "sim/workload.h"

namespace allot::fuzz {

inline void check_workload(const sim::Workload& w, const sim::Diagnostics& diag,
                           std::size_t data_lines) {
  for (const auto& s : diag.skipped()) {
    FUZZ_CHECK(!s.field.empty() && !s.reason.empty() && s.line >= 1, "skipped without a reason");
  }
  FUZZ_CHECK(w.jobs.size() + diag.skipped().size() + diag.ignored() == data_lines,
             "%zu jobs + %zu skipped + %zu ignored, of %zu data lines", w.jobs.size(),
             diag.skipped().size(), diag.ignored(), data_lines);
  for (std::size_t i = 0; i < w.jobs.size(); ++i) {
    const auto& j = w.jobs[i];
    FUZZ_CHECK(j.line >= 1, "job without its line");
    FUZZ_CHECK(i == 0 || w.jobs[i - 1].submit <= j.submit, "line %zu out of submit order", j.line);
    FUZZ_CHECK(j.submit >= 0, "line %zu: submit %lld", j.line, static_cast<long long>(j.submit));
    core::Time end = 0;
    FUZZ_CHECK(j.duration >= 1 && !__builtin_add_overflow(j.submit, j.duration, &end),
               "line %zu: duration %lld from %lld", j.line, static_cast<long long>(j.duration),
               static_cast<long long>(j.submit));
    FUZZ_CHECK(j.gpus >= 1, "line %zu: %d GPUs", j.line, j.gpus);
    FUZZ_CHECK(j.nodes == 0 || (j.gpus_per_node >= 1 && j.nodes * j.gpus_per_node == j.gpus),
               "line %zu: %d nodes x %d GPUs != %d", j.line, j.nodes, j.gpus_per_node, j.gpus);
    FUZZ_CHECK(j.gpu_milli >= 1 && j.gpu_milli <= core::kWholeGpu, "line %zu: gpu_milli %lld",
               j.line, static_cast<long long>(j.gpu_milli));
    FUZZ_CHECK(j.utilization >= 0 && j.utilization <= 1, "line %zu: utilization %g", j.line,
               j.utilization);
    FUZZ_CHECK(j.budget.size() > 1 && j.budget[0] == '/', "line %zu: budget '%s'", j.line,
               j.budget.c_str());
    FUZZ_CHECK(!j.min_runtime || *j.min_runtime >= 0, "line %zu: negative min_runtime", j.line);
  }
  FUZZ_CHECK(std::isfinite(sim::demand_gpu_seconds(w)), "demand not finite");
}

// Lines of `text` as std::getline splits them, from line `first` (1-based), that are not blank
// ("" or "\r"); in the native format, blank means only spaces, tabs and CRs, and lines starting
// with '#' are comments.
inline std::size_t data_lines(const std::string& text, std::size_t first, bool native) {
  std::size_t n = 0, line_no = 0, at = 0;
  while (at < text.size()) {
    auto eol = text.find('\n', at);
    if (eol == std::string::npos) eol = text.size();
    const std::string line = text.substr(at, eol - at);
    at = eol + 1;
    if (++line_no < first) continue;
    if (native) {
      if (line.find_first_not_of(" \t\r") == std::string::npos || line[0] == '#') continue;
    } else if (line.empty() || line == "\r") {
      continue;
    }
    ++n;
  }
  return n;
}

}  // namespace allot::fuzz
