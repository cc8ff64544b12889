// The Philly trace (Jeon et al., ATC'19, as processed by the Pollux authors).
#include <sstream>

#include "sim/csv_line.h"
#include "sim/text_file.h"
#include "sim/trace_loaders.h"

namespace allot::sim {
namespace {

// Days from 1970-01-01 to a civil date (Howard Hinnant's algorithm).
long long days_from_civil(long long y, unsigned m, unsigned d) {
  y -= m <= 2;
  const long long era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<long long>(doe) - 719468;
}

}  // namespace

std::optional<core::Time> parse_timestamp(std::string_view s) {
  // YYYY-MM-DD HH:MM:SS
  if (s.size() != 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') ||
      s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  auto y = parse_int(s.substr(0, 4)), mo = parse_int(s.substr(5, 2)), d = parse_int(s.substr(8, 2));
  auto h = parse_int(s.substr(11, 2)), mi = parse_int(s.substr(14, 2)),
       se = parse_int(s.substr(17, 2));
  if (!y || !mo || !d || !h || !mi || !se || *mo < 1 || *mo > 12 || *d < 1 || *d > 31 || *h > 23 ||
      *mi > 59 || *se > 60) {
    return std::nullopt;
  }
  return days_from_civil(*y, static_cast<unsigned>(*mo), static_cast<unsigned>(*d)) * core::kDay +
         *h * core::kHour + *mi * core::kMinute + *se;
}

core::Result<Workload> parse_philly_trace(const std::string& text, const std::string& name,
                                          Diagnostics& diag) {
  Workload w;
  w.source = name;
  w.format = "philly";
  std::istringstream in(text);
  std::string line;
  std::size_t n = 0;
  if (!std::getline(in, line)) return core::Error{name, "the file is empty"};
  ++n;
  const auto header = split_csv(line);
  if (header.size() < 5 || header[0] != "timestamp" || header[1] != "duration" ||
      header[2] != "num_gpus" || header[4] != "cluster") {
    return core::Error{name + ":1: header",
                       "expected 'timestamp,duration,num_gpus,gpu_time,cluster'"};
  }
  core::Time first = core::kNever;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line == "\r") continue;
    const auto f = split_csv(line);
    if (f.size() != 5) {
      diag.skip(name, n, "line",
                "expected 5 comma-separated fields, found " + std::to_string(f.size()));
      continue;
    }
    const auto t = parse_timestamp(f[0]);
    if (!t) {
      diag.skip(name, n, "timestamp", "expected YYYY-MM-DD HH:MM:SS");
      continue;
    }
    const auto d = parse_number(f[1]);
    // Bounded before the conversion to whole seconds (1e308 or nan would not convert).
    if (!d || !(*d >= 0 && *d <= kMaxTraceSeconds)) {
      diag.skip(name, n, "duration", "expected a number of seconds from 0 to 10^10");
      continue;
    }
    const auto g = parse_int(f[2]);
    if (!g || *g < 1 || *g > 100000) {
      diag.skip(name, n, "num_gpus", "expected a positive integer");
      continue;
    }
    if (f[4].empty()) {
      diag.skip(name, n, "cluster", "the virtual cluster is empty");
      continue;
    }
    SimJob j;
    j.line = n;
    j.submit = *t;
    j.duration = std::max<core::Duration>(1, static_cast<core::Duration>(*d));
    j.gpus = static_cast<int>(*g);
    j.budget = "/philly/" + std::string(f[4]);
    first = std::min(first, *t);
    w.jobs.push_back(std::move(j));
  }
  // Times start at 0 at the first submission.
  for (SimJob& j : w.jobs) j.submit -= first;
  sort_jobs(w, true);
  return w;
}

core::Result<Workload> load_philly_trace(const std::string& path, Diagnostics& diag) {
  auto text = read_text_file(path, "Philly trace");
  if (!text.ok()) return text.error();
  return parse_philly_trace(text.value(), path, diag);
}

}  // namespace allot::sim
