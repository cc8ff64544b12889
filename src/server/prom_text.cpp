#include "server/prom_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace allot::server::prom {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end())) {
    throw std::invalid_argument("histogram bounds must ascend");
  }
}

void Histogram::observe(double v) {
  // The first bound at or above v ("le" is inclusive); past the last: the +Inf bucket.
  auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
  ++counts_[static_cast<std::size_t>(it - bounds_.begin())];
  sum_ += v;
  ++count_;
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

std::vector<double> wait_buckets() {
  return {1, 10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 259200, 604800};
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escape_help(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  // The shortest of 15 to 17 significant digits that reads back as v (0.1, not
  // 0.10000000000000001).
  char buf[32];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

namespace {
bool valid_name(const std::string& name, bool colon) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (colon && c == ':') || (i > 0 && digit))) return false;
  }
  return true;
}
}  // namespace

bool valid_metric_name(const std::string& name) {
  return valid_name(name, true);
}
bool valid_label_name(const std::string& name) {
  return valid_name(name, false);
}

void TextWriter::family(const std::string& name, const std::string& type, const std::string& help) {
  if (!valid_metric_name(name)) throw std::invalid_argument("metric name '" + name + "'");
  out_ += "# HELP " + name + " " + escape_help(help) + "\n";
  out_ += "# TYPE " + name + " " + type + "\n";
}

void TextWriter::series(const std::string& name, const Labels& labels,
                        const std::string& extra_name, const std::string& extra_value,
                        const std::string& value) {
  out_ += name;
  if (!labels.empty() || !extra_name.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      if (!valid_label_name(k)) throw std::invalid_argument("label name '" + k + "'");
      if (!first) out_ += ',';
      first = false;
      out_ += k + "=\"" + escape_label_value(v) + "\"";
    }
    if (!extra_name.empty()) {
      if (!first) out_ += ',';
      out_ += extra_name + "=\"" + extra_value + "\"";
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

void TextWriter::sample(const std::string& name, const Labels& labels, double value) {
  series(name, labels, "", "", format_value(value));
}

void TextWriter::histogram(const std::string& name, const Labels& labels, const Histogram& h) {
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    series(name + "_bucket", labels, "le", format_value(h.bounds()[i]), std::to_string(cumulative));
  }
  series(name + "_bucket", labels, "le", "+Inf", std::to_string(h.count()));
  series(name + "_sum", labels, "", "", format_value(h.sum()));
  series(name + "_count", labels, "", "", std::to_string(h.count()));
}

}  // namespace allot::server::prom
