// A result that is either a value or an error naming the field at fault and the reason.
//
// Thread-safety: plain values; copies may be read from several threads while none writes.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace allot::core {

struct Error {
  std::string field;   // e.g. "min_runtime"
  std::string reason;  // e.g. "must be at most 8h (28800 s)"
  std::string message() const { return field.empty() ? reason : field + ": " + reason; }
};

template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return std::holds_alternative<T>(v_); }
  const T& value() const { return std::get<T>(v_); }
  T& value() { return std::get<T>(v_); }
  const Error& error() const { return std::get<Error>(v_); }

 private:
  std::variant<T, Error> v_;
};

struct Ok {};
using Status = Result<Ok>;
inline Status ok_status() {
  return Ok{};
}

}  // namespace allot::core
