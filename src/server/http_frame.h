#pragma once
// HTTP/1.1 requests read from a connection's bytes and responses written to them (RFC 9112),
// for the event loop (event_server.h); no sockets here.
#include <httplib.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace allot::server::http {

struct Limits {
  std::size_t max_head;     // request line and headers; larger: 431
  std::size_t max_headers;  // more: 431
  std::size_t max_body;     // larger: 413
};

// One request framed from the start of a connection's input.
struct Frame {
  enum Kind { kIncomplete, kComplete, kRefused } kind = kIncomplete;
  std::size_t head = 0;         // bytes of the request line and headers, with the blank line
  std::size_t total = 0;        // with the body
  bool close = false;           // the connection closes after the answer
  bool say_keep_alive = false;  // an HTTP/1.0 client asked to keep it: the answer says it does
  bool expect_continue = false;
  bool chunked = false;  // the body, decoded, is in `body`
  std::string body;
  // Header lines (offset, length) the processor must not see: Expect (the loop sent the 100
  // Continue; cpp-httplib would send another) and Transfer-Encoding (the loop decoded the body).
  std::vector<std::pair<std::size_t, std::size_t>> drop;
  std::string_view method, target;
  httplib::Headers headers;
  int status = 0;  // kRefused: the answer
  std::string field, reason;
};

// Reads the request at the start of `in`: incomplete (wait for more), complete (its head,
// headers and body), or refused (answer `status` and close). Bodies come with Content-Length or
// chunked.
Frame frame(std::string_view in, const Limits& limits);

// The status line's words for `status` ("OK" for 200).
const char* reason_phrase(int status);

// A response on the wire; "Connection: close" when `close`, "Connection: keep-alive" when an
// HTTP/1.0 client asked for it (`say_keep_alive`).
std::string serialize(const httplib::Response& res, bool close, bool say_keep_alive = false);

// The request framed at the start of `in` as cpp-httplib is to read it: as received, or without
// the lines it must not see, and a chunked body decoded with its Content-Length.
std::string for_processor(const std::string& in, const Frame& f);

}  // namespace allot::server::http
