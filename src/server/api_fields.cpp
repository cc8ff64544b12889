#include "server/api_fields.h"

#include <cstdio>

#include "server/edge.h"

namespace allot::server {

using json = nlohmann::json;

void refuse_deep(const std::string& body) {
  if (json_depth(body, kMaxJsonDepth + 1) > kMaxJsonDepth) {
    throw HttpError{400, "body",
                    "nests deeper than " + std::to_string(kMaxJsonDepth) + " arrays or objects"};
  }
}

json parse_body(const std::string& body, const std::set<std::string>& known, bool empty_ok) {
  if (body.empty() && empty_ok) return json::object();
  refuse_deep(body);
  auto b = json::parse(body, nullptr, false);
  if (b.is_discarded()) throw HttpError{400, "body", "is not valid JSON"};
  if (!b.is_object()) throw HttpError{400, "body", "must be a JSON object"};
  for (const auto& [k, v] : b.items()) {
    if (!known.count(k)) throw HttpError{400, k, "unknown field"};
  }
  return b;
}

std::string str_field(const json& b, const std::string& f, bool required, std::size_t max) {
  auto it = b.find(f);
  if (it == b.end()) {
    if (required) throw HttpError{400, f, "required"};
    return "";
  }
  if (!it->is_string() || it->get<std::string>().size() > max) {
    throw HttpError{400, f, "must be a string of at most " + std::to_string(max) + " characters"};
  }
  return it->get<std::string>();
}

void known_fields(const json& o, const std::set<std::string>& known, const std::string& name) {
  if (!o.is_object()) throw HttpError{400, name.empty() ? "body" : name, "must be an object"};
  for (const auto& [k, v] : o.items()) {
    if (!known.count(k)) throw HttpError{400, name.empty() ? k : name + "." + k, "unknown field"};
  }
}
std::optional<double> number_in(const json& o, const std::string& f, double lo, double hi,
                                const std::string& where, bool required) {
  auto it = o.find(f);
  if (it == o.end()) {
    if (required) throw HttpError{400, where + f, "required"};
    return std::nullopt;
  }
  if (!it->is_number() || it->get<double>() < lo || it->get<double>() > hi) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "must be a number between %g and %g", lo, hi);
    throw HttpError{400, where + f, buf};
  }
  return it->get<double>();
}
std::optional<std::int64_t> integer_in(const json& o, const std::string& f, std::int64_t lo,
                                       std::int64_t hi, const std::string& where, bool required) {
  auto it = o.find(f);
  if (it == o.end()) {
    if (required) throw HttpError{400, where + f, "required"};
    return std::nullopt;
  }
  if (!it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) ||
      it->get<std::int64_t>() < lo || it->get<std::int64_t>() > hi) {
    throw HttpError{
        400, where + f,
        "must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi)};
  }
  return it->get<std::int64_t>();
}
std::string string_in(const json& o, const std::string& f, std::size_t max,
                      const std::string& where, bool required) {
  auto it = o.find(f);
  if (it == o.end()) {
    if (required) throw HttpError{400, where + f, "required"};
    return "";
  }
  if (!it->is_string() || it->get<std::string>().size() > max) {
    throw HttpError{400, where + f,
                    "must be a string of at most " + std::to_string(max) + " characters"};
  }
  for (unsigned char c : it->get<std::string>()) {
    if (c < 0x20 || c == 0x7f)
      throw HttpError{400, where + f, "must not contain control characters"};
  }
  return it->get<std::string>();
}
const json& list_in(const json& o, const std::string& f, std::size_t max,
                    const std::string& where) {
  static const json empty = json::array();
  auto it = o.find(f);
  if (it == o.end()) return empty;
  if (!it->is_array() || it->size() > max) {
    throw HttpError{400, where + f,
                    "must be a list of at most " + std::to_string(max) + " entries"};
  }
  return *it;
}

}  // namespace allot::server
