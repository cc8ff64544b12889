// The pending queues (docs/policy.md §7.1): per budget in the order served within it, and one
// flat queue per pass under a baseline order; with the per-budget request sizes the speed-only
// pruning reads (walk_pruning.cpp).

#include <algorithm>
#include <tuple>

#include "core/cluster_scratch.h"

namespace allot::core {

// The pending queues point at entries of jobs_; a member-wise copy points at the original's.
void Scheduler::repoint_pending() {
  for (auto& queues : pending_) {
    for (auto& queue : queues) {
      for (auto& [key, entry] : queue) entry = &jobs_.at(std::get<2>(key));
    }
  }
  for (auto& queue : flat_) {
    for (auto& [key, entry] : queue) entry = &jobs_.at(std::get<2>(key));
  }
  for (auto& running : running_) {
    for (auto& [id, entry] : running) entry = &jobs_.at(id);
  }
  for (auto& on_node : jobs_on_node_) {
    for (JobEntry*& entry : on_node) entry = &jobs_.at(entry->spec.id);
  }
}

int Scheduler::pass_of(const JobSpec& spec) const {
  return spec.kind == JobKind::Debug && config_.debug_jobs_first ? 0 : 1;
}

void Scheduler::add_pending(JobEntry& j) {
  auto& queues = pending_[pass_of(j.spec)];
  if (queues.size() <= j.spec.budget)
    queues.resize(std::max<std::size_t>(budgets_.size(), j.spec.budget + 1));
  const PendingKey key{inverted(j.spec.priority), j.spec.submit_time, j.spec.id};
  queues[j.spec.budget].emplace(key, &j);
  if (config_.order != QueueOrder::FairShare) {
    flat_[pass_of(j.spec)].emplace(flat_key(j), &j);
    flat_fit_[pass_of(j.spec)].add(j.spec.shape, flat_key(j));
  }
  pending_total_.insert(j.spec.shape.total_milli());
  if (j.spec.shape.mig != 0) pending_named_.insert(j.spec.id);
  pending_with_end_ += j.spec.expected_duration.has_value();
  auto& sizes = pending_sizes_[pass_of(j.spec)];
  if (sizes.size() < queues.size()) sizes.resize(queues.size());
  PendingSizes& mine = sizes[j.spec.budget];
  mine.fit.add(j.spec.shape, key);
  mine.all_by_milli.add(j.spec.shape.total_milli(), key);
  if (j.spec.min_runtime > 0) {
    mine.contracts_by_milli.add(j.spec.shape.total_milli(), key);
    if (j.spec.kind == JobKind::Debug) mine.debug_contracts.insert(key);
    if (j.spec.kind == JobKind::Interactive) mine.interactive_contracts.insert(key);
  }
  if (j.spec.min_runtime > 0)
    mine.contracts.insert(j.spec.shape.total_milli() * j.spec.min_runtime);
  mine.debug += j.spec.kind == JobKind::Debug;
  if (j.spec.shape.fractional()) {
    pending_fraction_.insert(j.spec.shape.gpu_milli);
    mine.fraction.insert(j.spec.shape.gpu_milli);
  } else {
    pending_per_node_.insert(j.spec.shape.gpus_per_node);
    mine.per_node.insert(j.spec.shape.gpus_per_node);
  }
  ++pending_count_;
}

// The baseline order's first key comes from its registered function (queue_order.h, orders/).
Scheduler::PendingKey Scheduler::flat_key(const JobEntry& j) const {
  const Time first = flat_first_key(config_.order)(j.spec);
  return PendingKey{first, j.spec.submit_time, j.spec.id};
}

void Scheduler::remove_pending(JobEntry& j) {
  auto& queues = pending_[pass_of(j.spec)];
  const PendingKey key{inverted(j.spec.priority), j.spec.submit_time, j.spec.id};
  if (j.spec.budget >= queues.size() || !queues[j.spec.budget].erase(key)) return;
  if (config_.order != QueueOrder::FairShare) {
    flat_[pass_of(j.spec)].erase(flat_key(j));
    flat_fit_[pass_of(j.spec)].remove(j.spec.shape, flat_key(j));
  }
  pending_total_.erase(pending_total_.find(j.spec.shape.total_milli()));
  pending_named_.erase(j.spec.id);
  pending_with_end_ -= j.spec.expected_duration.has_value();
  PendingSizes& mine = pending_sizes_[pass_of(j.spec)][j.spec.budget];
  mine.fit.remove(j.spec.shape, key);
  mine.all_by_milli.remove(j.spec.shape.total_milli(), key);
  if (j.spec.min_runtime > 0) {
    mine.contracts_by_milli.remove(j.spec.shape.total_milli(), key);
    if (j.spec.kind == JobKind::Debug) mine.debug_contracts.erase(key);
    if (j.spec.kind == JobKind::Interactive) mine.interactive_contracts.erase(key);
  }
  if (j.spec.min_runtime > 0) {
    mine.contracts.erase(mine.contracts.find(j.spec.shape.total_milli() * j.spec.min_runtime));
  }
  mine.debug -= j.spec.kind == JobKind::Debug;
  if (j.spec.shape.fractional()) {
    pending_fraction_.erase(pending_fraction_.find(j.spec.shape.gpu_milli));
    mine.fraction.erase(mine.fraction.find(j.spec.shape.gpu_milli));
  } else {
    pending_per_node_.erase(pending_per_node_.find(j.spec.shape.gpus_per_node));
    mine.per_node.erase(mine.per_node.find(j.spec.shape.gpus_per_node));
  }
  --pending_count_;
}

Scheduler::PendingKey Scheduler::pending_key(const JobEntry& j) {
  return PendingKey{inverted(j.spec.priority), j.spec.submit_time, j.spec.id};
}

}  // namespace allot::core
