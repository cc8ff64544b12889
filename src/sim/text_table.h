// A plain-text table for the terminal: every column as wide as its widest cell (header included),
// the first column left-aligned, the others right-aligned, one space between columns.
#pragma once

#include <string>
#include <vector>

namespace allot::sim {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_column(std::string name) { header_.push_back(std::move(name)); }
  // A row shorter than the header is padded with empty cells; extra cells are dropped.
  void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string render() const;

  // Characters as a terminal shows them: UTF-8 continuation bytes do not count.
  static std::size_t display_width(const std::string& s);

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace allot::sim
