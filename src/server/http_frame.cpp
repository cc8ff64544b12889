#include "server/http_frame.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <utility>

namespace allot::server::http {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}
bool has_token(std::string_view list, std::string_view token) {  // "keep-alive, Upgrade"
  while (!list.empty()) {
    auto comma = list.find(',');
    auto item = list.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (iequals(item, token)) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}
bool is_tchar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

Frame refuse(int status, std::string field, std::string reason) {
  Frame f;
  f.kind = Frame::kRefused;
  f.status = status;
  f.field = std::move(field);
  f.reason = std::move(reason);
  f.close = true;
  return f;
}

// The longest chunk-size line (size and extensions) read.
constexpr std::size_t kMaxChunkLine = 1024;

// A chunked body after f.head (RFC 9112 §7.1): each chunk's size in hex (extensions after ';'
// ignored), its data, CRLF; a zero size, trailer lines (ignored), a blank line. The body limit
// counts all of it as sent, framing included: otherwise chunk extensions or trailers would be an
// unbounded body that nothing reads.
Frame dechunk(std::string_view in, const Limits& o, Frame f) {
  std::size_t at = f.head;
  f.body.clear();
  // Whether the encoded body would exceed the limit once it reaches `end` of the input.
  const auto beyond = [&](std::size_t end) { return end - f.head > o.max_body; };
  for (;;) {
    const auto eol = in.find("\r\n", at);
    // The same bounds whether or not the line's end has arrived: how TCP splits a request must
    // not decide whether it is refused (found by fuzz_http_frame).
    if (beyond(eol == std::string_view::npos ? in.size() : eol + 2)) {
      return refuse(413, "body", "too large (chunk framing included)");
    }
    if ((eol == std::string_view::npos ? in.size() : eol + 1) - at > kMaxChunkLine) {
      return refuse(400, "body", "malformed chunk size");
    }
    if (eol == std::string_view::npos) return f;  // incomplete
    auto size_text = in.substr(at, eol - at);
    size_text = size_text.substr(0, size_text.find(';'));
    while (!size_text.empty() && (size_text.back() == ' ' || size_text.back() == '\t')) {
      size_text.remove_suffix(1);
    }
    std::size_t size = 0;
    if (size_text.empty() || size_text.size() > 15)
      return refuse(400, "body", "malformed chunk size");
    for (char c : size_text) {
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return refuse(400, "body", "malformed chunk size");
      size = size * 16 + static_cast<std::size_t>(d);
    }
    at = eol + 2;
    if (size == 0) break;
    if (f.body.size() + size > o.max_body || beyond(at + size + 2)) {
      return refuse(413, "body", "too large (chunk framing included)");
    }
    if (in.size() < at + size + 2) return f;  // incomplete
    if (in.substr(at + size, 2) != "\r\n") return refuse(400, "body", "chunk without its CRLF");
    f.body.append(in.substr(at, size));
    at += size + 2;
  }
  for (;;) {  // trailer lines, ignored, up to the blank line
    const auto eol = in.find("\r\n", at);
    if (beyond(eol == std::string_view::npos ? in.size() : eol + 2)) {
      return refuse(413, "body", "too large (chunk framing included)");
    }
    if ((eol == std::string_view::npos ? in.size() : eol + 1) - at > o.max_head) {
      return refuse(431, "headers", "too large");
    }
    if (eol == std::string_view::npos) return f;  // incomplete
    const bool blank = eol == at;
    at = eol + 2;
    if (blank) break;
  }
  f.total = at;
  f.kind = Frame::kComplete;
  return f;
}

}  // namespace

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 417:
      return "Expectation Failed";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 501:
      return "Not Implemented";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
  }
}

