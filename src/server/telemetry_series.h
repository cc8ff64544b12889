// The recent telemetry of running jobs, point by point, for the dashboard's sparklines: each
// report an agent posts adds a point (the run's mean GPU use and peak memory over the report's
// interval) to its job's series. In memory only, bounded: the last kPoints points of a job's
// current run, for at most kJobs jobs (the least recently reported is dropped first). The store
// keeps the aggregates (server/telemetry.h); a restart starts the series afresh.

#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/types.h"

namespace allot::server {

struct TelemetryPoint {
  core::Time time = 0;
  double gpu_util_pct = 0;        // mean over the run's GPUs (and its nodes reporting at `time`)
  std::int64_t mem_used_mib = 0;  // peak over the interval, summed over the nodes reporting
  std::int64_t mem_total_mib = 0;
  int reports = 0;  // how many node reports make this point
};

// Thread-safe.
class TelemetrySeries {
 public:
  static constexpr std::size_t kPoints = 120;
  static constexpr std::size_t kJobs = 4096;

  // Node `node`'s report for `job`'s run `run` at `time`. A later run replaces the earlier one's
  // series; reports of several nodes at the same second make one point, and a node's second
  // report in that second replaces its first (it is counted once).
  void add(core::JobId job, int run, const std::string& node, core::Time time, double gpu_util_pct,
           std::int64_t mem_used_mib, std::int64_t mem_total_mib);

  // The points of `job`'s run `run`, oldest first (none if another run, or none kept).
  std::vector<TelemetryPoint> points(core::JobId job, int run) const;

 private:
  struct NodeReport {  // one node's part of the newest point
    std::string node;
    double gpu_util_pct = 0;
    std::int64_t mem_used_mib = 0, mem_total_mib = 0;
  };
  struct Series {
    int run = 0;
    std::deque<TelemetryPoint> points;
    std::vector<NodeReport> newest;        // the nodes' reports that make points.back()
    std::list<core::JobId>::iterator age;  // its place in by_age_
  };
  mutable std::mutex mu_;
  std::unordered_map<core::JobId, Series> jobs_;  // guarded by mu_
  std::list<core::JobId> by_age_;                 // least recently reported first; guarded by mu_
};

}  // namespace allot::server
