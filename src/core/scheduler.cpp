#include "core/scheduler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>

#include "core/cluster_scratch.h"

namespace allot::core {

const char* to_string(JobState s) {
  switch (s) {
    case JobState::Pending:
      return "pending";
    case JobState::Running:
      return "running";
    case JobState::Stopping:
      return "stopping";
  }
  return "?";
}

const char* to_string(NodeHealth h) {
  switch (h) {
    case NodeHealth::Healthy:
      return "healthy";
    case NodeHealth::Unhealthy:
      return "unhealthy";
    case NodeHealth::Draining:
      return "draining";
    case NodeHealth::Down:
      return "down";
  }
  return "?";
}

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::Preempted:
      return "preempted";
    case StopReason::Drain:
      return "drain";
    case StopReason::NodeDown:
      return "node-down";
  }
  return "?";
}

const char* to_string(WaitCode c) {
  switch (c) {
    case WaitCode::NoMatchingNodes:
      return "no-matching-nodes";
    case WaitCode::NoHealthyNodes:
      return "no-healthy-nodes";
    case WaitCode::WaitingForGpus:
      return "waiting-for-gpus";
    case WaitCode::HoldsReservation:
      return "holds-reservation";
    case WaitCode::BlockedByReservation:
      return "blocked-by-reservation";
    case WaitCode::NotFunded:
      return "not-funded";
  }
  return "?";
}

// ClusterScratch is complete only in cluster_scratch.h, so its deleter lives here.
void Scheduler::ScratchDeleter::operator()(ClusterScratch* s) const {
  delete s;
}

// Picks the next pending job by walking the budget tree: at each level the active child (a
// subtree with jobs left) whose standing is lowest; within a budget, its own queue order. Standings
// change as jobs start, so the order adapts within one cycle.
class Scheduler::Selector {
 public:
  using Key = RankKey;

  // Walks `queues` (one per budget) lazily, taking only jobs that accept `cluster`, in the
  // working state `w` (whatever an earlier walk left there).
  Selector(const Scheduler& sched, const ClusterScratch& s, ClusterScratch::WalkState& w,
           const std::vector<Queue>& queues, ClusterId cluster)
      : tree_(sched.budgets_),
        sched_(sched),
        s_(s),
        queues_(queues),
        cluster_(cluster),
        active_(w.active),
        key_(w.key),
        own_key_(w.own_key),
        in_parent_(w.in_parent),
        it_(w.it),
        ahead_(w.ahead) {
    const std::size_t n = tree_.size();
    active_.resize(n);
    for (RankSet& a : active_) a.clear();
    key_.resize(n);
    own_key_.resize(n);
    in_parent_.assign(n, 0);
    it_.resize(n);
    ahead_.assign(n, 0);
    for (BudgetId b = 0; b < queues_.size() && b < n; ++b) {
      it_[b] = queues_[b].begin();  // end() when empty: no iterator is left from another walk
      if (queues_[b].empty()) continue;
      skip(b);
      if (it_[b] == queues_[b].end()) continue;
      own_key_[b] = key_for(b);
      active_[b].insert(own_key_[b]);
      link_up(b);
    }
  }

  // The next job and its budget; nullptr when every queue is done. The job is taken off the walk
  // before it is returned, so starting it (which erases it from its queue) is safe.
  JobEntry* next(BudgetId* budget, std::uint32_t* ahead) {
    BudgetId cur = tree_.root();
    for (;;) {
      if (active_[cur].empty()) return nullptr;
      const BudgetId pick = active_[cur].front().id;
      if (pick == cur) break;
      cur = pick;
    }
    *budget = cur;
    *ahead = ahead_[cur]++;
    JobEntry* j = (it_[cur]++)->second;
    skip(cur);
    if (it_[cur] == queues_[cur].end()) unlink(cur);
    return j;
  }

  // Passes over the rest of b's own queue.
  void drop(BudgetId b) {
    if (b >= queues_.size() || it_[b] == queues_[b].end()) return;
    it_[b] = queues_[b].end();
    unlink(b);
  }

  // Passes over b's jobs ranked before `key` (a job of b not yet walked).
  void skip_to(BudgetId b, const PendingKey& key) {
    if (b >= queues_.size() || it_[b] == queues_[b].end()) return;
    it_[b] = queues_[b].lower_bound(key);
    skip(b);
    if (it_[b] == queues_[b].end()) unlink(b);
  }

  // Standings along b's path changed: re-sort b and its ancestors among their siblings.
  void rekey(BudgetId b) {
    if (b < queues_.size() && it_[b] != queues_[b].end() && active_[b].erase(own_key_[b])) {
      own_key_[b] = key_for(b);
      active_[b].insert(own_key_[b]);
    }
    for (BudgetId cur = b; cur != tree_.root(); cur = tree_.node(cur).parent) {
      if (!in_parent_[cur]) continue;
      auto& siblings = active_[tree_.node(cur).parent];
      siblings.erase(key_[cur]);
      key_[cur] = key_for(cur);
      siblings.insert(key_[cur]);
    }
  }

 private:
  void skip(BudgetId b) {
    auto& it = it_[b];
    while (it != queues_[b].end()) {
      const auto& accepted = it->second->spec.clusters;
      if (accepted.empty() ||
          std::find(accepted.begin(), accepted.end(), cluster_) != accepted.end()) {
        return;
      }
      ++it;
    }
  }

  // b's own queue is done: take it off the walk, and its ancestors that have nothing left.
  void unlink(BudgetId cur) {
    active_[cur].erase(own_key_[cur]);
    for (BudgetId b = cur; b != tree_.root() && active_[b].empty();) {
      const BudgetId parent = tree_.node(b).parent;
      active_[parent].erase(key_[b]);
      in_parent_[b] = 0;
      b = parent;
    }
  }

  Key key_for(BudgetId b) const {
    const MilliGpuSeconds extra = s_.rank_extra[b];
    return Key{sched_.standing_of(s_, b, extra), s_.projected[b] + extra, b};
  }

  void link_up(BudgetId b) {
    for (BudgetId cur = b; cur != tree_.root() && !in_parent_[cur]; cur = tree_.node(cur).parent) {
      key_[cur] = key_for(cur);
      active_[tree_.node(cur).parent].insert(key_[cur]);
      in_parent_[cur] = 1;
    }
  }

  const BudgetTree& tree_;
  const Scheduler& sched_;
  const ClusterScratch& s_;
  const std::vector<Queue>& queues_;
  ClusterId cluster_;
  std::vector<RankSet>& active_;
  std::vector<Key>& key_;      // key of a node in its parent's set
  std::vector<Key>& own_key_;  // key of a node's own queue in its own set
  std::vector<char>& in_parent_;
  std::vector<Queue::const_iterator>& it_;
  std::vector<std::uint32_t>& ahead_;
};

// ---------------------------------------------------------------------------------------------
// The model.

Scheduler::Scheduler(PolicyConfig config, GpuCatalog catalog)
    : detail::SchedulerState(config, std::move(catalog)) {}

Scheduler::Scheduler(const Scheduler& other) : detail::SchedulerState(other) {
  repoint_pending();
}

Scheduler& Scheduler::operator=(const Scheduler& other) {
  if (this != &other) {
    detail::SchedulerState::operator=(other);
    repoint_pending();
  }
  return *this;
}

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

ClusterId Scheduler::add_cluster(std::string name) {
  const ClusterId id = static_cast<ClusterId>(clusters_.size());
  clusters_.push_back(Cluster{id, std::move(name)});
  cluster_nodes_.emplace_back();
  capacity_.push_back(0);
  usage_.emplace_back(config_.lookback, config_.usage_bucket, config_.usage_half_life);
  usage_.back().advance(now_);
  rate_.emplace_back();
  running_.emplace_back();
  reservations_.emplace_back();
  fractions_version_ = 0;
  return id;
}

Result<NodeId> Scheduler::add_node(NodeSpec spec) {
  if (spec.cluster >= clusters_.size()) return Error{"cluster", "no such cluster"};
  if (spec.model >= catalog_.size()) return Error{"gpu_model", "not in the catalogue"};
  if (spec.gpus < 0 || spec.gpus > config_.max_gpus_per_node) {
    return Error{"gpus", "must be between 0 and " + std::to_string(config_.max_gpus_per_node)};
  }
  Node n;
  n.id = static_cast<NodeId>(nodes_.size());
  auto [it, inserted] = blocks_.emplace(spec.block, static_cast<BlockId>(blocks_.size()));
  n.block = it->second;
  n.spec = std::move(spec);
  capacity_[n.spec.cluster] += static_cast<Milli>(n.spec.gpus) * kWholeGpu;
  cluster_nodes_[n.spec.cluster].push_back(n.id);
  pool_.add_node(n);
  jobs_on_node_.emplace_back();
  nodes_.push_back(std::move(n));
  return nodes_.back().id;
}

Status Scheduler::set_node_health(NodeId node, NodeHealth health, std::string reason, Time now) {
  if (node >= nodes_.size()) return Error{"node", "no such node"};
  advance(now);
  nodes_[node].health = health;
  nodes_[node].health_reason = std::move(reason);
  pool_.set_schedulable(node, nodes_[node].schedulable());
  return ok_status();
}

Status Scheduler::set_cordoned(NodeId node, bool cordoned) {
  if (node >= nodes_.size()) return Error{"node", "no such node"};
  nodes_[node].cordoned = cordoned;
  pool_.set_schedulable(node, nodes_[node].schedulable());
  return ok_status();
}

