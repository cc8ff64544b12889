#include "sim/diagnostics.h"

namespace allot::sim {

std::string InputIssue::message() const {
  std::string m = file;
  if (line > 0) m += ":" + std::to_string(line);
  m += ": ";
  if (!field.empty()) m += field + ": ";
  return m + reason;
}

void Diagnostics::skip(std::string file, std::size_t line, std::string field, std::string reason) {
  skipped_.push_back(InputIssue{std::move(file), line, std::move(field), std::move(reason)});
}

}  // namespace allot::sim
