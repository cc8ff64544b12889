// Reading requests from a connection's bytes (src/server/http_frame.cpp): seeded random requests,
// with Content-Length or chunked bodies and a second request pipelined behind, read from every
// length of what has arrived.
#include "server/http_frame.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace {

using allot::server::http::Frame;
using allot::server::http::frame;
using allot::server::http::Limits;

constexpr Limits kLimits{64 << 10, 100, 1 << 20};

struct Made {
  std::string raw;  // the request on the wire
  std::string method, target, body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool chunked = false;
};

Made make_request(std::mt19937& rng) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  Made m;
  m.method = pick(2) ? "POST" : "PUT";
  m.target = "/api/v1/x" + std::to_string(pick(1000)) + (pick(3) ? "" : "?q=1");
  m.body.resize(static_cast<std::size_t>(pick(4) ? pick(3000) : 0));
  for (auto& c : m.body) c = static_cast<char>(pick(256));  // any bytes, CRLF included
  m.chunked = pick(2);
  for (int i = pick(5); i > 0; --i) {
    m.headers.emplace_back((pick(2) ? "X-Tag-" : "x-tag-") + std::to_string(i),
                           "v" + std::to_string(pick(100000)));
  }
  m.raw = m.method + " " + m.target + " HTTP/1.1\r\n";
  for (const auto& [k, v] : m.headers) m.raw += k + ":" + (pick(2) ? " " : "") + v + "\r\n";
  if (!m.chunked) {
    m.raw += "Content-Length: " + std::to_string(m.body.size()) + "\r\n\r\n" + m.body;
    return m;
  }
  m.raw += "Transfer-Encoding: chunked\r\n\r\n";
  for (std::size_t at = 0; at < m.body.size();) {
    const std::size_t n = std::min(m.body.size() - at, static_cast<std::size_t>(1 + pick(700)));
    char size[32];
    std::snprintf(size, sizeof(size), pick(2) ? "%zx" : "%zX", n);
    m.raw += std::string(size) + (pick(4) ? "" : ";ext=1") + "\r\n" + m.body.substr(at, n) + "\r\n";
    at += n;
  }
  m.raw += "0\r\n";
  if (!pick(3)) m.raw += "Trailer-Field: t\r\n";
  m.raw += "\r\n";
  return m;
}

std::string body_of(const std::string& in, const Frame& f) {
  return f.chunked ? f.body : in.substr(f.head, f.total - f.head);
}

TEST(HttpFrame, EveryArrivalOfRandomRequestsReadsTheSameRequest) {
  std::mt19937 rng(20261201);
  for (int scenario = 0; scenario < 2000; ++scenario) {
    const Made m = make_request(rng);
    const Made next = make_request(rng);
    const std::string wire = m.raw + next.raw;  // pipelined
    SCOPED_TRACE("scenario " + std::to_string(scenario));
    // Shorter than the request: never complete, never refused.
    std::vector<std::size_t> lengths;
    for (std::size_t n = 0; n < std::min<std::size_t>(m.raw.size(), 200); ++n) lengths.push_back(n);
    for (int i = 0; i < 30; ++i) lengths.push_back(rng() % m.raw.size());
    for (std::size_t n : lengths) {
      const Frame f = frame(std::string_view(wire).substr(0, n), kLimits);
      ASSERT_EQ(f.kind, Frame::kIncomplete) << "after " << n << " of " << m.raw.size() << " bytes";
    }
    // Whole, with the next request behind it: this one, exactly.
    const Frame f = frame(wire, kLimits);
    ASSERT_EQ(f.kind, Frame::kComplete);
    EXPECT_EQ(f.total, m.raw.size());
    EXPECT_EQ(f.method, m.method);
    EXPECT_EQ(f.target, m.target);
    EXPECT_EQ(f.chunked, m.chunked);
    EXPECT_EQ(body_of(wire, f), m.body);
    for (const auto& [k, v] : m.headers) {
      auto it = f.headers.find(k);
      ASSERT_NE(it, f.headers.end()) << k;
      EXPECT_EQ(it->second, v);
    }
    EXPECT_FALSE(f.close);
    // What cpp-httplib is given reads as the same request, with a Content-Length.
    const std::string passed = allot::server::http::for_processor(wire, f);
    const Frame g = frame(passed, kLimits);
    ASSERT_EQ(g.kind, Frame::kComplete);
    EXPECT_EQ(g.total, passed.size());
    EXPECT_FALSE(g.chunked);
    EXPECT_EQ(body_of(passed, g), m.body);
    EXPECT_EQ(g.headers.count("Transfer-Encoding"), 0u);
    // And the next one follows from where this one ended.
    const Frame h = frame(std::string_view(wire).substr(f.total), kLimits);
    ASSERT_EQ(h.kind, Frame::kComplete);
    EXPECT_EQ(body_of(wire.substr(f.total), h), next.body);
  }
}

TEST(HttpFrame, ConnectionAndVersion) {
  auto close_of = [](const std::string& head) {
    const Frame f = frame(head + "\r\n", kLimits);
    EXPECT_EQ(f.kind, Frame::kComplete) << head;
    return std::make_pair(f.close, f.say_keep_alive);
  };
  EXPECT_EQ(close_of("GET / HTTP/1.1\r\n"), std::make_pair(false, false));
  EXPECT_EQ(close_of("GET / HTTP/1.1\r\nConnection: close\r\n"), std::make_pair(true, false));
  EXPECT_EQ(close_of("GET / HTTP/1.1\r\nconnection: Upgrade, CLOSE\r\n"),
            std::make_pair(true, false));
  EXPECT_EQ(close_of("GET / HTTP/1.0\r\n"), std::make_pair(true, false));
  EXPECT_EQ(close_of("GET / HTTP/1.0\r\nConnection: keep-alive\r\n"), std::make_pair(false, true));
  // Empty lines before a request are passed over (RFC 9112 §2.2).
  EXPECT_EQ(frame("\r\n\r\nGET / HTTP/1.1\r\n\r\n", kLimits).kind, Frame::kComplete);
}

// Found by fuzz_http_frame: a chunk-size line over 1 KiB (a long extension) was refused when it
// arrived without its CRLF and accepted when it came whole.
TEST(HttpFrame, ALongChunkLineIsRefusedHoweverItArrives) {
  const std::string head = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string wire = head + "5;" + std::string(1100, 'x') + "\r\nhello\r\n0\r\n\r\n";
  EXPECT_EQ(frame(wire, kLimits).kind, Frame::kRefused);
  for (std::size_t n = head.size(); n < wire.size(); n += 97) {
    EXPECT_NE(frame(std::string_view(wire).substr(0, n), kLimits).kind, Frame::kComplete) << n;
  }
  const std::string fine = head + "5;" + std::string(1000, 'x') + "\r\nhello\r\n0\r\n\r\n";
  EXPECT_EQ(frame(fine, kLimits).kind, Frame::kComplete);
}

TEST(HttpFrame, AnswersOnTheWire) {
  httplib::Response res;
  res.status = 201;
  res.set_content("{}", "application/json");
  res.set_header("Content-Length", "999");  // written from the body, whatever it says
  EXPECT_EQ(
      allot::server::http::serialize(res, false),
      "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(allot::server::http::serialize(res, true),
            "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
            "Connection: close\r\n\r\n{}");
  EXPECT_NE(allot::server::http::serialize(res, false, true).find("Connection: keep-alive\r\n"),
            std::string::npos);
}

}  // namespace
