// What the scheduling loop tells whoever watches it (the Prometheus metrics, the event log):
// every batch it persists, the submissions it queues, and how long each cycle took. The loop
// stays the only writer; observers only read what it hands them, on its thread.
#pragma once

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "core/job.h"
#include "store/store.h"

namespace allot::server {

class ControllerObserver {
 public:
  virtual ~ControllerObserver() = default;
  // Once, after the loop rebuilt its state from the store and before its first cycle: what is
  // queued and running now (observers started with the server have seen nothing yet).
  virtual void rebuilt(const store::Store& /*store*/) {}
  // Submissions the loop takes into its queue (already durable: the API wrote them).
  virtual void queued(const std::vector<std::pair<store::JobRecord, core::JobSpec>>& /*jobs*/) {}
  // A batch about to be committed, then (committed) the commit's duration once it is durable.
  // The loop aborts the process if a commit fails, so what `committing` saw is what was written;
  // observers that publish (the event log) hold it until `committed`.
  virtual void committing(const store::WriteBatch& /*batch*/) {}
  virtual void committed(double /*seconds*/) {}
  // A scheduling cycle took this long (decisions, their store writes and the snapshot).
  virtual void cycled(double /*seconds*/) {}
};

using Observers = std::vector<std::shared_ptr<ControllerObserver>>;

// Times a scheduling cycle from construction to destruction, for every observer.
class CycleTimer {
 public:
  explicit CycleTimer(const Observers& observers)
      : observers_(observers), start_(std::chrono::steady_clock::now()) {}
  ~CycleTimer() {
    if (observers_.empty()) return;
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start_;
    for (const auto& o : observers_) o->cycled(took.count());
  }
  CycleTimer(const CycleTimer&) = delete;
  CycleTimer& operator=(const CycleTimer&) = delete;

 private:
  const Observers& observers_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace allot::server
