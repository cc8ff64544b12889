#include "sim/text_table.h"

#include <algorithm>

namespace allot::sim {

std::size_t TextTable::display_width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string TextTable::render() const {
  const std::size_t cols = header_.size();
  std::vector<std::size_t> width(cols, 0);
  auto cell = [&](const std::vector<std::string>& row, std::size_t i) -> const std::string& {
    static const std::string empty;
    return i < row.size() ? row[i] : empty;
  };
  for (std::size_t i = 0; i < cols; ++i) {
    width[i] = display_width(header_[i]);
    for (const auto& row : rows_) width[i] = std::max(width[i], display_width(cell(row, i)));
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& row) {
    std::string l;
    for (std::size_t i = 0; i < cols; ++i) {
      const std::string& text = cell(row, i);
      const std::string pad(width[i] - display_width(text), ' ');
      if (i > 0) l += ' ';
      l += i == 0 ? text + pad : pad + text;
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(header_);
  for (const auto& row : rows_) line(row);
  return out;
}

}  // namespace allot::sim
