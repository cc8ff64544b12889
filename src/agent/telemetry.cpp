// Per-run telemetry: process times from /proc, and the aggregation of 1 Hz samples into the
// figures each telemetry post carries.
#include "agent/telemetry.h"

#include <unistd.h>

#include <algorithm>

#include "agent/proc.h"

namespace allot::agent {

ProcessTimes process_times(const std::vector<pid_t>& pids) {
  static const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  static const std::int64_t page = sysconf(_SC_PAGESIZE);
  ProcessTimes t;
  std::int64_t rss_bytes = 0;
  for (pid_t pid : pids) {
    auto s = read_proc_stat(pid);
    if (!s) continue;  // ended between the listing and now
    t.cpu_seconds += static_cast<double>(s->utime + s->stime) * tick +
                     static_cast<double>(s->cutime + s->cstime) * tick;
    t.io_wait_seconds += static_cast<double>(s->blkio_ticks) * tick;
    rss_bytes += s->rss_pages * page;
  }
  t.rss_mib = rss_bytes / (1024L * 1024);
  return t;
}

void TelemetryAggregator::add(double now, const std::vector<GpuSample>& gpus,
                              const GpuHolders& holders,
                              const std::map<RunKey, ProcessTimes>& times, const MigHolders& migs) {
  last_ = gpus;
  auto gpu = [&](int index) -> const GpuSample* {
    if (index >= 0 && static_cast<std::size_t>(index) < gpus.size() &&
        gpus[static_cast<std::size_t>(index)].index == index) {
      return &gpus[static_cast<std::size_t>(index)];
    }
    for (const GpuSample& s : gpus) {
      if (s.index == index) return &s;
    }
    return nullptr;
  };
  auto sample_run = [&](const RunKey& key) -> Acc& {
    Acc& a = acc_[key];
    if (!a.based) {  // a new run: its first sample is the base
      a.first = now;
      a.based = true;
    }
    a.last = now;
    ++a.samples;
    return a;
  };
  // The run's MIG devices' memory: used and total summed over those sampled; false when the
  // backend samples none of them (the fake backend: the parent GPU's figures then stand).
  auto mig_memory = [&](const std::vector<std::string>& uuids, std::int64_t& mem,
                        std::int64_t& total) {
    bool found = false;
    for (const GpuSample& s : gpus) {
      if (!s.present) continue;
      for (const MigSample& m : s.mig) {
        if (std::find(uuids.begin(), uuids.end(), m.uuid) == uuids.end()) continue;
        found = true;
        if (m.mem_used_mib >= 0) mem += m.mem_used_mib;
        if (m.mem_total_mib >= 0) total += m.mem_total_mib;
      }
    }
    return found;
  };
  for (const auto& [key, indices] : holders) {
    Acc& a = sample_run(key);
    double util = 0;
    int known = 0;
    std::int64_t mem = 0, total = 0;
    auto on_mig = migs.find(key);
    const bool own_memory = on_mig != migs.end() && mig_memory(on_mig->second, mem, total);
    for (int i : indices) {
      const GpuSample* s = gpu(i);
      if (!s || !s->present) continue;
      if (s->util_pct >= 0) {  // (none for a GPU in MIG mode: NVML has no per-instance figure)
        util += s->util_pct;
        ++known;
      }
      if (own_memory) continue;  // its MIG devices' memory, not the GPU's that others share
      if (s->mem_used_mib >= 0) mem += s->mem_used_mib;
      if (s->mem_total_mib >= 0) total += s->mem_total_mib;
    }
    if (known > 0) {
      const double mean = util / known;
      a.util_sum += mean;
      a.util_peak = std::max(a.util_peak, mean);
      ++a.util_samples;
    }
    a.mem_peak = std::max(a.mem_peak, mem);
    if (total > 0) a.mem_total = total;
  }
  for (const auto& [key, t] : times) {
    Acc& a = holders.count(key) ? acc_[key] : sample_run(key);
    if (!a.have_t0) {
      a.t0 = t;
      a.have_t0 = true;
    }
    a.t1 = t;
    if (t.cpu_pressure_pct >= 0) {
      a.cpu_pressure_sum += t.cpu_pressure_pct;
      ++a.cpu_pressure_n;
    }
    if (t.io_pressure_pct >= 0) {
      a.io_pressure_sum += t.io_pressure_pct;
      ++a.io_pressure_n;
    }
  }
}

std::vector<JobTelemetry> TelemetryAggregator::take_jobs() {
  std::vector<JobTelemetry> out;
  for (auto it = acc_.begin(); it != acc_.end();) {
    Acc& a = it->second;
    if (a.samples == 0) {  // not sampled in this interval: it has ended
      it = acc_.erase(it);
      continue;
    }
    JobTelemetry j;
    j.key = it->first;
    j.samples = a.samples;
    j.seconds = a.last - a.first;
    if (a.util_samples > 0) j.gpu_util_mean = a.util_sum / a.util_samples;
    j.gpu_util_peak = a.util_peak;
    j.mem_used_peak_mib = a.mem_peak;
    j.mem_total_mib = a.mem_total;
    const double cpu = std::max(0.0, a.t1.cpu_seconds - a.t0.cpu_seconds);
    const double io = std::max(0.0, a.t1.io_wait_seconds - a.t0.io_wait_seconds);
    if (j.seconds > 0) j.cpu_pct_mean = 100 * cpu / j.seconds;
    if (cpu + io > 0) j.io_wait_pct_mean = 100 * io / (cpu + io);
    if (a.cpu_pressure_n > 0) j.cpu_pressure_pct_mean = a.cpu_pressure_sum / a.cpu_pressure_n;
    if (a.io_pressure_n > 0) j.io_pressure_pct_mean = a.io_pressure_sum / a.io_pressure_n;
    out.push_back(j);
    // The next interval starts from this one's last sample.
    Acc next;
    next.first = a.last;
    next.based = true;
    next.t0 = a.t1;
    next.t1 = a.t1;
    next.have_t0 = a.have_t0;
    next.mem_total = a.mem_total;
    a = next;
    ++it;
  }
  return out;
}

}  // namespace allot::agent
