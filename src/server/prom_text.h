// The Prometheus text exposition format (version 0.0.4), written: metric families with their
// HELP and TYPE lines, samples with escaped label values, and histograms with cumulative
// buckets ending in +Inf, _sum and _count. Only what /metrics needs; no parsing.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace allot::server::prom {

// Label name and value pairs, written in the order given (callers keep one order per family).
using Labels = std::vector<std::pair<std::string, std::string>>;

// Bucket upper bounds (ascending, finite; +Inf is implied) and the observations counted in each
// bucket alone (not cumulative), with their sum. Thread-unsafe: owners lock around it.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // counts()[i]: observations <= bounds()[i] and > bounds()[i-1]; the last: above every bound.
  const std::vector<std::uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  std::uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

// Buckets for durations in seconds, from 1 ms to 60 s.
std::vector<double> latency_buckets();
// Buckets for queue waits in seconds, from 1 s to a week.
std::vector<double> wait_buckets();

// "a\"b" for a label value: backslash, double quote and newline escaped.
std::string escape_label_value(const std::string& v);
// HELP text: backslash and newline escaped.
std::string escape_help(const std::string& v);
// A sample value as Prometheus reads it: integers without a fraction, NaN, +Inf, -Inf.
std::string format_value(double v);

class TextWriter {
 public:
  // Starts a family: "# HELP name help" and "# TYPE name type" (counter, gauge, histogram).
  // A family is written once; its samples follow before the next family starts.
  void family(const std::string& name, const std::string& type, const std::string& help);
  void sample(const std::string& name, const Labels& labels, double value);
  // A histogram's series: name_bucket{labels..., le="..."} cumulative, le="+Inf", then name_sum
  // and name_count. The family must have been started as a histogram.
  void histogram(const std::string& name, const Labels& labels, const Histogram& h);
  const std::string& text() const { return out_; }

 private:
  void series(const std::string& name, const Labels& labels, const std::string& extra_name,
              const std::string& extra_value, const std::string& value);
  std::string out_;
};

// Metric and label names: [a-zA-Z_:][a-zA-Z0-9_:]* (labels without ':').
bool valid_metric_name(const std::string& name);
bool valid_label_name(const std::string& name);

}  // namespace allot::server::prom
