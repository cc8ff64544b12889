#include "server/job_array.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace allot::server {

namespace {

// A whole non-negative number of at most 7 digits, or -1.
int number(const std::string& s) {
  if (s.empty() || s.size() > 7) return -1;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
  }
  return std::stoi(s);
}

}  // namespace

core::Result<ArraySpec> parse_array(const std::string& text, std::size_t max_tasks) {
  const std::string kForm =
      "must be indices like 0-99, 0,3,7 or 0-99:2, optionally with %N (at most N at once)";
  if (text.empty() || text.size() > 1024) return core::Error{"array", kForm};
  ArraySpec out;
  std::string list = text;
  if (auto pct = text.find('%'); pct != std::string::npos) {
    out.limit = number(text.substr(pct + 1));
    if (out.limit < 1) return core::Error{"array", "%N must be a whole number of at least 1"};
    list = text.substr(0, pct);
  }
  std::set<int> indices;
  std::size_t start = 0;
  while (start <= list.size()) {
    auto comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string part = list.substr(start, comma - start);
    int step = 1;
    if (auto colon = part.find(':'); colon != std::string::npos) {
      step = number(part.substr(colon + 1));
      if (step < 1) return core::Error{"array", "the step after ':' must be at least 1"};
      part = part.substr(0, colon);
    }
    int lo = 0, hi = 0;
    if (auto dash = part.find('-'); dash != std::string::npos) {
      lo = number(part.substr(0, dash));
      hi = number(part.substr(dash + 1));
    } else {
      lo = hi = number(part);
    }
    if (lo < 0 || hi < 0) return core::Error{"array", kForm};
    if (hi < lo) return core::Error{"array", "range " + part + " ends before it starts"};
    if (hi > kMaxArrayIndex) {
      return core::Error{"array", "indices must be at most " + std::to_string(kMaxArrayIndex)};
    }
    for (long i = lo; i <= hi; i += step) {
      indices.insert(static_cast<int>(i));
      if (indices.size() > max_tasks) {
        return core::Error{"array", "at most " + std::to_string(max_tasks) +
                                        " tasks in one array (split it into several)"};
      }
    }
    start = comma + 1;
  }
  out.indices.assign(indices.begin(), indices.end());
  return out;
}

}  // namespace allot::server
