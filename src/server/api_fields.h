// Readers of the fields of a request's JSON body: each checks one field's type and range and
// throws an HttpError that names the field and the reason, so that a handler reads its body in
// a few lines and every refusal reads alike. No HTTP here: they work on parsed JSON and text.
// Stateless; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

namespace allot::server {

// A refusal on its way to the client: thrown by handlers and readers, answered by the route's
// wrapper as {"error": {status, field, reason}}.
struct HttpError {
  int status;
  std::string field;
  std::string reason;
  int retry_after = 0;  // seconds, sent as Retry-After (429)
};

constexpr std::int64_t kMaxMib = 16LL * 1024 * 1024;  // 16 TiB
constexpr std::size_t kMaxJsonDepth = 32;             // arrays and objects in a request body

// No body of the API nests deeper than a few levels (agent telemetry: 3): deeper ones are
// refused before the parser sees them.
void refuse_deep(const std::string& body);

// The body as a JSON object whose fields are all in `known` (an empty body is {} when
// `empty_ok`).
nlohmann::json parse_body(const std::string& body, const std::set<std::string>& known,
                          bool empty_ok = false);

// The string field `f` of `b` of at most `max` bytes; "" when absent and not required.
std::string str_field(const nlohmann::json& b, const std::string& f, bool required,
                      std::size_t max = 128);

// Field checks for nested objects of agent bodies; `where` prefixes the field ("devices[2].").
// `name`: the object's own field name ("devices[2]"), "" for the body.
void known_fields(const nlohmann::json& o, const std::set<std::string>& known,
                  const std::string& name);
std::optional<double> number_in(const nlohmann::json& o, const std::string& f, double lo, double hi,
                                const std::string& where, bool required = false);
std::optional<std::int64_t> integer_in(const nlohmann::json& o, const std::string& f,
                                       std::int64_t lo, std::int64_t hi, const std::string& where,
                                       bool required = false);
// A string without control characters.
std::string string_in(const nlohmann::json& o, const std::string& f, std::size_t max,
                      const std::string& where, bool required = false);
// The list `f` of at most `max` entries; an empty list when absent.
const nlohmann::json& list_in(const nlohmann::json& o, const std::string& f, std::size_t max,
                              const std::string& where);

// Each entry of the list `f` of `o` (at most `max`), which must be an object of `known` fields;
// `fn(entry, prefix)` gets the prefix that names its fields ("devices[2].").
template <typename F>
void each_entry(const nlohmann::json& o, const std::string& f, std::size_t max,
                const std::string& where, const std::set<std::string>& known, F fn) {
  const auto& list = list_in(o, f, max, where);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const auto name = where + f + "[" + std::to_string(i) + "]";
    known_fields(list[i], known, name);
    fn(list[i], name + ".");
  }
}

}  // namespace allot::server
