// The Philly trace reader (src/sim/philly_trace.cpp) on any text: a file refused as a whole names
// its header; otherwise see workload_check.h for the contract.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sim/trace_loaders.h"
#include "workload_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  allot::sim::Diagnostics diag;
  auto r = allot::sim::parse_philly_trace(text, "philly.csv", diag);
  if (!r.ok()) {
    allot::fuzz::check_error(r.error());
    return 0;
  }
  allot::fuzz::check_workload(r.value(), diag, allot::fuzz::data_lines(text, 2, false));
  for (const auto& j : r.value().jobs) {
    FUZZ_CHECK(j.budget.rfind("/philly/", 0) == 0 && j.budget.size() > 8, "budget '%s'",
               j.budget.c_str());
  }
  return 0;
}
