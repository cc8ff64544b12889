#include "sim/duration_text.h"

#include <cctype>

namespace allot::sim {

std::optional<core::Duration> parse_duration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  core::Duration total = 0;
  std::size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return std::nullopt;
    core::Duration n = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      n = n * 10 + (text[i] - '0');
      if (n > (core::Duration{1} << 40)) return std::nullopt;
      ++i;
    }
    core::Duration unit = 1;
    if (i < text.size()) {
      switch (text[i]) {
        case 's':
          unit = 1;
          break;
        case 'm':
          unit = core::kMinute;
          break;
        case 'h':
          unit = core::kHour;
          break;
        case 'd':
          unit = core::kDay;
          break;
        case 'w':
          unit = 7 * core::kDay;
          break;
        default:
          return std::nullopt;
      }
      ++i;
    } else if (any) {
      return std::nullopt;  // "1h30" is ambiguous
    }
    total += n * unit;  // each term is below 2^60 (n <= 2^40, unit <= 2^20)
    if (total > (core::Duration{1} << 60)) return std::nullopt;  // and the sum stays below 2^61
    any = true;
  }
  return total;
}

std::string duration_text(core::Duration d) {
  if (d == 0) return "0s";
  std::string out;
  if (d < 0) {
    out = "-";
    d = -d;
  }
  const std::pair<core::Duration, char> units[] = {
      {core::kDay, 'd'}, {core::kHour, 'h'}, {core::kMinute, 'm'}, {1, 's'}};
  for (auto [size, letter] : units) {
    if (d >= size) {
      out += std::to_string(d / size);
      out += letter;
      d %= size;
    }
  }
  return out;
}

}  // namespace allot::sim
