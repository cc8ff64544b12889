// Scheduler: the model (clusters, nodes, health), job events (submit, restore, finished, running,
// stopped), time (advance, next_wakeup) and reading. The cycle itself is split by seam across
// scheduler_cycle.cpp and the files it names; README's tour lists them.

#include "core/scheduler.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

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

void Scheduler::ScratchDeleter::operator()(ClusterScratch* s) const {
  delete s;
}

Scheduler::Scheduler(PolicyConfig config, GpuCatalog catalog)
    : detail::SchedulerState(config, std::move(catalog)) {
  pool_.set_spare_mig_nodes(config_.mig_dynamic);
}

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
  recent_requests_.emplace_back();
  recent_workload_.emplace_back();
  recent_stale_.push_back(0);
  fractions_version_ = 0;
  return id;
}

void Scheduler::note_request(const JobSpec& spec) {
  if (config_.placement != PlacementRule::LeastFragmenting || spec.shape.nodes != 1) return;
  for (ClusterId c = 0; c < clusters_.size(); ++c) {
    const auto& accepted = spec.clusters;
    if (!accepted.empty() && std::find(accepted.begin(), accepted.end(), c) == accepted.end()) {
      continue;
    }
    recent_requests_[c].note(spec.shape);
    recent_stale_[c] = 1;
  }
}

std::optional<Placement> Scheduler::place(ClusterId c, const Shape& shape,
                                          const std::vector<GpuModelId>& models,
                                          const NodeMask* mask) {
  if (config_.placement == PlacementRule::LeastFragmenting && recent_stale_[c]) {
    recent_workload_[c] = recent_requests_[c].workload();
    recent_stale_[c] = 0;
  }
  return pool_.place(c, shape, models, mask, config_.placement, config_.gang_spans_blocks,
                     recent_workload_[c]);
}

namespace {

// docs/policy.md section 7.3, "MIG instances": one entry per GPU (or none), each instance of a
// catalogued profile and 1-1000 milli, at most a whole GPU's worth per GPU.
Status check_mig_layout(const std::vector<std::vector<MigInstance>>& layout, int gpus,
                        const GpuCatalog& catalog) {
  if (layout.empty()) return ok_status();
  if (static_cast<int>(layout.size()) != gpus) {
    return Error{"mig",
                 "must list the instances of each of the node's " + std::to_string(gpus) + " GPUs"};
  }
  for (std::size_t g = 0; g < layout.size(); ++g) {
    Milli sum = 0;
    for (const MigInstance& m : layout[g]) {
      if (m.profile == 0 || m.profile > catalog.mig_profile_count()) {
        return Error{"mig", "GPU " + std::to_string(g) + ": an instance of no known profile"};
      }
      if (m.milli < 1 || m.milli > kWholeGpu) {
        return Error{"mig", "GPU " + std::to_string(g) + ": an instance's share must be 1-1000"};
      }
      sum += m.milli;
    }
    if (sum > kWholeGpu) {
      return Error{"mig", "GPU " + std::to_string(g) + ": its instances add up to more than a GPU"};
    }
  }
  return ok_status();
}

}  // namespace

Result<NodeId> Scheduler::add_node(NodeSpec spec) {
  if (spec.cluster >= clusters_.size()) return Error{"cluster", "no such cluster"};
  if (spec.model >= catalog_.size()) return Error{"gpu_model", "not in the catalogue"};
  if (spec.gpus < 0 || spec.gpus > config_.max_gpus_per_node) {
    return Error{"gpus", "must be between 0 and " + std::to_string(config_.max_gpus_per_node)};
  }
  if (auto st = check_mig_layout(spec.mig, spec.gpus, catalog_); !st.ok()) return st.error();
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

Status Scheduler::set_node_mig(NodeId node, std::vector<std::vector<MigInstance>> layout) {
  if (node >= nodes_.size()) return Error{"node", "no such node"};
  if (auto st = check_mig_layout(layout, nodes_[node].spec.gpus, catalog_); !st.ok()) return st;
  nodes_[node].spec.mig = std::move(layout);
  settle_mig_plans(node);
  rebuild_node_capacity(node);
  return ok_status();
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
  if (spec.shape.mig > catalog_.mig_profile_count()) {
    return Error{"mig", "not a MIG profile in the catalogue"};
  }
  refresh_fractions();
  note_request(spec);
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
  note_request(spec);
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
  // Inside the interactive allowance again if it was allocated and its owner's and budget's
  // allowance, as restored so far, still holds it (§6; its contract was affordable at its start).
  if (allocated && allowance_on() && j.spec.kind == JobKind::Interactive &&
      j.spec.min_runtime > 0) {
    int owner_gpus = j.spec.shape.total_gpus();
    int budget_gpus = owner_gpus;
    for (const auto& [id, other] : running_[cluster]) {
      if (other->run.allowance_until <= now_) continue;
      if (other->spec.owner == j.spec.owner) owner_gpus += other->spec.shape.total_gpus();
      if (other->spec.budget == j.spec.budget) budget_gpus += other->spec.shape.total_gpus();
    }
    if (owner_gpus <= config_.interactive_gpus_per_user &&
        (config_.interactive_gpus_per_budget <= 0 ||
         budget_gpus <= config_.interactive_gpus_per_budget)) {
      r.allowance_until = allocated_since + config_.interactive_protection;
    }
  }
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
  for (BudgetId cur = j.spec.budget; cur != kNoBudget; cur = budgets_.parent(cur)) {
    rates[cur] += m;
  }
}

void Scheduler::release(JobEntry& j, bool gpus_already_free) {
  if (j.state != JobState::Running) return;
  if (j.run.allocated) charge_rate(j, -1);
  if (!gpus_already_free) pool_.release(j.run.placement);
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
    if (j.run.allowance_until > 0) j.run.allowance_until = now_ + config_.interactive_protection;
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
  for (BudgetId cur = leaf; cur != kNoBudget; cur = budgets_.parent(cur)) {
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

Time Scheduler::next_wakeup() const {
  // Speed only: this walk over every running job is most of a strict baseline's cycle.
  if (only_events_decide()) return next_mig_wakeup();
  Time t = next_mig_wakeup();
  for (ClusterId c = 0; c < clusters_.size(); ++c) {
    for (const auto& [id, entry] : running_[c]) {
      const JobEntry& j = *entry;
      if (j.run.protected_until > now_) t = std::min(t, j.run.protected_until);
      if (j.run.allowance_until > now_) t = std::min(t, j.run.allowance_until);
      const Time drain_at = j.run.started + j.spec.min_runtime;
      if (drain_at > now_) t = std::min(t, drain_at);
    }
    if (!running_[c].empty()) t = std::min(t, usage_[c].next_expiry());
  }
  return t;
}

CycleResult plan_cycle(Scheduler state, Time now) {
  return state.cycle(now);
}

}  // namespace allot::core