void Scheduler::refresh_fractions() {
  if (fractions_version_ == budgets_.version() && fraction_.size() == clusters_.size()) return;
  fraction_.clear();
  for (const Cluster& c : clusters_) fraction_.push_back(budgets_.allocated_fractions(c.id));
  for (auto& r : rate_) r.resize(budgets_.size(), 0);
  for (auto& queues : pending_) {
    if (queues.size() < budgets_.size()) queues.resize(budgets_.size());
  }
  for (auto& u : usage_) u.ensure_nodes(budgets_.size());
  fractions_version_ = budgets_.version();
}

// ---------------------------------------------------------------------------------------------
// Jobs.

int Scheduler::pass_of(const JobSpec& spec) const {
  return spec.kind == JobKind::Debug && config_.debug_jobs_first ? 0 : 1;
}

void Scheduler::add_pending(JobEntry& j) {
  auto& queues = pending_[pass_of(j.spec)];
  if (queues.size() <= j.spec.budget)
    queues.resize(std::max<std::size_t>(budgets_.size(), j.spec.budget + 1));
  const PendingKey key{inverted(j.spec.priority), j.spec.submit_time, j.spec.id};
  queues[j.spec.budget].emplace(key, &j);
  if (config_.order != QueueOrder::FairShare) flat_[pass_of(j.spec)].emplace(flat_key(j), &j);
  pending_total_.insert(j.spec.shape.total_milli());
  pending_with_end_ += j.spec.expected_duration.has_value();
  auto& sizes = pending_sizes_[pass_of(j.spec)];
  if (sizes.size() < queues.size()) sizes.resize(queues.size());
  PendingSizes& mine = sizes[j.spec.budget];
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

Scheduler::PendingKey Scheduler::flat_key(const JobEntry& j) const {
  Time first = 0;
  if (config_.order == QueueOrder::Priority) first = inverted(j.spec.priority);
  if (config_.order == QueueOrder::ShortestFirst) first = j.spec.expected_duration.value_or(kNever);
  return PendingKey{first, j.spec.submit_time, j.spec.id};
}

void Scheduler::remove_pending(JobEntry& j) {
  auto& queues = pending_[pass_of(j.spec)];
  const PendingKey key{inverted(j.spec.priority), j.spec.submit_time, j.spec.id};
  if (j.spec.budget >= queues.size() || !queues[j.spec.budget].erase(key)) return;
  if (config_.order != QueueOrder::FairShare) flat_[pass_of(j.spec)].erase(flat_key(j));
  pending_total_.erase(pending_total_.find(j.spec.shape.total_milli()));
  pending_with_end_ -= j.spec.expected_duration.has_value();
  PendingSizes& mine = pending_sizes_[pass_of(j.spec)][j.spec.budget];
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

Status Scheduler::submit(JobSpec spec, Time now) {
  advance(now);
  if (auto st = validate_job(spec, config_, budgets_); !st.ok()) return st;
  if (jobs_.count(spec.id)) return Error{"id", "a job with this id exists"};
  for (ClusterId c : spec.clusters) {
    if (c >= clusters_.size()) return Error{"clusters", "no such cluster"};
  }
  for (GpuModelId m : spec.models) {
    if (m >= catalog_.size()) return Error{"gpu_models", "not in the catalogue"};
  }
  refresh_fractions();
  JobEntry& j = jobs_[spec.id];
  j.spec = std::move(spec);
  j.runs = j.spec.earlier_starts;
  j.queued_since = now_;
  add_pending(j);
  return ok_status();
}

Status Scheduler::restore_running(JobSpec spec, ClusterId cluster, const Placement& placement,
                                  Time started, bool allocated, Time allocated_since, Time now) {
  advance(now);
  if (auto st = validate_job(spec, config_, budgets_); !st.ok()) return st;
  if (jobs_.count(spec.id)) return Error{"id", "a job with this id exists"};
  if (cluster >= clusters_.size()) return Error{"cluster", "no such cluster"};
  if (placement.empty()) return Error{"placement", "no GPUs"};
  std::map<std::pair<NodeId, std::uint16_t>, Milli> want;
  for (const GpuSlot& g : placement) {
    if (g.node >= nodes_.size() || nodes_[g.node].spec.cluster != cluster ||
        g.gpu >= pool_.gpu_count(g.node) || g.milli <= 0 || g.milli > kWholeGpu) {
      return Error{"placement", "names a GPU that does not exist in this cluster"};
    }
    want[{g.node, g.gpu}] += g.milli;
  }
  for (const auto& [gpu, milli] : want) {
    if (pool_.free_milli(gpu.first, gpu.second) < milli) {
      return Error{"placement", "GPU " + std::to_string(gpu.second) + " of node " +
                                    nodes_[gpu.first].spec.name + " is already in use"};
    }
  }
  refresh_fractions();
  JobEntry& j = jobs_[spec.id];
  j.spec = std::move(spec);
  j.state = JobState::Running;
  j.runs = 1;
  j.queued_since = started;
  RunInfo& r = j.run;
  r.cluster = cluster;
  r.placement = placement;
  r.started = started;
  r.allocated = allocated;
  r.allocated_since = allocated_since;
  r.protected_until = !allocated                         ? started
                      : config_.minimum_runtime_contract ? allocated_since + j.spec.min_runtime
                                                         : kNever;
  pool_.take(placement);
  running_[cluster].emplace(j.spec.id, &j);
  NodeId last = std::numeric_limits<NodeId>::max();
  for (const GpuSlot& g : placement) {
    if (g.node != last) jobs_on_node_[g.node].push_back(&j);
    last = g.node;
  }
  if (allocated) charge_rate(j, +1);
  return ok_status();
}

void Scheduler::charge_rate(const JobEntry& j, Milli sign) {
  const Milli m = sign * total_milli(j.run.placement);
  auto& rates = rate_[j.run.cluster];
  if (rates.size() < budgets_.size()) rates.resize(budgets_.size(), 0);
  for (BudgetId cur = j.spec.budget; cur != kNoBudget; cur = budgets_.node(cur).parent) {
    rates[cur] += m;
  }
}

void Scheduler::release(JobEntry& j) {
  if (j.state != JobState::Running) return;
  if (j.run.allocated) charge_rate(j, -1);
  pool_.release(j.run.placement);
  running_[j.run.cluster].erase(j.spec.id);
  NodeId last = std::numeric_limits<NodeId>::max();
  for (const GpuSlot& g : j.run.placement) {
    if (g.node == last) continue;
    last = g.node;
    auto& v = jobs_on_node_[g.node];
    v.erase(std::remove(v.begin(), v.end(), &j), v.end());
  }
}

Status Scheduler::job_finished(JobId id, Time now) {
  advance(now);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Error{"job", "no such job"};
  JobEntry& j = it->second;
  if (j.state == JobState::Pending) remove_pending(j);
  release(j);
  jobs_.erase(it);
  return ok_status();
}

Status Scheduler::job_running(JobId id, Time now) {
  advance(now);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Error{"job", "no such job"};
  JobEntry& j = it->second;
  if (j.state != JobState::Running) return Error{"job", "the job holds no GPUs"};
  if (j.run.allocated && j.run.allocated_since < now_) {
    j.run.allocated_since = now_;
    j.run.protected_until = protection_end(j);
  }
  return ok_status();
}

Status Scheduler::job_stopped(JobId id, Time now) {
  advance(now);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Error{"job", "no such job"};
  JobEntry& j = it->second;
  if (j.state != JobState::Stopping) return Error{"job", "no stop was decided for this job"};
  if (!j.run.requeue_on_stop) {
    jobs_.erase(it);
    return ok_status();
  }
  j.state = JobState::Pending;
  j.queued_since = now_;
  j.run = RunInfo{};
  add_pending(j);
  return ok_status();
}

void Scheduler::record_usage(ClusterId cluster, BudgetId leaf, Time from, Time to, Milli rate) {
  if (cluster >= clusters_.size() || !budgets_.valid(leaf)) return;
  refresh_fractions();
  for (BudgetId cur = leaf; cur != kNoBudget; cur = budgets_.node(cur).parent) {
    usage_[cluster].add(cur, from, to, rate);
  }
}

void Scheduler::advance(Time now) {
  if (now <= now_) return;
  refresh_fractions();
  for (ClusterId c = 0; c < clusters_.size(); ++c) {
    usage_[c].advance(now);
    const auto& rates = rate_[c];
    for (BudgetId b = 0; b < rates.size(); ++b) {
      if (rates[b] != 0) usage_[c].add(b, now_, now, rates[b]);
    }
  }
  now_ = now;
}

const JobEntry* Scheduler::job(JobId id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

MilliGpuSeconds Scheduler::usage(ClusterId cluster, BudgetId budget) const {
  return usage_.at(cluster).total(budget);
}

double Scheduler::allocation(ClusterId cluster, BudgetId budget) const {
  if (cluster >= fraction_.size() || budget >= fraction_[cluster].size()) return 0.0;
  return fraction_[cluster][budget] * static_cast<double>(capacity_[cluster]) *
         static_cast<double>(usage_[cluster].window_seconds());
}

double Scheduler::standing(ClusterId cluster, BudgetId budget) const {
  const double a = allocation(cluster, budget);
  const double u = static_cast<double>(usage(cluster, budget));
  if (a <= 0.0) return u > 0.0 ? kInf : 0.0;
  return u / a;
}

Milli Scheduler::allocated_rate(ClusterId cluster, BudgetId budget) const {
  const auto& r = rate_.at(cluster);
  return budget < r.size() ? r[budget] : 0;
}

// Whether only events (arrivals, ends, health changes) can change a decision: every job funded,
// no contract to expire, no preemption, no reservations to re-plan, no fair-share standings, no
// node draining its jobs at their minimum runtime (the strict baselines). Then a cycle decides on
// the queue and the free GPUs alone, and waking up for time's sake would decide nothing.
bool Scheduler::only_events_decide() const {
  if (config_.funding != Funding::Always || config_.order == QueueOrder::FairShare ||
      config_.preemption || config_.minimum_runtime_contract || config_.reserve_for_blocked) {
    return false;
  }
  return std::none_of(nodes_.begin(), nodes_.end(), [](const Node& n) { return n.draining(); });
}

Time Scheduler::next_wakeup() const {
  // Speed only: this walk over every running job is most of a strict baseline's cycle.
  if (only_events_decide()) return kNever;
  Time t = kNever;
  for (ClusterId c = 0; c < clusters_.size(); ++c) {
    for (const auto& [id, entry] : running_[c]) {
      const JobEntry& j = *entry;
      if (j.run.protected_until > now_) t = std::min(t, j.run.protected_until);
      const Time drain_at = j.run.started + j.spec.min_runtime;
      if (drain_at > now_) t = std::min(t, drain_at);
    }
    if (!running_[c].empty()) t = std::min(t, usage_[c].next_expiry());
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// Standing and funding.

double Scheduler::standing_of(const ClusterScratch& s, BudgetId b, MilliGpuSeconds extra) const {
  const double a = s.allocation[b];
  const double p = static_cast<double>(s.projected[b] + extra);
  if (a <= 0.0) return kInf;  // no allocation: never within it, ranked last
  return p / a;
}

void Scheduler::compute_projected(ClusterId c, ClusterScratch& s) const {
  const std::size_t n = budgets_.size();
  s.projected.assign(n, 0);
  s.rank_extra.assign(n, 0);
  s.debug_gpus.assign(n, 0);
  s.allocation.assign(n, 0.0);
  for (BudgetId b = 0; b < n; ++b) {
    s.projected[b] = usage_[c].total(b);
    s.allocation[b] = allocation(c, b);
  }
  // Remaining contracts of running allocated jobs count as already spent: a budget can fund a
  // new contract only if it can still afford all the ones it has promised. Speed only: a cycle
  // that funds every job, walks no budget tree, preempts nothing and explains nothing never reads
  // them (the strict baselines), so it skips this walk over every running job.
  const bool read = s.explain || config_.funding != Funding::Always ||
                    config_.order == QueueOrder::FairShare || config_.preemption;
  if (!read) return;
  for (const auto& [id, entry] : running_[c]) {
    const JobEntry& j = *entry;
    if (j.run.allocated && j.spec.kind == JobKind::Debug) {
      s.debug_gpus[j.spec.budget] += j.spec.shape.total_gpus();
    }
    const Time contract_end = j.run.allocated_since + j.spec.min_runtime;
    if (!j.run.allocated || contract_end <= now_) continue;
    const MilliGpuSeconds rest = total_milli(j.run.placement) * (contract_end - now_);
    for (BudgetId cur = j.spec.budget; cur != kNoBudget; cur = budgets_.node(cur).parent) {
      s.projected[cur] += rest;
    }
  }
}

bool Scheduler::funded(const ClusterScratch& s, const JobEntry& j, BudgetId* limiting,
                       bool* at_burst_limit) const {
  *limiting = kNoBudget;
  if (at_burst_limit) *at_burst_limit = false;
  if (!budgets_.valid(j.spec.budget)) return false;
  const Milli milli = j.spec.shape.total_milli();
  switch (config_.funding) {
    case Funding::Always:
      return true;
    case Funding::ConcurrentCap:
      // A cap on GPUs held at once: fraction x capacity, counting allocated jobs running now.
      return within_held_cap(s, j.spec.budget, milli, config_.allocation_limit, false, limiting);
    case Funding::Lookback:
      break;
  }
  // Debug work is funded whatever its budget's standing (it is small and short by validation), up
  // to max_debug_gpus_per_budget running at once per budget, so that it starts within seconds.
  if (config_.debug_always_funded && j.spec.kind == JobKind::Debug && j.spec.min_runtime > 0 &&
      s.debug_gpus[j.spec.budget] + j.spec.shape.total_gpus() <=
          config_.max_debug_gpus_per_budget) {
    return true;
  }
  if (!within_allocation(s, j.spec.budget, milli * j.spec.min_runtime, limiting) ||
      j.spec.min_runtime <= 0) {
    return false;
  }
  const bool ok = within_burst(s, j.spec.budget, milli, limiting);
  if (at_burst_limit) *at_burst_limit = !ok;
  return ok;
}

// Whether every budget from `leaf` up to the root (excluded) holds, with `milli` more, at most
// burst_limit x its fraction of the cluster in allocated running GPUs. Monotone in `milli`.
bool Scheduler::within_burst(const ClusterScratch& s, BudgetId leaf, Milli milli,
                             BudgetId* limiting) const {
  return config_.burst_limit <= 0 ||
         within_held_cap(s, leaf, milli, config_.burst_limit, true, limiting);
}

// Whether every budget from `leaf` up to the root (excluded) would hold, with `milli` more, at
// most `factor` x its fraction of the cluster in allocated running GPUs; the highest that would not
// is *limiting. With `empty_exempt`, a budget that holds none may take any one job.
bool Scheduler::within_held_cap(const ClusterScratch& s, BudgetId leaf, Milli milli, double factor,
                                bool empty_exempt, BudgetId* limiting) const {
  const auto& rates = rate_[s.cluster];
  bool ok = true;
  for (BudgetId b = leaf; b != budgets_.root(); b = budgets_.node(b).parent) {
    const double cap = factor * fraction_[s.cluster][b] * static_cast<double>(capacity_[s.cluster]);
    const Milli held = b < rates.size() ? rates[b] : 0;
    if ((held > 0 || !empty_exempt) && static_cast<double>(held + milli) > cap) {
      *limiting = b;
      ok = false;
    }
  }
  return ok;
}

// Whether every budget from `leaf` up to the root (excluded) can afford a contract of `cost` on top
// of what it has promised. Monotone in `cost`: if it fails for some cost it fails for every larger
// one (the sum is exact in integers and its conversion to double never decreases).
bool Scheduler::within_allocation(const ClusterScratch& s, BudgetId leaf, MilliGpuSeconds cost,
                                  BudgetId* limiting) const {
  bool ok = true;
  // Walking up, the last budget found out of allocation is the highest one. The root is the whole
  // cluster: its limit is physical and placement enforces it.
  for (BudgetId b = leaf; b != budgets_.root(); b = budgets_.node(b).parent) {
    if (static_cast<double>(s.projected[b] + cost) > config_.allocation_limit * s.allocation[b]) {
      *limiting = b;
      ok = false;
    }
  }
  return ok;
}

Time Scheduler::protection_end(const JobEntry& j) const {
  return config_.minimum_runtime_contract ? now_ + j.spec.min_runtime : kNever;
}

// ---------------------------------------------------------------------------------------------
// The cycle.

CycleResult Scheduler::cycle(Time now, const CycleOptions& options) {
  advance(now);
  refresh_fractions();
  CycleResult out;
  out.now = now_;
  if (options.explain_all) out.waiting.reserve(pending_count_);
  stop_failed_and_drained(out);
  std::set<JobId> started;
  for (ClusterId c = 0; c < clusters_.size(); ++c) schedule_cluster(c, options, out, started);
  if (clusters_.size() > 1) {
    // A job that waited in one cluster and started in a later one is not waiting and holds no
    // reservation; a job that waits in several keeps the explanation of the first.
    std::set<JobId> seen;
    std::erase_if(out.waiting, [&](const Explanation& e) {
      return started.count(e.job) > 0 || !seen.insert(e.job).second;
    });
    auto gone = [&](const Reservation& r) { return started.count(r.job) > 0; };
    std::erase_if(out.reservations, gone);
    for (auto& list : reservations_) std::erase_if(list, gone);
  }
  return out;
}

void Scheduler::stop(JobEntry& j, StopDecision d, CycleResult& out) {
  d.job = j.spec.id;
  d.requeue = j.spec.resumable;
  release(j);
  j.state = JobState::Stopping;
  j.run.requeue_on_stop = d.requeue;
  out.stops.push_back(d);
}

void Scheduler::stop_failed_and_drained(CycleResult& out) {
  for (const Node& n : nodes_) {
    if (n.health == NodeHealth::Healthy || jobs_on_node_[n.id].empty()) continue;
    const std::vector<JobEntry*> on_node = jobs_on_node_[n.id];  // stop() edits the list
    for (JobEntry* entry : on_node) {
      JobEntry& j = *entry;
      if (j.state != JobState::Running) continue;
      StopDecision d;
      d.node = n.id;
      if (n.health == NodeHealth::Down) {
        d.reason = StopReason::NodeDown;
        stop(j, d, out);
        continue;
      }
      // Drain: the contract (minimum runtime of this run, or the protected period if it was
      // promoted later) is honoured, then the job stops.
      const Time deadline = std::max(j.run.started + j.spec.min_runtime,
                                     j.run.allocated ? j.run.protected_until : Time{0});
      if (now_ >= deadline) {
        d.reason = StopReason::Drain;
        stop(j, d, out);
      }
    }
  }
}

void Scheduler::change_classes(ClusterId c, ClusterScratch& s, CycleResult& out) {
  if (!config_.demote_over_allocation && !config_.promote_when_funded) return;
  for (const auto& [id, entry] : running_[c]) {
    JobEntry& j = *entry;
    const MilliGpuSeconds m = total_milli(j.run.placement);
    if (j.run.allocated) {
      if (!config_.demote_over_allocation || now_ < j.run.protected_until ||
          config_.funding != Funding::Lookback) {
        continue;
      }
      BudgetId over = kNoBudget;
      for (BudgetId b = j.spec.budget; b != budgets_.root(); b = budgets_.node(b).parent) {
        if (static_cast<double>(s.projected[b]) > config_.allocation_limit * s.allocation[b]) {
          over = b;  // ends at the highest budget over allocation
        }
      }
      if (over == kNoBudget) continue;
      charge_rate(j, -1);
      j.run.allocated = false;
      j.run.protected_until = now_;
      out.class_changes.push_back(ClassChange{id, false, now_, over});
    } else {
      if (!config_.promote_when_funded || j.run.on_reserved ||
          (config_.funding == Funding::Lookback && j.spec.min_runtime <= 0)) {
        continue;
      }
      bool on_bad_node = false;
      for (const GpuSlot& g : j.run.placement) on_bad_node |= !nodes_[g.node].schedulable();
      if (on_bad_node) continue;
      BudgetId limiting = kNoBudget;
      if (!funded(s, j, &limiting)) continue;
      j.run.allocated = true;
      j.run.allocated_since = now_;
      j.run.protected_until = protection_end(j);
      charge_rate(j, +1);
      for (BudgetId cur = j.spec.budget; cur != kNoBudget; cur = budgets_.node(cur).parent) {
        s.projected[cur] += m * j.spec.min_runtime;
      }
      out.class_changes.push_back(ClassChange{id, true, j.run.protected_until, kNoBudget});
    }
  }
}

void Scheduler::schedule_cluster(ClusterId c, const CycleOptions& options, CycleResult& out,
                                 std::set<JobId>& started) {
  if (!scratch_.p) scratch_.p.reset(new ClusterScratch);
  ClusterScratch& s = *scratch_.p;
  s.reset(c, now_);
  s.explain = options.explain_all;
  compute_projected(c, s);
  change_classes(c, s, out);

  s.mask.assign(nodes_.size(), 0);
  s.reserved_by.assign(nodes_.size(), kNoJob);
  for (const Reservation& r : reservations_[c]) {
    const JobEntry* h = job(r.job);
    if (!h || h->state != JobState::Pending) continue;
    s.previous.push_back(r.job);
    for (NodeId n : r.nodes) {
      s.mask[n] = 1;
      s.reserved_by[n] = r.job;
    }
  }

  // Debug jobs first (they must start within seconds), then everything else; each pass walks the
  // budget tree in fair-share order.
  // Running jobs a funded request could take, per node, cheapest first.
  if (config_.preemption && config_.spare_work_within_share) held_by_leaf(c, s.held_all);
  for (NodeId n : cluster_nodes_[c]) {
    if (!config_.preemption) break;  // only preemption takes running work
    const std::size_t first = s.exposed.size();
    for (JobEntry* entry : jobs_on_node_[n]) {
      JobEntry& j = *entry;
      if (j.run.allocated && j.run.protected_until > now_) continue;
      if (j.run.started == now_) continue;  // never undo this cycle's own decisions
      if (preempted_enough(j)) continue;
      s.exposed.push_back(ClusterScratch::Exposed{&j, j.run.allocated, within_share(s, j),
                                                  work_at_risk(j), slots_on(j.run.placement, n)});
    }
    if (s.exposed.size() == first) continue;
    std::sort(s.exposed.begin() + static_cast<std::ptrdiff_t>(first), s.exposed.end(),
              [](const auto& x, const auto& y) {
                return std::tie(x.allocated, x.within_share, x.lost, x.job->spec.id) <
                       std::tie(y.allocated, y.within_share, y.lost, y.job->spec.id);
              });
    s.exposed_nodes.emplace_back(n, std::make_pair(first, s.exposed.size()));
  }

  // Debug jobs first (they must start within seconds), then everything else, each pass in the
  // policy's order. Without explain_all the walk ends once nothing further can start.
  std::uint32_t rank = 0;
  // Nothing more can start, reserve or preempt in this pass (anything_can_start): the walk stops
  // without explain_all, and otherwise only explains the rest (explain_rest).
  bool settled = false;
  // head_of_line_blocking: a job in order could not start, so no job after it may (both passes).
  bool blocked = false;
  for (int pass = 0; pass < 2; ++pass) {
    if (config_.order == QueueOrder::FairShare) {
      Selector sel(*this, s, s.walk, pending_[pass], c);
      BudgetId b = 0;
      std::uint32_t ahead = 0;
      while (JobEntry* j = sel.next(&b, &ahead)) {
        if (blocked) {
          if (!options.explain_all) break;
          wait_behind_head(c, s, *j, rank++, ahead, out);
          continue;
        }
        // (Under head-of-line blocking an inert job is the blocked head: it is considered.)
        if (!options.explain_all && !config_.head_of_line_blocking && budget_inert(c, s, pass, b)) {
          // None of b's jobs can start, reserve or preempt now, and considering them would change
          // nothing: the walk goes on as it would after them, except for a holder of last cycle's
          // reservation among them (it may use its own nodes).
          const JobEntry* holder = next_holder(s, pass, b, *j);
          if (holder != j) {
            if (holder) {
              sel.skip_to(b, pending_key(*holder));
            } else {
              sel.drop(b);
            }
            continue;
          }
        }
        // The same for this one job (its budget may fund cheaper ones). The walk still ends as
        // soon as nothing more can start, or it would pass over the whole queue.
        if (!options.explain_all && !config_.head_of_line_blocking && job_inert(c, s, *j)) {
          if (!anything_can_start(c, s)) break;
          continue;
        }
        if (settled && options.shortcut_settled && !needs_consider(s, *j)) {
          explain_rest(c, s, *j, rank++, ahead, out);
          // It waits, as consider() would have found: under head-of-line blocking it is the head.
          blocked = config_.head_of_line_blocking;
          continue;
        }
        consider(c, s, *j, rank++, ahead, out, started);
        if (j->state == JobState::Running) sel.rekey(b);
        if (config_.head_of_line_blocking && j->state == JobState::Pending) {
          blocked = true;
          continue;
        }
        if (!settled && !anything_can_start(c, s)) {
          if (!options.explain_all) break;
          settled = true;  // the rest only waits: explain it
        }
      }
    } else {
      std::vector<std::uint32_t> seen(budgets_.size(), 0);
      for (auto it = flat_[pass].begin(); it != flat_[pass].end();) {
        JobEntry* j = (it++)->second;  // advance first: starting erases the job
        const auto& accepted = j->spec.clusters;
        if (!accepted.empty() && std::find(accepted.begin(), accepted.end(), c) == accepted.end()) {
          continue;
        }
        if (blocked) {
          if (!options.explain_all) break;
          wait_behind_head(c, s, *j, rank++, seen[j->spec.budget]++, out);
          continue;
        }
        // As in the fair-share walk: a job that can do nothing now is passed over (unless it is
        // the head that blocks the rest).
        if (!options.explain_all && !config_.head_of_line_blocking && job_inert(c, s, *j)) {
          if (!anything_can_start(c, s)) break;
          continue;
        }
        if (settled && options.shortcut_settled && !needs_consider(s, *j)) {
          explain_rest(c, s, *j, rank++, seen[j->spec.budget]++, out);
          blocked = config_.head_of_line_blocking;  // as in the fair-share walk
          continue;
        }
        consider(c, s, *j, rank++, seen[j->spec.budget]++, out, started);
        if (config_.head_of_line_blocking && j->state == JobState::Pending) {
          blocked = true;
          continue;
        }
        if (!settled && !anything_can_start(c, s)) {
          if (!options.explain_all) break;
          settled = true;
        }
      }
    }
  }

  // What is left idle, and how much of it the largest waiting request cannot use.
  ClusterState state;
  state.cluster = c;
  state.largest_waiting_per_node = s.largest_waiting_per_node;
  for (NodeId n : cluster_nodes_[c]) {
    if (!nodes_[n].schedulable()) continue;
    const int free = pool_.whole_free(n);
    state.free_gpus += free;
    if (state.largest_waiting_per_node > 0) {
      state.fragmented_gpus +=
          free < state.largest_waiting_per_node ? free : free % state.largest_waiting_per_node;
    }
  }
  out.clusters.push_back(state);

  // Reservations of holders that were not blocked again this cycle lapse.
  reservations_[c] = s.made;
  out.reservations.insert(out.reservations.end(), s.made.begin(), s.made.end());
}

// Most whole GPUs free on one node that a job not yet considered could use: reserved nodes count
// only where backfill may open them (see consider, step 2) or their holder has not had its turn.
int Scheduler::usable_whole_free(ClusterId c, const ClusterScratch& s) const {
  const auto key =
      std::make_tuple(pool_.version(), s.mask_version, s.made.size() + (s.passed.size() << 32));
  if (s.usable_free_key == key) return s.usable_free;
  int best = 0;
  for (NodeId n : cluster_nodes_[c]) {
    const int free = pool_.whole_free(n);
    if (free <= best || !nodes_[n].schedulable()) continue;
    if (s.mask[n]) {
      // A holder of last cycle that has not been considered yet may start there or free them.
      bool usable = !s.passed_by(s.reserved_by[n]);
      for (std::size_t i = 0; i < s.made.size(); ++i) {
        if (s.made[i].job != s.reserved_by[n]) continue;
        usable =
            (s.made_funded[i] && config_.preemption && config_.backfill_unallocated_on_reserved) ||
            pending_with_end_ > 0;  // work that declared its end may fit before the start
      }
      if (!usable) continue;
    }
    best = free;
  }
  s.usable_free_key = key;
  s.usable_free = best;
  return best;
}

// GPU-seconds a running job would lose if stopped now: all it did in this run, or for a resumable
// job at most what it did since its last checkpoint.
double Scheduler::work_at_risk(const JobEntry& j) const {
  const Duration ran = now_ - j.run.started;
  const Duration at_risk =
      j.spec.resumable ? std::min(ran, config_.assumed_checkpoint_interval) : ran;
  return static_cast<double>(total_milli(j.run.placement)) / kWholeGpu *
         static_cast<double>(at_risk);
}

// Whether j must still go through consider() once the pass has settled: a holder of last
// cycle's reservation (it may re-plan or give its nodes up) or a job another cluster accepts (it
// may wait for that cluster instead).
bool Scheduler::needs_consider(const ClusterScratch& s, const JobEntry& j) const {
  return clusters_.size() > 1 || s.held_before(j.spec.id);
}

// Whether any pending job could still start, or get a reservation, in this cluster pass. Only
// conservative answers: "no" must be certain, since the walk stops on it.
bool Scheduler::anything_can_start(ClusterId c, const ClusterScratch& s) const {
  if (config_.reserve_for_blocked && static_cast<int>(s.made.size()) < config_.max_reservations) {
    return true;
  }
  if (config_.preemption && !s.exposed_nodes.empty() &&
      s.preemption_considered < config_.max_preemption_attempts) {
    return true;
  }
  if (!pending_per_node_.empty() && usable_whole_free(c, s) >= *pending_per_node_.begin()) {
    return true;
  }
  return !pending_fraction_.empty() && pool_.largest_gpu_free(c) >= *pending_fraction_.begin();
}

// Whether no pending job of budget b in this pass, other than a holder of last cycle's reservation,
// can do anything in the current state: none fits on free GPUs it may use, and none is funded
// while a funded job could still reserve or preempt (the first blocked job of the cycle has been
// seen, so an unfunded one cannot reserve). Only certain answers: "yes" lets the walk pass over
// the budget. Considering such a job changes no state (its explanation aside), so the jobs after
// it would be considered in the same state, and are just as inert.
bool Scheduler::budget_inert(ClusterId c, const ClusterScratch& s, int pass, BudgetId b) const {
  if (!s.head_blocked || config_.funding != Funding::Lookback) return false;
  const auto& sizes = pending_sizes_[pass];
  if (b >= sizes.size() || !budgets_.valid(b)) return false;
  const PendingSizes& mine = sizes[b];
  // Funding matters while a funded job could still reserve or preempt in this pass.
  if (funded_may_act(s)) {
    if (mine.debug > 0 && config_.debug_always_funded) return false;
    // The cheapest contract is not affordable, or the smallest request (at least one node's part
    // of it) exceeds the burst cap, so none is funded (both tests are monotone).
    BudgetId unused = kNoBudget;
    Milli smallest = std::numeric_limits<Milli>::max();
    if (!mine.per_node.empty()) smallest = *mine.per_node.begin() * kWholeGpu;
    if (!mine.fraction.empty()) smallest = std::min(smallest, *mine.fraction.begin());
    if (!mine.contracts.empty() && within_allocation(s, b, *mine.contracts.begin(), &unused) &&
        within_burst(s, b, smallest, &unused)) {
      return false;
    }
  }
  if (!mine.per_node.empty() && *mine.per_node.begin() <= backfill_whole_free(c, s)) return false;
  return mine.fraction.empty() || pool_.largest_gpu_free(c) < *mine.fraction.begin();
}

// budget_inert for one job: it cannot be placed where it may go, and is not funded while a funded
// job could still reserve or preempt, and holds no reservation of last cycle.
bool Scheduler::job_inert(ClusterId c, const ClusterScratch& s, const JobEntry& j) const {
  if (!s.head_blocked || s.held_before(j.spec.id)) return false;
  const Shape& shape = j.spec.shape;
  if (shape.fractional() ? pool_.largest_gpu_free(c) >= shape.gpu_milli
                         : shape.gpus_per_node <= backfill_whole_free(c, s)) {
    return false;
  }
  BudgetId unused = kNoBudget;
  return !funded_may_act(s) || !funded(s, j, &unused);
}

// Whether a funded job could still reserve nodes or try preemption in this pass.
bool Scheduler::funded_may_act(const ClusterScratch& s) const {
  return (config_.reserve_for_blocked &&
          static_cast<int>(s.made.size()) < config_.max_reservations) ||
         (config_.preemption && !s.exposed_nodes.empty() &&
          s.preemption_considered < config_.max_preemption_attempts);
}

// The first holder of last cycle's reservations among b's pending jobs of this pass at or after
// `from` in b's order (nullptr if none).
const JobEntry* Scheduler::next_holder(const ClusterScratch& s, int pass, BudgetId b,
                                       const JobEntry& from) const {
  const JobEntry* best = nullptr;
  const PendingKey lo = pending_key(from);
  for (JobId h : s.previous) {
    const JobEntry& e = jobs_.at(h);
    if (e.spec.budget != b || pass_of(e.spec) != pass || pending_key(e) < lo) continue;
    if (!best || pending_key(e) < pending_key(*best)) best = &e;
  }
  return best;
}

Scheduler::PendingKey Scheduler::pending_key(const JobEntry& j) {
  return PendingKey{inverted(j.spec.priority), j.spec.submit_time, j.spec.id};
}

// Most whole GPUs free on one node that a job that holds no reservation may use: nodes outside
// every reservation, and the nodes of this cycle's reservations whose holder may preempt
// (evictable backfill, consider step 2) or, while some pending job declared an expected duration,
// any of them (it may end before the holder's start, step 2). Counting a node that a given job
// may not use only makes the inert tests answer "no" more often.
int Scheduler::backfill_whole_free(ClusterId c, const ClusterScratch& s) const {
  const auto key = std::make_tuple(pool_.version(), s.mask_version, s.made.size());
  if (s.backfill_free_key == key) return s.backfill_free;
  const bool evictable =
      config_.backfill && config_.backfill_unallocated_on_reserved && config_.preemption;
  int best = 0;
  for (NodeId n : cluster_nodes_[c]) {
    const int free = pool_.whole_free(n);
    if (free <= best || !nodes_[n].schedulable()) continue;
    if (s.mask[n]) {
      bool usable = false;
      for (std::size_t i = 0; i < s.made.size(); ++i) {
        if (s.made[i].job == s.reserved_by[n]) {
          usable = (evictable && s.made_funded[i]) || pending_with_end_ > 0;
        }
      }
      if (!usable) continue;
    }
    best = free;
  }
  s.backfill_free_key = key;
  s.backfill_free = best;
  return best;
}

void Scheduler::start(ClusterScratch& s, JobEntry& j, Placement p, bool allocated, StartMode mode,
                      std::vector<JobId> victims, CycleResult& out) {
  // Asked before the start changes the standings, so that it names what stood in the way.
  BudgetId limiting = kNoBudget;
  bool at_burst_limit = false;
  if (!allocated && j.spec.min_runtime > 0) funded(s, j, &limiting, &at_burst_limit);
  remove_pending(j);
  pool_.take(p);
  j.state = JobState::Running;
  ++j.runs;
  RunInfo& r = j.run;
  r = RunInfo{};
  r.cluster = s.cluster;
  r.placement = std::move(p);
  r.started = now_;
  r.allocated = allocated;
  r.allocated_since = now_;
  r.protected_until = allocated ? protection_end(j) : now_;
  running_[s.cluster].emplace(j.spec.id, &j);
  NodeId last = std::numeric_limits<NodeId>::max();
  for (const GpuSlot& g : r.placement) {
    if (g.node != last) jobs_on_node_[g.node].push_back(&j);
    last = g.node;
    if (s.mask[g.node] && s.reserved_by[g.node] != j.spec.id) r.on_reserved = true;
  }
  const MilliGpuSeconds m = total_milli(r.placement);
  for (BudgetId cur = j.spec.budget; cur != kNoBudget; cur = budgets_.node(cur).parent) {
    if (allocated) {
      s.projected[cur] += m * j.spec.min_runtime;
    } else {
      s.rank_extra[cur] += m * config_.usage_bucket;
    }
  }
  if (allocated) charge_rate(j, +1);
  if (allocated && j.spec.kind == JobKind::Debug) {
    s.debug_gpus[j.spec.budget] += j.spec.shape.total_gpus();
  }
  // A holder that starts gives its reservation up.
  if (s.held_before(j.spec.id))
    for (std::size_t n = 0; n < s.reserved_by.size(); ++n) {
      if (s.reserved_by[n] == j.spec.id) {
        s.reserved_by[n] = kNoJob;
        s.mask[n] = 0;
        ++s.mask_version;
      }
    }
  StartDecision d;
  d.job = j.spec.id;
  d.cluster = s.cluster;
  d.placement = r.placement;
  d.allocated = allocated;
  d.protected_until = r.protected_until;
  d.mode = mode;
  d.victims = std::move(victims);
  d.limiting_budget = limiting;
  d.at_burst_limit = at_burst_limit;
  out.starts.push_back(std::move(d));
}

// J waits: its explanation goes out (with explain_all), and it counts for fragmentation.
void Scheduler::waits(ClusterScratch& s, const Explanation& e, CycleResult& out) const {
  if (e.code != WaitCode::NoMatchingNodes) {
    s.largest_waiting_per_node = std::max(s.largest_waiting_per_node, e.needs_gpus_per_node);
  }
  if (s.explain) out.waiting.push_back(e);
}

// What j's explanation says whatever its turn decides: who it is, where it ranks, whether it is
// funded (docs/policy.md §3) and how its budget stands.
Explanation Scheduler::explanation_of(ClusterId c, const ClusterScratch& s, const JobEntry& j,
                                      std::uint32_t rank, std::uint32_t ahead) const {
  Explanation e;
  e.job = j.spec.id;
  e.cluster = c;
  e.rank = rank;
  e.ahead_in_budget = ahead;
  e.budget = j.spec.budget;
  e.needs_nodes = j.spec.shape.nodes;
  e.needs_gpus_per_node = j.spec.shape.gpus_per_node;
  e.funded = funded(s, j, &e.limiting_budget, &e.at_burst_limit);
  e.standing = j.spec.budget < s.projected.size() ? standing_of(s, j.spec.budget) : kInf;
  if (e.limiting_budget != kNoBudget) e.limiting_standing = standing_of(s, e.limiting_budget);
  return e;
}

// The rest of a pass once nothing more can start, reserve or preempt (anything_can_start() said
// no, and nothing that happens to the jobs after can make it say yes): what consider() would
// decide for j is that it waits, so only its explanation is made, without consider()'s searches.
// Holders of last cycle's reservations and jobs that another cluster accepts still go through
// consider(). Speed only: the explanations are consider()'s (the property tests compare them).
void Scheduler::explain_rest(ClusterId c, ClusterScratch& s, const JobEntry& j, std::uint32_t rank,
                             std::uint32_t ahead, CycleResult& out) {
  ++out.stats.considered;
  Explanation e = explanation_of(c, s, j, rank, ahead);
  const ShapeKey key = shape_key(j.spec);
  ShapeMemo scratch_memo;
  ShapeMemo& memo = key.models != ~std::uint64_t{0} ? s.memo[key] : scratch_memo;
  // consider() counts the attempt it may no longer make (step 3).
  if (e.funded && config_.preemption && !s.exposed_nodes.empty()) ++s.preemption_considered;
  explain_wait(c, s, j, e, memo, out);
}

// A job behind a blocked head under head_of_line_blocking: it waits whatever is free, and neither
// reserves nor preempts (only the head's turn may), so it is only explained.
void Scheduler::wait_behind_head(ClusterId c, ClusterScratch& s, const JobEntry& j,
                                 std::uint32_t rank, std::uint32_t ahead, CycleResult& out) {
  ++out.stats.considered;
  Explanation e = explanation_of(c, s, j, rank, ahead);
  e.code = e.funded || j.spec.min_runtime == 0 ? WaitCode::WaitingForGpus : WaitCode::NotFunded;
  e.largest_free = pool_.largest_whole_free(c, j.spec.models);
  // A request no node could ever take says so, as in explain_wait: that is for its owner to fix,
  // wherever it stands in line.
  int matching = 0, healthy = 0;
  for (NodeId n : cluster_nodes_[c]) {
    if (!pool_.could_ever_fit(n, j.spec.shape, j.spec.models)) continue;
    ++matching;
    healthy += nodes_[n].schedulable();
  }
  if (matching < j.spec.shape.nodes) {
    e.code = WaitCode::NoMatchingNodes;
  } else if (healthy < j.spec.shape.nodes) {
    e.code = WaitCode::NoHealthyNodes;
  }
  waits(s, e, out);
}

void Scheduler::consider(ClusterId c, ClusterScratch& s, JobEntry& j, std::uint32_t rank,
                         std::uint32_t ahead, CycleResult& out, std::set<JobId>& started) {
  ++out.stats.considered;
  const Shape& shape = j.spec.shape;
  const auto& models = j.spec.models;

  Explanation e = explanation_of(c, s, j, rank, ahead);

  // A holder may use its own reserved nodes; everyone else is kept off all reserved nodes.
  const bool holder = s.held_before(j.spec.id);
  if (holder) s.passed.push_back(j.spec.id);
  NodeMask own_mask;
  if (holder) {
    own_mask = s.mask;
    for (NodeId n = 0; n < own_mask.size(); ++n) {
      if (s.reserved_by[n] == j.spec.id) own_mask[n] = 0;
    }
  }
  NodeMask& mask = holder ? own_mask : s.mask;

  // 1. Free GPUs outside the reservations.
  const ShapeKey key = shape_key(j.spec);
  const std::uint64_t stamp = pool_.generation() * 1000003u + s.mask_version;
  const bool cacheable = !holder && key.models != ~std::uint64_t{0};
  ShapeMemo scratch_memo;
  ShapeMemo& memo = key.models != ~std::uint64_t{0} ? s.memo[key] : scratch_memo;
  if (!cacheable || memo.failed_at != stamp) {
    ++out.stats.placement_searches;
    if (auto p =
            pool_.place(c, shape, models, &mask, config_.placement, config_.gang_spans_blocks)) {
      started.insert(j.spec.id);
      start(s, j, std::move(*p), e.funded,
            s.head_blocked ? StartMode::Backfilled : StartMode::Placed, {}, out);
      return;
    }
    if (cacheable) memo.failed_at = stamp;
  }

  // 2. Backfill onto reserved GPUs where it cannot delay their holder.
  if (config_.backfill && !s.made.empty()) {
    const Time end_by = j.spec.expected_duration ? now_ + *j.spec.expected_duration : kNever;
    const Time protected_to = e.funded ? now_ + j.spec.min_runtime : now_;
    const int per_node = shape.fractional() ? 1 : shape.gpus_per_node;
    if (s.made_free_at != pool_.version() || s.made_free.size() != s.made.size()) {
      // Most whole GPUs free on one node of each reservation, refreshed as the pool changes.
      s.made_free.assign(s.made.size(), 0);
      s.made_free_max = 0;
      for (std::size_t i = 0; i < s.made.size(); ++i) {
        for (NodeId n : s.made[i].nodes) {
          s.made_free[i] = std::max(s.made_free[i], pool_.whole_free(n));
        }
        s.made_free_max = std::max(s.made_free_max, s.made_free[i]);
      }
      s.made_free_at = pool_.version();
    }
    // (Speed only: no reservation has a node with room for it, so none would be opened.)
    for (int allocated_pass = 1; allocated_pass >= 0 && per_node <= s.made_free_max;
         --allocated_pass) {
      if (allocated_pass == 0 &&
          (!config_.backfill_unallocated_on_reserved || !config_.preemption)) {
        break;
      }
      // Open the reservations this job cannot delay, search, and close them again: the mask is
      // touched only on reserved nodes, never copied.
      std::vector<NodeId>& opened = s.opened_buffer;
      opened.clear();
      for (std::size_t i = 0; i < s.made.size(); ++i) {
        const Reservation& r = s.made[i];
        if (r.job == j.spec.id || s.made_free[i] < per_node) continue;
        // Only work that declared when it ends can be known to end in time.
        const bool ends_in_time =
            end_by != kNever && end_by <= r.expected_start && protected_to <= r.expected_start;
        // Unallocated work can be evicted when the holder is ready, if the holder may preempt.
        const bool allowed = allocated_pass == 1 ? ends_in_time : s.made_funded[i];
        if (!allowed) continue;
        for (NodeId n : r.nodes) {
          if (!mask[n]) continue;
          mask[n] = 0;
          opened.push_back(n);
        }
      }
      if (opened.empty()) continue;
      ++out.stats.placement_searches;
      auto p = pool_.place(c, shape, models, &mask, config_.placement, config_.gang_spans_blocks);
      for (NodeId n : opened) mask[n] = 1;
      if (p) {
        started.insert(j.spec.id);
        start(s, j, std::move(*p), allocated_pass == 1 && e.funded, StartMode::Backfilled, {}, out);
        return;
      }
    }
  }

  // A job that several clusters accept waits here only if no later one has room for it now:
  // it neither preempts nor reserves in this cluster when it is about to start in another.
  if (clusters_.size() > 1) {
    for (ClusterId other = c + 1; other < clusters_.size(); ++other) {
      const auto& accepted = j.spec.clusters;
      if (!accepted.empty() &&
          std::find(accepted.begin(), accepted.end(), other) == accepted.end()) {
        continue;
      }
      if (pool_.place(other, shape, models, nullptr, config_.placement,
                      config_.gang_spans_blocks)) {
        e.code = WaitCode::WaitingForGpus;
        e.largest_free = pool_.largest_whole_free(c, models);
        waits(s, e, out);
        return;
      }
    }
  }

  // 3. Preemption, for funded work only: unallocated victims first, then allocated ones past their
  // contract whose branch stands worse by the margin.
  // The first max_preemption_attempts funded blocked jobs in order may preempt this cycle.
  if (e.funded && config_.preemption && !s.exposed_nodes.empty() &&
      s.preemption_considered++ < config_.max_preemption_attempts) {
    // The same request from the same budget against the same pool fails the same way.
    const auto attempt_key = std::make_pair(key, j.spec.budget);
    auto& failed_at = s.preemption_failed[attempt_key];
    if (holder || failed_at != stamp + 1) {
      ++out.stats.preemption_attempts;
      if (try_preempt(c, s, j, mask, out)) {
        started.insert(j.spec.id);
        return;
      }
      if (!holder) failed_at = stamp + 1;  // +1: 0 means never tried
    }
  }

  explain_wait(c, s, j, e, memo, out);
}

// 4. j waits. Say why, and plan for the first blocked jobs so they are not starved.
void Scheduler::explain_wait(ClusterId c, ClusterScratch& s, const JobEntry& j, Explanation& e,
                             ShapeMemo& memo, CycleResult& out) {
  const Shape& shape = j.spec.shape;
  const auto& models = j.spec.models;
  if (memo.matching < 0) {
    memo.matching = memo.healthy = 0;
    for (NodeId n : cluster_nodes_[c]) {
      if (!pool_.could_ever_fit(n, shape, models)) continue;
      ++memo.matching;
      memo.healthy += nodes_[n].schedulable();
    }
  }
  const int matching = memo.matching, healthy = memo.healthy;
  if (memo.largest_at != pool_.version()) {
    memo.largest_free = pool_.largest_whole_free(c, models);
    memo.largest_at = pool_.version();
  }
  e.largest_free = memo.largest_free;
  if (matching < shape.nodes) {
    e.code = WaitCode::NoMatchingNodes;
  } else if (healthy < shape.nodes) {
    e.code = WaitCode::NoHealthyNodes;
  } else {
    const bool first_blocked = !s.head_blocked;
    s.head_blocked = true;
    if (config_.reserve_for_blocked && static_cast<int>(s.made.size()) < config_.max_reservations &&
        (first_blocked || e.funded)) {
      // Re-plan from scratch: free the holder's old nodes, then choose the best ones now.
      for (NodeId n = 0; n < s.reserved_by.size(); ++n) {
        if (s.reserved_by[n] == j.spec.id) {
          s.reserved_by[n] = kNoJob;
          s.mask[n] = 0;
          ++s.mask_version;  // nodes opened: cached failures no longer hold
        }
      }
      // Plan around the reservations of jobs ranked above this one (made this cycle); last
      // cycle's reservations of jobs not reached yet rank below it and give way.
      NodeMask above(nodes_.size(), 0);
      for (const Reservation& made : s.made) {
        for (NodeId n : made.nodes) above[n] = 1;
      }
      Reservation r = plan_reservation(c, s, j, above);
      if (!r.nodes.empty()) {
        for (NodeId n : r.nodes) {
          s.mask[n] = 1;
          s.reserved_by[n] = j.spec.id;
        }
        ++s.mask_version;
        e.code = WaitCode::HoldsReservation;
        e.expected_start = r.expected_start;
        s.made.push_back(std::move(r));
        s.made_funded.push_back(e.funded);
        waits(s, e, out);
        return;
      }
    }
    e.code = e.funded || j.spec.min_runtime == 0 ? WaitCode::WaitingForGpus : WaitCode::NotFunded;
    const std::uint64_t now_stamp = pool_.generation() * 1000003u + s.mask_version;
    if (!s.made.empty() && memo.probed_at != now_stamp) {
      memo.fits_unmasked =
          pool_.place(c, shape, models, nullptr, config_.placement, config_.gang_spans_blocks)
              .has_value();
      memo.probed_at = now_stamp;
    }
    if (!s.made.empty() && memo.fits_unmasked) {
      e.code = WaitCode::BlockedByReservation;
      e.reserved_for = s.made.front().job;
      e.expected_start = s.made.front().expected_start;
    }
  }
  waits(s, e, out);
}

// ---------------------------------------------------------------------------------------------
// Preemption.

bool Scheduler::preemptible_by(const ClusterScratch& s, const JobEntry& v, const JobEntry& r,
                               VictimReason* why) const {
  why->ran_for = now_ - v.run.started;
  if (!v.run.allocated) {
    why->cls = VictimClass::Unallocated;
    // A strict-priority scheduler lets only higher priority take preemptible work.
    return (config_.order != QueueOrder::Priority || v.spec.priority < r.spec.priority) &&
           unallocated_loss_ok(v, r);
  }
  if (now_ < v.run.protected_until) return false;  // the contract: never inside minimum runtime
  const BudgetId a = budgets_.common_ancestor(v.spec.budget, r.spec.budget);
  if (a == v.spec.budget || a == r.spec.budget) return false;  // same budget: priority only orders
  const BudgetId bv = budgets_.child_on_path(a, v.spec.budget);
  const BudgetId br = budgets_.child_on_path(a, r.spec.budget);
  const MilliGpuSeconds cost = r.spec.shape.total_milli() * r.spec.min_runtime;
  why->cls = VictimClass::OverAllocation;
  why->victim_branch = bv;
  why->requester_branch = br;
  why->victim_standing = standing_of(s, bv);
  why->requester_standing = standing_of(s, br, cost);
  return why->victim_standing > why->requester_standing + config_.preemption_margin;
}

// preemptible_by without the reason, for weighing many victims for one requester: the branch
// comparison depends only on the victim's budget while standings stand still (within one search),
// so it is made once per budget. Call s.new_requester() before each search.
bool Scheduler::may_take(ClusterScratch& s, const JobEntry& v, const JobEntry& r) const {
  if (preempted_enough(v)) return false;
  if (!v.run.allocated) {
    return (config_.order != QueueOrder::Priority || v.spec.priority < r.spec.priority) &&
           unallocated_loss_ok(v, r);
  }
  if (now_ < v.run.protected_until) return false;
  const BudgetId b = v.spec.budget;
  if (s.taker_memo_at.size() <= b) {
    s.taker_memo_at.resize(budgets_.size(), 0);
    s.taker_memo.resize(budgets_.size(), 0);
  }
  if (s.taker_memo_at[b] != s.taker_stamp) {
    VictimReason why;
    s.taker_memo[b] = preemptible_by(s, v, r, &why);
    s.taker_memo_at[b] = s.taker_stamp;
  }
  return s.taker_memo[b];
}

// docs/policy.md section 8, "Preempted enough": a job started more than max_preemptions_per_job
// times (earlier incarnations included) is no longer a victim.
bool Scheduler::preempted_enough(const JobEntry& v) const {
  return config_.max_preemptions_per_job > 0 && v.runs > config_.max_preemptions_per_job;
}

// GPUs (milli) running in each leaf budget of cluster c, allocated or not.
void Scheduler::held_by_leaf(ClusterId c, std::vector<Milli>& held) const {
  held.assign(budgets_.size(), 0);
  for (const auto& [id, entry] : running_[c]) {
    held[entry->spec.budget] += total_milli(entry->run.placement);
  }
}

// docs/policy.md section 8, "Victims within their share": unallocated work of a leaf budget that
// holds at most its fraction of the cluster (at the start of the cycle) is taken last.
bool Scheduler::within_share(const ClusterScratch& s, const JobEntry& v) const {
  if (!config_.spare_work_within_share || v.run.allocated || v.run.on_reserved) return false;
  const BudgetId b = v.spec.budget;
  return static_cast<double>(s.held_all[b]) <=
         fraction_[s.cluster][b] * static_cast<double>(capacity_[s.cluster]);
}

// Whether unallocated `v` is work whose loss max_unallocated_loss_ratio limits: it is not resumable
// (resumable work loses at most a checkpoint interval), holds a contract (minimum runtime > 0:
// demoted past its contract, or started while its budget was over) and is not backfilled onto
// another job's reservation (evictable by design, or large jobs would starve).
bool Scheduler::unallocated_loss_limited(const JobEntry& v) const {
  return config_.max_unallocated_loss_ratio > 0 && !v.run.allocated && v.spec.min_runtime > 0 &&
         !v.spec.resumable && !v.run.on_reserved;
}

// GPU-seconds of the contract a request guarantees: its GPUs x its minimum runtime.
double Scheduler::contract_gpu_seconds(const JobEntry& r) {
  return static_cast<double>(r.spec.shape.total_milli()) / kWholeGpu *
         static_cast<double>(r.spec.min_runtime);
}

// Whether taking unallocated `v` for `r` stays within max_unallocated_loss_ratio on its own (the
// total over all victims is checked in try_preempt).
bool Scheduler::unallocated_loss_ok(const JobEntry& v, const JobEntry& r) const {
  return !unallocated_loss_limited(v) || patience_over(r) ||
         work_at_risk(v) <= config_.max_unallocated_loss_ratio * contract_gpu_seconds(r);
}

// Whether requester `r` has waited unallocated_loss_patience since it was submitted: from then on
// max_unallocated_loss_ratio no longer holds it back, so no unallocated work squats for long.
bool Scheduler::patience_over(const JobEntry& r) const {
  return config_.unallocated_loss_patience > 0 &&
         now_ - r.spec.submit_time >= config_.unallocated_loss_patience;
}

bool Scheduler::try_preempt(ClusterId c, ClusterScratch& s, JobEntry& j, const NodeMask& mask,
                            CycleResult& out) {
  s.new_requester();
  const Shape& shape = j.spec.shape;
  using Cost = ClusterScratch::PreemptCost;
  using NodeOption = ClusterScratch::NodeOption;
  // Buffers reused across attempts: a failed attempt allocates nothing.
  std::vector<NodeOption>& options = s.option_buffer;
  std::vector<const ClusterScratch::Exposed*>& cands = s.candidate_buffer;
  std::vector<JobId>& victims_of = s.victim_buffer;
  std::vector<Milli>& extra = s.extra_buffer;
  options.clear();
  victims_of.clear();

  // Nodes with a job that could be taken, plus, for a gang, nodes already free enough.
  auto consider_node = [&](NodeId n, std::size_t first, std::size_t last) {
    if (!nodes_[n].schedulable() || mask[n] || !pool_.could_ever_fit(n, shape, j.spec.models)) {
      return;
    }
    // Candidates on this node, unallocated before allocated, cheapest loss first.
    cands.clear();
    int could_free = pool_.whole_free(n);
    for (std::size_t i = first; i < last; ++i) {
      const ClusterScratch::Exposed& x = s.exposed[i];
      if (x.job->state != JobState::Running) continue;  // stopped earlier in this cycle
      if (!may_take(s, *x.job, j)) continue;
      cands.push_back(&x);
      could_free += x.gpus_here;
    }
    // Even taking every candidate would not make room (an upper bound: a slot may be a fraction).
    if (!shape.fractional() && could_free < shape.gpus_per_node) return;
    const bool fits_now = shape.fractional() ? (extra.assign(pool_.gpu_count(n), 0),
                                                pool_.fits_node_with(n, shape, extra))
                                             : pool_.whole_free(n) >= shape.gpus_per_node;
    if (fits_now) {
      options.push_back(NodeOption{n, {}, victims_of.size(), victims_of.size()});
      return;
    }
    extra.assign(static_cast<std::size_t>(pool_.gpu_count(n)), 0);
    auto give_back = [&](const ClusterScratch::Exposed* x, Milli sign) {
      for (const GpuSlot& g : x->job->run.placement) {
        if (g.node == n) extra[g.gpu] += sign * g.milli;
      }
    };
    bool fits = false;
    std::size_t taken = 0;
    for (; taken < cands.size() && !fits; ++taken) {
      give_back(cands[taken], +1);
      fits = pool_.fits_node_with(n, shape, extra);
    }
    if (!fits) return;
    // Drop victims that turned out not to be needed, most expensive first.
    std::vector<char>& keep = s.keep_buffer;
    keep.assign(taken, 1);
    for (std::size_t k = taken; k-- > 0;) {
      give_back(cands[k], -1);
      if (pool_.fits_node_with(n, shape, extra)) {
        keep[k] = 0;
      } else {
        give_back(cands[k], +1);
      }
    }
    NodeOption o{n, {}, victims_of.size(), victims_of.size()};
    for (std::size_t k = 0; k < taken; ++k) {
      if (!keep[k]) continue;
      o.cost.allocated_lost += cands[k]->allocated ? cands[k]->lost : 0.0;
      o.cost.within_share += cands[k]->within_share ? 1 : 0;
      o.cost.lost += cands[k]->lost;
      ++o.cost.count;
      victims_of.push_back(cands[k]->job->spec.id);
    }
    o.last = victims_of.size();
    options.push_back(o);
  };
  for (const auto& [n, range] : s.exposed_nodes) consider_node(n, range.first, range.second);
  if (shape.gang()) {
    for (NodeId n : cluster_nodes_[c]) {
      const bool exposed = std::binary_search(
          s.exposed_nodes.begin(), s.exposed_nodes.end(), std::make_pair(n, std::make_pair(0, 0)),
          [](const auto& x, const auto& y) { return x.first < y.first; });
      if (!exposed && pool_.whole_free(n) >= shape.gpus_per_node) consider_node(n, 0, 0);
    }
  }
  if (static_cast<int>(options.size()) < shape.nodes) return false;

  // Choose nodes: the cheapest one, or for a gang the cheapest set within one block if possible.
  auto by_cost = [](const NodeOption* x, const NodeOption* y) {
    return std::tie(x->cost, x->node) < std::tie(y->cost, y->node);
  };
  std::vector<const NodeOption*> chosen;
  if (!shape.gang()) {
    const NodeOption* best = nullptr;
    for (const NodeOption& o : options) {
      if (!best || by_cost(&o, best)) best = &o;
    }
    chosen.push_back(best);
  } else {
    std::map<BlockId, std::vector<const NodeOption*>> by_block;
    std::vector<const NodeOption*> all;
    for (const NodeOption& o : options) {
      by_block[nodes_[o.node].block].push_back(&o);
      all.push_back(&o);
    }
    auto sum = [&](const std::vector<const NodeOption*>& v) {
      Cost t;
      for (int i = 0; i < shape.nodes; ++i) {
        t.allocated_lost += v[i]->cost.allocated_lost;
        t.within_share += v[i]->cost.within_share;
        t.lost += v[i]->cost.lost;
        t.count += v[i]->cost.count;
      }
      return t;
    };
    std::optional<Cost> best;
    for (auto& [block, v] : by_block) {
      if (static_cast<int>(v.size()) < shape.nodes) continue;
      std::sort(v.begin(), v.end(), by_cost);
      const Cost t = sum(v);
      if (!best || t < *best) {
        best = t;
        chosen.assign(v.begin(), v.begin() + shape.nodes);
      }
    }
    if (chosen.empty()) {
      if (!config_.gang_spans_blocks) return false;
      std::sort(all.begin(), all.end(), by_cost);
      chosen.assign(all.begin(), all.begin() + shape.nodes);
    }
  }
  std::vector<JobId> victims;
  for (const NodeOption* o : chosen) {
    victims.insert(victims.end(), victims_of.begin() + static_cast<std::ptrdiff_t>(o->first),
                   victims_of.begin() + static_cast<std::ptrdiff_t>(o->last));
  }
  std::sort(victims.begin(), victims.end());
  victims.erase(std::unique(victims.begin(), victims.end()), victims.end());
  if (victims.empty()) return false;  // it fits without victims only if a search above missed it
  // Allocated work is not destroyed beyond what the requester is guaranteed to do in its place.
  // Nor is unallocated non-resumable work that holds a contract (max_unallocated_loss_ratio, in
  // all), unless the requester has waited its patience.
  if (config_.max_allocated_loss_ratio > 0 || config_.max_unallocated_loss_ratio > 0) {
    double allocated_lost = 0;
    double unallocated_lost = 0;
    for (JobId vid : victims) {
      const JobEntry& v = jobs_.at(vid);
      if (v.run.allocated) allocated_lost += work_at_risk(v);
      if (unallocated_loss_limited(v)) unallocated_lost += work_at_risk(v);
    }
    const double contract = contract_gpu_seconds(j);
    if (config_.max_allocated_loss_ratio > 0 &&
        allocated_lost > config_.max_allocated_loss_ratio * contract) {
      return false;
    }
    if (!patience_over(j) && unallocated_lost > config_.max_unallocated_loss_ratio * contract) {
      return false;
    }
  }

  // What-if: hand the victims' GPUs back, place, and undo if it still does not fit.
  const std::uint64_t generation = pool_.generation();
  for (JobId vid : victims) pool_.release(jobs_.at(vid).run.placement);
  auto p =
      pool_.place(c, shape, j.spec.models, &mask, config_.placement, config_.gang_spans_blocks);
  for (JobId vid : victims) pool_.take(jobs_.at(vid).run.placement);
  if (!p) {
    pool_.restore_generation(generation);
    return false;
  }

  for (JobId vid : victims) {
    JobEntry& v = jobs_.at(vid);
    StopDecision d;
    d.reason = StopReason::Preempted;
    d.for_job = j.spec.id;
    preemptible_by(s, v, j, &d.victim);
    stop(v, d, out);
  }
  start(s, j, std::move(*p), /*allocated=*/true, StartMode::Preempting, victims, out);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Reservations for blocked jobs.

Reservation Scheduler::plan_reservation(ClusterId c, ClusterScratch& s, const JobEntry& j,
                                        const NodeMask& mask) const {
  const Shape& shape = j.spec.shape;
  BudgetId unused = kNoBudget;
  const bool can_preempt = config_.preemption && funded(s, j, &unused);
  s.new_requester();
  const int need = shape.fractional() ? 1 : shape.gpus_per_node;
  using Ready = ClusterScratch::Ready;
  std::vector<Ready>& ready = s.ready_buffer;
  std::vector<std::pair<Time, int>>& releases = s.release_buffer;  // reused for every node
  ready.clear();
  for (NodeId n : cluster_nodes_[c]) {
    if (!nodes_[n].schedulable() || mask[n] || !pool_.could_ever_fit(n, shape, j.spec.models)) {
      continue;
    }
    const int free_now = pool_.whole_free(n);
    Time at = now_;
    if (free_now < need) {
      // When does each job on the node give its GPUs back: its declared end, or, if this job
      // may preempt it, the end of its contract.
      // The node is ready at the first release that brings it to `need`: what is released now
      // counts at once, releases that never come never count, the rest in time order.
      releases.clear();
      int have = free_now;
      for (const JobEntry* entry : jobs_on_node_[n]) {
        const JobEntry& v = *entry;
        Time t = v.spec.expected_duration ? v.run.started + *v.spec.expected_duration : kNever;
        if (can_preempt && may_take(s, v, j)) t = now_;
        if (can_preempt && v.run.allocated && t == kNever) {
          // Past its contract it may become preemptible as standings move: plan on that.
          t = std::max(now_, v.run.protected_until);
        }
        t = std::max(t, now_);
        if (t == now_) {
          have += slots_on(v.run.placement, n);
        } else if (t != kNever) {
          releases.emplace_back(t, slots_on(v.run.placement, n));
        }
      }
      at = kNever;
      if (have >= need) {
        at = now_;
      } else {
        std::sort(releases.begin(), releases.end());
        for (const auto& [t, g] : releases) {
          have += g;
          if (have >= need) {
            at = t;
            break;
          }
        }
      }
    }
    ready.push_back(Ready{at, free_now, n, nodes_[n].block});
  }
  Reservation r;
  r.job = j.spec.id;
  r.cluster = c;
  if (static_cast<int>(ready.size()) < shape.nodes) return r;
  auto earlier = [](const Ready& a, const Ready& b) {
    return std::tie(a.at, b.free_now, a.node) < std::tie(b.at, a.free_now, b.node);
  };
  // Within one block if one has enough candidates: the block whose `nodes`-th ready time is
  // earliest; else the earliest candidates anywhere.
  const std::size_t need_nodes = static_cast<std::size_t>(shape.nodes);
  std::sort(ready.begin(), ready.end(), [&](const Ready& a, const Ready& b) {
    return a.block != b.block ? a.block < b.block : earlier(a, b);
  });
  std::size_t best_first = ready.size();
  for (std::size_t g = 0; g < ready.size();) {
    std::size_t end = g;
    while (end < ready.size() && ready[end].block == ready[g].block) ++end;
    if (end - g >= need_nodes &&
        (best_first == ready.size() ||
         earlier(ready[g + need_nodes - 1], ready[best_first + need_nodes - 1]))) {
      best_first = g;
    }
    g = end;
  }
  std::vector<Ready> chosen;
  if (best_first != ready.size()) {
    chosen.assign(ready.begin() + static_cast<std::ptrdiff_t>(best_first),
                  ready.begin() + static_cast<std::ptrdiff_t>(best_first + need_nodes));
  } else {
    std::sort(ready.begin(), ready.end(), earlier);
    chosen.assign(ready.begin(), ready.begin() + shape.nodes);
  }
  r.expected_start = now_;
  for (const Ready& x : chosen) {
    r.nodes.push_back(x.node);
    r.expected_start = std::max(r.expected_start, x.at);
  }
  std::sort(r.nodes.begin(), r.nodes.end());
  return r;
}

CycleResult plan_cycle(Scheduler state, Time now) {
  return state.cycle(now);
}

}  // namespace allot::core
