// The Prometheus text writer (server/prom_text.h): escaping, label order, histogram layout.
#include "server/prom_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace allot::server::prom {
namespace {

TEST(PromText, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(escape_label_value("/lab/nlp"), "/lab/nlp");
  // HELP escapes backslash and newline but leaves quotes alone.
  EXPECT_EQ(escape_help("say \"x\"\\\n"), "say \"x\"\\\\\\n");
  TextWriter w;
  w.family("allot_x", "gauge", "line one\nline two");
  w.sample("allot_x", {{"budget", "we\"ird\\\n"}}, 1);
  EXPECT_EQ(w.text(),
            "# HELP allot_x line one\\nline two\n"
            "# TYPE allot_x gauge\n"
            "allot_x{budget=\"we\\\"ird\\\\\\n\"} 1\n");
}

TEST(PromText, LabelsKeepTheOrderGiven) {
  TextWriter w;
  w.sample("m", {{"z", "1"}, {"a", "2"}, {"m", "3"}}, 0.5);
  w.sample("m", {}, 2);
  EXPECT_EQ(w.text(), "m{z=\"1\",a=\"2\",m=\"3\"} 0.5\nm 2\n");
}

TEST(PromText, RefusesInvalidNames) {
  TextWriter w;
  EXPECT_THROW(w.family("9lives", "gauge", ""), std::invalid_argument);
  EXPECT_THROW(w.family("has-dash", "gauge", ""), std::invalid_argument);
  EXPECT_THROW(w.sample("m", {{"bad:label", "x"}}, 1), std::invalid_argument);
  EXPECT_TRUE(valid_metric_name("DCGM_FI_DEV_GPU_UTIL"));
  EXPECT_TRUE(valid_metric_name("job:rate:5m"));
  EXPECT_FALSE(valid_label_name("a:b"));
  EXPECT_FALSE(valid_label_name(""));
}

TEST(PromText, FormatsValues) {
  EXPECT_EQ(format_value(3), "3");
  EXPECT_EQ(format_value(-2), "-2");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(0.0025), "0.0025");
  EXPECT_EQ(format_value(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
  EXPECT_EQ(format_value(1e20), "1e+20");
}

TEST(PromText, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0, 500.0}) h.observe(v);
  // Per bucket alone: <=0.1 holds 0.05 and 0.1 (le is inclusive); 0.5; 5; above 10: 50, 500.
  EXPECT_EQ(h.counts(), (std::vector<std::uint64_t>{2, 1, 1, 2}));
  TextWriter w;
  w.family("allot_wait_seconds", "histogram", "Waits.");
  w.histogram("allot_wait_seconds", {{"kind", "batch"}}, h);
  EXPECT_EQ(w.text(),
            "# HELP allot_wait_seconds Waits.\n"
            "# TYPE allot_wait_seconds histogram\n"
            "allot_wait_seconds_bucket{kind=\"batch\",le=\"0.1\"} 2\n"
            "allot_wait_seconds_bucket{kind=\"batch\",le=\"1\"} 3\n"
            "allot_wait_seconds_bucket{kind=\"batch\",le=\"10\"} 4\n"
            "allot_wait_seconds_bucket{kind=\"batch\",le=\"+Inf\"} 6\n"
            "allot_wait_seconds_sum{kind=\"batch\"} 555.65\n"
            "allot_wait_seconds_count{kind=\"batch\"} 6\n");
}

TEST(PromText, EmptyHistogramWithoutLabels) {
  Histogram h(latency_buckets());
  TextWriter w;
  w.histogram("allot_cycle_seconds", {}, h);
  const auto& t = w.text();
  EXPECT_NE(t.find("allot_cycle_seconds_bucket{le=\"0.001\"} 0\n"), std::string::npos);
  EXPECT_NE(t.find("allot_cycle_seconds_bucket{le=\"+Inf\"} 0\n"), std::string::npos);
  EXPECT_NE(t.find("allot_cycle_seconds_sum 0\nallot_cycle_seconds_count 0\n"), std::string::npos);
  EXPECT_THROW(Histogram({2, 1}), std::invalid_argument);
}

}  // namespace
}  // namespace allot::server::prom
