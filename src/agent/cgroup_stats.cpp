#include "agent/cgroup_stats.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace allot::agent {
namespace {

std::optional<double> number(const std::string& text) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc{} || ptr != end || v < 0) return std::nullopt;
  return v;
}

std::optional<std::string> slurp(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::optional<double> cpu_usage_usec(const std::string& cpu_stat) {
  std::istringstream in(cpu_stat);
  for (std::string key, value; in >> key >> value;) {
    if (key == "usage_usec") return number(value);
  }
  return std::nullopt;
}

std::optional<double> pressure_some_avg10(const std::string& pressure) {
  std::istringstream in(pressure);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind != "some") continue;
    for (std::string w; words >> w;) {
      if (w.starts_with("avg10=")) return number(w.substr(6));
    }
    return std::nullopt;
  }
  return std::nullopt;
}

CgroupStats read_cgroup_stats(const std::string& dir) {
  CgroupStats s;
  if (dir.empty()) return s;
  if (auto t = slurp(dir + "/cpu.stat")) {
    if (auto v = cpu_usage_usec(*t)) s.cpu_seconds = *v / 1e6;
  }
  if (auto t = slurp(dir + "/cpu.pressure")) {
    if (auto v = pressure_some_avg10(*t)) s.cpu_pressure_pct = *v;
  }
  if (auto t = slurp(dir + "/io.pressure")) {
    if (auto v = pressure_some_avg10(*t)) s.io_pressure_pct = *v;
  }
  return s;
}

}  // namespace allot::agent
