// Telemetry: per-GPU samples at 1 Hz, aggregated per job over a reporting interval, plus the CPU
// and I/O wait of each job's process tree read from /proc, and where the run has a cgroup v2
// directory its CPU usage and CPU / I/O pressure (agent/cgroup_stats.h). The aggregator is pure
// (samples in, summaries out); process_times() reads /proc.
#pragma once

#include <sys/types.h>

#include <map>
#include <vector>

#include "agent/gpu_backend.h"
#include "agent/runner.h"

namespace allot::agent {

// CPU and block-I/O delay accumulated by a set of processes, in clock ticks converted to seconds.
struct ProcessTimes {
  // utime + stime, plus cutime + cstime: the time of children they have reaped, so that the sum
  // over a tree does not drop when one of its processes ends.
  double cpu_seconds = 0;
  double io_wait_seconds = 0;  // delayacct_blkio_ticks (0 where the kernel does not account)
  std::int64_t rss_mib = 0;    // resident memory (stat's rss field, the same as statm's)
  // From the run's cgroup v2, -1 where unknown (no cgroup v2, no PSI in the kernel): "some avg10"
  // of cpu.pressure and io.pressure, percent.
  double cpu_pressure_pct = -1;
  double io_pressure_pct = -1;
};
ProcessTimes process_times(const std::vector<pid_t>& pids);

// The CPU and I/O figures come from the change between the run's previous sample (the last one
// of the interval before, or its first ever) and its latest; `seconds` is that span.
struct JobTelemetry {
  RunKey key;
  int samples = 0;
  double seconds = 0;                  // wall time covered
  double gpu_util_mean = 0;            // over its GPUs and samples, percent
  double gpu_util_peak = 0;            // the highest of the per-sample means over its GPUs
  std::int64_t mem_used_peak_mib = 0;  // sum over its GPUs, peak over samples
  std::int64_t mem_total_mib = 0;      // of its GPUs (or MIG slices)
  double cpu_pct_mean = 0;             // 100 = one core
  double io_wait_pct_mean = 0;         // I/O wait ÷ (CPU + I/O wait), percent
  double cpu_pressure_pct_mean = -1;   // mean of the samples' cgroup pressure; -1 = unknown
  double io_pressure_pct_mean = -1;
};

struct GpuTelemetry {
  GpuSample last;
  bool healthy = true;
};

// Which run holds which GPU indices (a fractional run holds part of one).
using GpuHolders = std::map<RunKey, std::vector<int>>;
// Which run holds which MIG devices ("MIG-..." UUIDs): its memory is then its MIG devices' own
// (GpuSample::mig), not the parent GPU's, which other runs share.
using MigHolders = std::map<RunKey, std::vector<std::string>>;

class TelemetryAggregator {
 public:
  // One 1 Hz sample of every GPU, with the CPU/I/O totals of each run's processes at that time.
  // A run is counted when it holds GPUs or has process times (a CPU-only run has only those).
  void add(double now, const std::vector<GpuSample>& gpus, const GpuHolders& holders,
           const std::map<RunKey, ProcessTimes>& times, const MigHolders& migs = {});
  // Aggregates since the previous take() (and resets them); runs not sampled since are dropped.
  std::vector<JobTelemetry> take_jobs();
  const std::vector<GpuSample>& last_gpus() const { return last_; }

 private:
  struct Acc {
    int samples = 0;
    int util_samples = 0;        // samples in which some of its GPUs' use was known
    double first = 0, last = 0;  // the baseline sample's time and the latest's
    bool based = false;          // `first` is set
    double util_sum = 0, util_peak = 0;
    std::int64_t mem_peak = 0, mem_total = 0;
    ProcessTimes t0, t1;  // at the baseline and at the latest sample
    bool have_t0 = false;
    double cpu_pressure_sum = 0, io_pressure_sum = 0;
    int cpu_pressure_n = 0, io_pressure_n = 0;
  };
  std::map<RunKey, Acc> acc_;
  std::vector<GpuSample> last_;
};

}  // namespace allot::agent
