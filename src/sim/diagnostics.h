// Problems found in input files, each with its file, line and field. By default a bad record is
// skipped and counted; with strict checking the first one fails the run.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace allot::sim {

struct InputIssue {
  std::string file;
  std::size_t line = 0;  // 1-based; 0 when the issue is not about one line
  std::string field;
  std::string reason;
  std::string message() const;  // "philly.csv:17: num_gpus: must be a positive integer"
};

class Diagnostics {
 public:
  void skip(std::string file, std::size_t line, std::string field, std::string reason);
  // Records that are not errors but are left out on purpose (e.g. CPU-only pods of a GPU trace).
  void ignore(std::size_t n = 1) { ignored_ += n; }

  const std::vector<InputIssue>& skipped() const { return skipped_; }
  std::size_t ignored() const { return ignored_; }
  bool empty() const { return skipped_.empty(); }

 private:
  std::vector<InputIssue> skipped_;
  std::size_t ignored_ = 0;
};

}  // namespace allot::sim
