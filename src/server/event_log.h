// The server's structured event log: one JSON object a line for every job transition, every
// preemption and drain, every node health change and every budget change, written to stderr or
// a file (`allot server --event-log FILE`) once the change is durable. Meant for Loki, journald
// or jq; the fields are in docs/metrics.md ("Event log").
#pragma once

#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "server/observer.h"

namespace allot::server {

class EventLog : public ControllerObserver {
 public:
  // Appends to `path` ("" or "-": stderr). The error names the flag's field, "event_log".
  static core::Result<std::shared_ptr<EventLog>> open(const std::string& path);
  explicit EventLog(std::FILE* out, bool owned);
  ~EventLog() override;
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  void rebuilt(const store::Store& store) override;
  void queued(const std::vector<std::pair<store::JobRecord, core::JobSpec>>& jobs) override;
  void committing(const store::WriteBatch& batch) override;
  void committed(double seconds) override;

 private:
  struct Job {
    std::string owner, budget, kind;
  };
  void emit(std::string line);

  std::mutex mu_;
  std::FILE* out_;
  bool owned_;
  std::unordered_map<core::JobId, Job> jobs_;  // jobs not ended: who and where, for each line
  std::vector<std::string> held_;              // lines of the batch being committed
};

// An RFC 3339 UTC time ("2026-12-02T03:04:05Z") for the controller's seconds.
std::string rfc3339(core::Time t);

}  // namespace allot::server
