// The native JSON Lines workload reader (src/sim/native_workload.cpp) on any text: see
// workload_check.h for the contract.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sim/trace_loaders.h"
#include "workload_check.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  allot::sim::Diagnostics diag;
  auto r = allot::sim::parse_native_workload(text, "jobs.jsonl", diag);
  FUZZ_CHECK(r.ok(), "the whole file refused: %s", r.error().message().c_str());
  allot::fuzz::check_workload(r.value(), diag, allot::fuzz::data_lines(text, 1, true));
  return 0;
}
