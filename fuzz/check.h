// What the harnesses share: a contract check that stops the run (libFuzzer then saves the input
// as a crash and prints the message), and the rule every error of a parser must follow.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

#define FUZZ_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "contract broken at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                   \
      std::fprintf(stderr, "\n");                                                          \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

namespace allot::fuzz {

// A refusal gives its reason (and names the field at fault: docs/api.md allows "" only where no
// single field is to blame, which the harnesses check where it matters).
inline void check_error(const core::Error& e) {
  FUZZ_CHECK(!e.reason.empty(), "error without a reason: field '%s'", e.field.c_str());
}

// ... and, where it goes back over the wire, can be written as JSON (the API and the agent send
// errors as {"field": ..., "reason": ...}; text that is not UTF-8 would throw there).
inline void check_error_json(const core::Error& e) {
  check_error(e);
  try {
    (void)nlohmann::json{{"field", e.field}, {"reason", e.reason}}.dump();
  } catch (const nlohmann::json::exception& x) {
    FUZZ_CHECK(false, "error not writable as JSON (%s): %s", x.what(), e.message().c_str());
  }
}

}  // namespace allot::fuzz
