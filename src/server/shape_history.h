// The recent jobs of each budget and shape (nodes, GPUs per node, GPU fraction), with their
// telemetry summed as it arrives, for the hint at submission (server/advice.h,
// submission_hint): a submission looks up its own budget and shape without reading the store.
// In memory, bounded: the kJobs newest jobs (by id) of each of at most kKeys budget-shapes (the
// least recently measured dropped first). A restart starts it afresh; the store keeps the
// summaries that `allot advise` reads.
#pragma once

#include <list>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/advice.h"

namespace allot::server {

// Thread-safe.
class ShapeHistory {
 public:
  static constexpr std::size_t kJobs = AdviceRules::kHintJobs;
  static constexpr std::size_t kKeys = 4096;

  // A telemetry report's delta for a job (`d`: job, budget, seconds, memory) of canonical spec
  // `spec_json`.
  void add(const store::TelemetryRecord& d, const std::string& spec_json);
  // The budget's measured jobs of the shape of `spec_json`, newest first.
  std::vector<MeasuredJob> recent(const std::string& budget, const std::string& spec_json) const;

 private:
  static std::string key(const std::string& budget, const std::string& spec_json);
  struct Entry {
    std::map<core::JobId, MeasuredJob, std::greater<>> jobs;  // newest first
    std::list<std::string>::iterator age;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;  // guarded by mu_
  std::list<std::string> by_age_;                   // least recently measured first
};

}  // namespace allot::server
