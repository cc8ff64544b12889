// What a run's cgroup v2 directory says about its CPU and I/O, for telemetry: cpu.stat's
// usage_usec (CPU time of every process the run ever had, exited ones included) and the
// pressure stall information of cpu.pressure and io.pressure ("some avg10": the share of the
// last 10 s in which at least one of its tasks waited for a CPU, or for I/O). The parsers are
// pure; read_cgroup_stats() reads the files. A file that is missing (no cgroup v2, a kernel
// without PSI) leaves its figure unknown (-1); nothing here fails.
#pragma once

#include <optional>
#include <string>

namespace allot::agent {

struct CgroupStats {
  double cpu_seconds = -1;       // cpu.stat usage_usec ÷ 1e6
  double cpu_pressure_pct = -1;  // cpu.pressure "some avg10"
  double io_pressure_pct = -1;   // io.pressure "some avg10"
};

// "usage_usec 1234\nuser_usec ..." -> 1234; nullopt when the line is missing or malformed.
std::optional<double> cpu_usage_usec(const std::string& cpu_stat);
// "some avg10=12.50 avg60=... total=...\nfull ..." -> 12.5; nullopt when there is no "some" line.
std::optional<double> pressure_some_avg10(const std::string& pressure);

// The figures of the cgroup v2 directory `dir` (all unknown when `dir` is "").
CgroupStats read_cgroup_stats(const std::string& dir);

}  // namespace allot::agent
