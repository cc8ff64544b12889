// What the API's edge lets in: every string a request brings (its path, query, header values)
// is UTF-8 without control characters before any handler sees it, and what goes out as JSON
// never fails to encode, whatever an older store or a bug let in (docs/security.md, "The API's
// edge").
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace allot::server {

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF).
bool valid_utf8(std::string_view s);

// The length of the well-formed UTF-8 sequence at the start of `s`, 0 if there is none.
std::size_t utf8_sequence(std::string_view s);

// `s` with every ill-formed byte replaced by U+FFFD.
std::string utf8_or_replaced(std::string_view s);

struct EdgeRefusal {
  std::string field;  // the header's name, the query parameter's, "path" or "query"
  std::string reason;
};

// Why the request may not reach a handler (answered 400), or nullopt. Checks the decoded path,
// every query parameter's name and value, and every header's value.
std::optional<EdgeRefusal> check_request(const httplib::Request& req);

// How deeply the arrays and objects of the JSON text `s` nest (strings skipped), counted up to
// `stop` at most: a linear scan that spares the parser bodies nested thousands deep, which cost
// it a second of a loop thread per megabyte.
std::size_t json_depth(std::string_view s, std::size_t stop);

// JSON text of `j` that cannot throw on strings that are not UTF-8 (they come out with U+FFFD).
std::string dump_json(const nlohmann::json& j);

}  // namespace allot::server
