// HTTP request framing (src/server/http_frame.cpp) on any bytes a client can send. Contract:
// - a refusal is an error status with a field and a reason, and closes the connection;
// - a complete request lies within what arrived, does not depend on the bytes behind it
//   (pipelining), and every shorter arrival of it is incomplete (never complete, never refused:
//   how TCP splits a request must not change the answer);
// - what cpp-httplib is then given frames as the same request, with its body inline.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "check.h"
#include "server/http_frame.h"

namespace {

using allot::server::http::Frame;
using allot::server::http::Limits;

// Small enough that the fuzzer reaches every limit.
constexpr Limits kLimits{2048, 16, 4096};
// The processor's copy may carry one more header line (the decoded body's Content-Length).
constexpr Limits kProcessorLimits{kLimits.max_head + 64, kLimits.max_headers + 1, kLimits.max_body};

std::string body_of(std::string_view in, const Frame& f) {
  return f.chunked ? f.body : std::string(in.substr(f.head, f.total - f.head));
}

void check_refusal(const Frame& f) {
  FUZZ_CHECK(f.status >= 400 && f.status <= 599, "refused with status %d", f.status);
  FUZZ_CHECK(!f.field.empty() && !f.reason.empty(), "refusal %d without field or reason", f.status);
  FUZZ_CHECK(f.close, "a refusal must close the connection");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const Frame f = allot::server::http::frame(in, kLimits);
  if (f.kind == Frame::kRefused) {
    check_refusal(f);
    return 0;
  }
  if (f.kind == Frame::kIncomplete) return 0;

  FUZZ_CHECK(f.head > 0 && f.head <= f.total && f.total <= in.size(), "head %zu total %zu of %zu",
             f.head, f.total, in.size());
  FUZZ_CHECK(!f.method.empty() && !f.target.empty(), "complete without method or target");
  const std::string body = body_of(in, f);
  FUZZ_CHECK(body.size() <= kLimits.max_body, "body of %zu bytes over the limit", body.size());

  // The same request alone (nothing pipelined behind it) frames the same.
  const std::string alone = in.substr(0, f.total);
  const Frame a = allot::server::http::frame(alone, kLimits);
  FUZZ_CHECK(a.kind == Frame::kComplete && a.total == f.total && a.head == f.head,
             "alone: kind %d total %zu (was %zu)", a.kind, a.total, f.total);
  FUZZ_CHECK(body_of(alone, a) == body, "alone: another body");

  // Shorter arrivals: a few cut points, and just before line ends (where a line is longest
  // without its end), up to 64 of them.
  std::vector<std::size_t> cuts{0, f.head - 1, f.head, (f.head + f.total) / 2, f.total - 1};
  for (auto cr = alone.find('\r'); cr != std::string::npos && cuts.size() < 69;
       cr = alone.find('\r', cr + 1)) {
    cuts.push_back(cr);
  }
  for (std::size_t n : cuts) {
    if (n >= f.total) continue;
    const Frame p = allot::server::http::frame(std::string_view(alone).substr(0, n), kLimits);
    FUZZ_CHECK(p.kind == Frame::kIncomplete,
               "after %zu of %zu bytes: kind %d (status %d, %s: %s), not incomplete", n, f.total,
               p.kind, p.status, p.field.c_str(), p.reason.c_str());
  }

  // What the processor is given reads as the same request, with a Content-Length.
  const std::string passed = allot::server::http::for_processor(in, f);
  const Frame g = allot::server::http::frame(passed, kProcessorLimits);
  FUZZ_CHECK(g.kind == Frame::kComplete && g.total == passed.size(),
             "processor's copy: kind %d total %zu of %zu (%d %s: %s)", g.kind, g.total,
             passed.size(), g.status, g.field.c_str(), g.reason.c_str());
  FUZZ_CHECK(!g.chunked && !g.expect_continue, "processor's copy still chunked or expecting");
  FUZZ_CHECK(g.method == f.method && g.target == f.target, "processor's copy: another request");
  FUZZ_CHECK(body_of(passed, g) == body, "processor's copy: another body");
  FUZZ_CHECK(g.close == f.close, "processor's copy: another Connection");
  return 0;
}