// Reads the head at the start of `in` (RFC 9112: request line, header fields, blank line) and
// says whether the whole request is there.
Frame frame(std::string_view in, const Limits& o) {
  std::size_t start = 0;
  while (in.substr(start, 2) == "\r\n") start += 2;  // empty lines before a request are allowed
  const auto end = in.find("\r\n\r\n", start);
  if (end == std::string_view::npos) {
    if (in.size() > o.max_head) return refuse(431, "headers", "too large");
    return {};
  }
  if (end + 4 > o.max_head) return refuse(431, "headers", "too large");
  Frame f;
  f.head = end + 4;
  std::string_view head = in.substr(start, end - start + 2);  // each line ends with CRLF
  auto eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  head.remove_prefix(eol + 2);
  const auto sp1 = line.find(' ');
  const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return refuse(400, "request", "malformed request line");
  }
  f.method = line.substr(0, sp1);
  f.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const auto version = line.substr(sp2 + 1);
  if (f.method.empty() || !std::all_of(f.method.begin(), f.method.end(), is_tchar) ||
      f.target.empty()) {
    return refuse(400, "request", "malformed request line");
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return refuse(505, "request", "only HTTP/1.1 and HTTP/1.0 are served");
  }
  bool keep_alive = version == "HTTP/1.1";
  std::optional<std::size_t> length;
  while (!head.empty()) {
    eol = head.find("\r\n");
    line = head.substr(0, eol);
    const std::size_t line_at = static_cast<std::size_t>(line.data() - in.data());
    head.remove_prefix(eol + 2);
    const auto colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos ||
        !std::all_of(line.begin(), line.begin() + static_cast<std::ptrdiff_t>(colon), is_tchar)) {
      return refuse(400, "headers", "malformed header line");
    }
    auto name = line.substr(0, colon);
    auto value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (f.headers.size() >= o.max_headers) return refuse(431, "headers", "too many");
    // NUL, CR and the other controls (horizontal tab aside) are no part of a field value (RFC
    // 9110 §5.5): a handler or a log line downstream would read it differently.
    if (std::any_of(value.begin(), value.end(), [](char c) {
          const auto u = static_cast<unsigned char>(c);
          return (u < 0x20 && c != '\t') || u == 0x7f;
        })) {
      return refuse(400, std::string(name), "must not contain control characters (NUL, CR, ...)");
    }
    if (iequals(name, "Content-Length")) {
      std::size_t n = 0;
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return refuse(400, "Content-Length", "must be a number");
      }
      for (char c : value) n = n * 10 + static_cast<std::size_t>(c - '0');
      if (length && *length != n) return refuse(400, "Content-Length", "given twice, differently");
      length = n;
    } else if (iequals(name, "Transfer-Encoding")) {
      if (!iequals(value, "chunked")) return refuse(501, "Transfer-Encoding", "only chunked");
      f.chunked = true;
      f.drop.emplace_back(line_at, line.size() + 2);
    } else if (iequals(name, "Connection")) {
      if (has_token(value, "close")) keep_alive = false;
      if (has_token(value, "keep-alive")) keep_alive = true;
    } else if (iequals(name, "Expect")) {
      if (!iequals(value, "100-continue")) return refuse(417, "Expect", "only 100-continue");
      f.expect_continue = true;
      f.drop.emplace_back(line_at, line.size() + 2);
    }
    f.headers.emplace(std::string(name), std::string(value));
  }
  f.close = !keep_alive;
  f.say_keep_alive = keep_alive && version == "HTTP/1.0";
  if (f.chunked) {
    // Both would let a proxy and this server disagree on where the request ends.
    if (length) return refuse(400, "Transfer-Encoding", "not with Content-Length");
    return dechunk(in, o, std::move(f));
  }
  const std::size_t body = length.value_or(0);
  if (body > o.max_body) return refuse(413, "body", "too large");
  f.total = f.head + body;
  f.kind = in.size() >= f.total ? Frame::kComplete : Frame::kIncomplete;
  return f;
}

// A handler's response on the wire.
std::string serialize(const httplib::Response& res, bool close, bool say_keep_alive) {
  std::string out;
  out.reserve(128 + res.body.size());
  out += "HTTP/1.1 ";
  out += std::to_string(res.status);
  out += ' ';
  out += reason_phrase(res.status);
  out += "\r\n";
  for (const auto& [k, v] : res.headers) {
    if (iequals(k, "Content-Length") || iequals(k, "Connection")) continue;
    out += k;
    out += ": ";
    out += v;
    out += "\r\n";
  }
  out += "Content-Length: ";
  out += std::to_string(res.body.size());
  out += "\r\n";
  if (close) out += "Connection: close\r\n";
  if (say_keep_alive && !close) out += "Connection: keep-alive\r\n";
  out += "\r\n";
  out += res.body;
  return out;
}

// The request as cpp-httplib is to read it: as received, or without the lines it must not
// see, and a chunked body decoded with its Content-Length.
std::string for_processor(const std::string& in, const Frame& f) {
  if (f.drop.empty()) return in.substr(0, f.total);
  std::string out;
  out.reserve(f.total + 32);
  std::size_t pos = 0;
  for (const auto& [at, len] : f.drop) {
    out.append(in, pos, at - pos);
    pos = at + len;
  }
  out.append(in, pos, f.head - 2 - pos);  // up to the blank line
  if (f.chunked) out += "Content-Length: " + std::to_string(f.body.size()) + "\r\n";
  out += "\r\n";
  if (f.chunked) {
    out += f.body;
  } else {
    out.append(in, f.head, f.total - f.head);
  }
  return out;
}

}  // namespace allot::server::http
