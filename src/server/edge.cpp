#include "server/edge.h"

#include <algorithm>

namespace allot::server {
namespace {

// Control characters (C0 and DEL) other than horizontal tab, which header values may hold.
bool has_control(std::string_view s, bool tab_ok) {
  for (unsigned char c : s) {
    if ((c < 0x20 && !(tab_ok && c == '\t')) || c == 0x7f) return true;
  }
  return false;
}

// The reason a string from the request is refused, or "".
std::string text_problem(std::string_view s, bool tab_ok) {
  if (!valid_utf8(s)) return "must be valid UTF-8";
  if (has_control(s, tab_ok)) return "must not contain control characters";
  return "";
}

}  // namespace

std::size_t utf8_sequence(std::string_view s) {
  if (s.empty()) return 0;
  const auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range (RFC 3629 §4)
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;  // overlong
    if (c == 0xed) hi = 0x9f;  // surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;  // overlong
    if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
  } else {
    return 0;  // a continuation byte, an overlong lead (C0, C1) or F5..FF
  }
  if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i) {
    if (b(i) < 0x80 || b(i) > 0xbf) return 0;
  }
  return n;
}

bool valid_utf8(std::string_view s) {
  while (!s.empty()) {
    // ASCII runs are most of what comes: skip them a byte at a time without the table.
    if (static_cast<unsigned char>(s[0]) < 0x80) {
      s.remove_prefix(1);
      continue;
    }
    const auto n = utf8_sequence(s);
    if (n == 0) return false;
    s.remove_prefix(n);
  }
  return true;
}

std::string utf8_or_replaced(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    const auto n = utf8_sequence(s);
    if (n == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD
      s.remove_prefix(1);
    } else {
      out.append(s.substr(0, n));
      s.remove_prefix(n);
    }
  }
  return out;
}

std::optional<EdgeRefusal> check_request(const httplib::Request& req) {
  if (auto why = text_problem(req.path, false); !why.empty()) return EdgeRefusal{"path", why};
  for (const auto& [name, value] : req.params) {
    if (auto why = text_problem(name, false); !why.empty()) {
      return EdgeRefusal{"query", "parameter names " + why};
    }
    if (auto why = text_problem(value, false); !why.empty()) return EdgeRefusal{name, why};
  }
  for (const auto& [name, value] : req.headers) {
    // Names are tokens once framed; a name that is not stays out of the answer.
    if (auto why = text_problem(name, false); !why.empty()) {
      return EdgeRefusal{"headers", "header names " + why};
    }
    if (auto why = text_problem(value, true); !why.empty()) return EdgeRefusal{name, why};
  }
  return std::nullopt;
}

std::size_t json_depth(std::string_view s, std::size_t stop) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest >= stop) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace allot::server
