// The scheduling loop: the controller's thread, its event queue, the cycle and the snapshot it
// publishes. Restoring from the store is in controller_restore.cpp; the events it applies are in
// controller_jobs.cpp, controller_nodes.cpp and controller_budgets.cpp.
#include "server/controller.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "server/controller_internal.h"
#include "server/job_spec.h"
#include "server/standby.h"
#include "store/postgres_store.h"

namespace allot::server {

namespace {

Time system_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Status validate(const ControllerOptions& o) {
  if (o.lease_seconds < 1 || o.lease_seconds > 3600) {
    return Error{"lease_seconds", "must be between 1 and 3600 seconds"};
  }
  if (o.node_timeout_seconds <= o.lease_seconds + 5 || o.node_timeout_seconds > 86400) {
    return Error{"node_timeout_seconds",
                 "must be greater than lease_seconds + 5 (" + std::to_string(o.lease_seconds + 5) +
                     ") and at most 86400: a node's jobs must be stopped by its agent before the "
                     "server gives them to another node"};
  }
  if (o.stop_grace_seconds < 0 || o.stop_grace_seconds > 3600) {
    return Error{"stop_grace_seconds", "must be between 0 and 3600 seconds"};
  }
  return core::ok_status();
}

Controller::Controller(store::Store& store, ControllerOptions options)
    : store_(store), options_(std::move(options)), sched_(options_.policy) {
  if (!options_.clock) options_.clock = system_seconds;
}

Controller::~Controller() {
  stop();
}

void Controller::stop() {
  {
    std::lock_guard lk(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const Snapshot> Controller::snapshot() const {
  std::lock_guard lk(snap_mu_);
  return snap_;
}

void Controller::post(std::function<void()> fn) {
  bool wake = false;
  {
    std::lock_guard lk(mu_);
    wake = queue_.empty();  // else the loop is awake or already woken
    queue_.push_back(std::move(fn));
  }
  if (wake) cv_.notify_one();
}

void Controller::write(WriteBatch batch) {
  if (batch.empty()) return;
  for (const auto& o : options_.observers) o->committing(batch);
  const auto began = std::chrono::steady_clock::now();
  auto st = store_.write(std::move(batch));
  if (!st.ok() && store::is_fenced(st.error())) {
    // Another server holds the leader lease: this one is deposed and none of its writes will go
    // through. It steps down as the lease watcher does (cli/leadership.cpp): exit status 3, so
    // that its supervisor restarts it as a standby. Nothing of this write reached the database.
    std::fprintf(stderr, "allot: %s: stopping now (restarted, this server stands by)\n",
                 st.error().reason.substr(st.error().reason.find(' ') + 1).c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(kDeposedExit);
  }
  if (!st.ok()) {
    // The in-memory state is ahead of the store: the only safe course is to stop and let a
    // restart rebuild from what is durable.
    std::fprintf(stderr, "allot: store write failed: %s\n", st.error().message().c_str());
    std::abort();
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - began;
  for (const auto& o : options_.observers) o->committed(took.count());
}

core::ClusterId Controller::cluster_id(const std::string& name) {
  auto it = cluster_ids_.find(name);
  if (it != cluster_ids_.end()) return it->second;
  auto id = sched_.add_cluster(name);
  cluster_ids_[name] = id;
  return id;
}

Status Controller::start() {
  if (auto st = validate(options_); !st.ok()) return st;
  rebuild();
  rebuild_services();
  for (const auto& o : options_.observers) o->rebuilt(store_);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "allot-loop");
    run();
  });
  return core::ok_status();
}

void Controller::sync() {
  std::promise<void> p;
  auto fut = p.get_future();
  post([&] {
    cycle(true);
    p.set_value();
  });
  fut.get();
}

void Controller::run() {
  using clock = std::chrono::steady_clock;
  auto last_cycle = clock::now() - options_.tick;
  auto last_explained = last_cycle;
  auto event_interval = options_.min_cycle_interval;
  auto explain_interval = options_.tick;
  std::vector<std::pair<store::JobRecord, core::JobSpec>> jobs;
  for (;;) {
    std::deque<std::function<void()>> work;
    {
      std::unique_lock lk(mu_);
      auto deadline = last_cycle + (dirty_ ? event_interval : options_.tick);
      // Under a storm of submissions an event cycle is due already: the loop sleeps until then
      // rather than waking for each one (other events still wake it).
      wake_on_submit_ = !dirty_;
      cv_.wait_until(lk, deadline, [&] {
        return stopping_ || !queue_.empty() || (!submits_.empty() && !dirty_);
      });
      if (stopping_) return;
      work.swap(queue_);
      jobs.swap(submits_);
      taken_ = handed_;  // each snapshot from now on holds them
    }
    // Submissions first: an event about a job (a cancel) is posted after the job was queued.
    take_submits(jobs);
    for (auto& fn : work) fn();
    auto now = clock::now();
    if (now - last_cycle >= (dirty_ ? event_interval : options_.tick)) {
      const bool explain = now - last_explained >= explain_interval;
      cycle(explain);
      last_cycle = clock::now();
      if (explain) {
        last_explained = last_cycle;
        // Explaining a long queue is the costly part: at most a tenth of the loop's time.
        const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(last_cycle - now);
        explain_interval = std::max(options_.tick, 10 * took);
      } else {
        // Under a storm of events, cycles on events take at most a fifth of the loop's time.
        const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(last_cycle - now);
        event_interval = std::clamp(4 * took, options_.min_cycle_interval,
                                    std::max(options_.min_cycle_interval, options_.tick / 2));
      }
    }
  }
}

void Controller::sim_exits(Time now, WriteBatch& batch) {
  std::vector<JobId> done;
  for (JobId id : holding_) {
    auto it = active_.find(id);
    if (it != active_.end() && it->second.sim_end <= now) done.push_back(id);
  }
  for (JobId id : done) {
    auto& a = active_.at(id);
    auto st = parse_job_status(a.rec.state).value_or(JobStatus::Pending);
    if (st == JobStatus::Starting) {
      transition(a, JobStatus::Running, "started (simulated)", a.rec.run_start, batch);
    }
    finish(a, JobStatus::Succeeded, "exited with code 0 (simulated)", now, 0, batch);
  }
}

void Controller::cycle(bool explain) {
  CycleTimer timer(options_.observers);
  const Time now = std::max(options_.clock(), sched_.now());
  WriteBatch batch;
  check_timeouts(now, batch);
  sim_exits(now, batch);
  core::CycleOptions copts;
  copts.explain_all = explain;
  std::erase_if(vacating_, [&](const auto& v) { return v.second.until <= now; });
  reconcile_services(now, batch, explain);
  gate(now, batch);
  auto res = sched_.cycle(now, copts);
  ++cycles_;
  for (const auto& s : res.stops) {
    auto it = active_.find(s.job);
    if (it == active_.end()) continue;
    auto& a = it->second;
    std::string reason = sched_.describe(s);
    if (const int notice = stop_notice_seconds(a);
        notice > 0 && s.reason != core::StopReason::NodeDown && !simulated(a)) {
      reason += "; interactive session: warned now ($ALLOT_STOP_NOTICE), will be stopped " +
                std::to_string(notice) + " s after this event (SIGTERM, then SIGKILL " +
                std::to_string(options_.stop_grace_seconds) + " s later)";
    }
    transition(a, JobStatus::Preempting, reason, now, batch);
    if (s.reason == core::StopReason::NodeDown || simulated(a)) {
      // Nobody will report for a node that is gone; a simulated node stops at once.
      confirm_stop(a, reason, now, batch);
    } else {
      batch.push_back(op::UpdateJob{a.rec});
    }
  }
  for (const auto& c : res.class_changes) {
    auto it = active_.find(c.job);
    if (it == active_.end()) continue;
    if (c.renewed) {  // still allocated: the same accounting segment goes on
      it->second.rec.protected_until = c.protected_until;
      batch.push_back(op::AddEvent{{c.job, now, it->second.rec.state, it->second.rec.state,
                                    "contract renewed: protected for another " +
                                        core::format_duration(it->second.spec.min_runtime)}});
      batch.push_back(op::UpdateJob{it->second.rec});
      continue;
    }
    close_segment(it->second, now, batch);
    it->second.rec.allocated = c.allocated;
    it->second.rec.protected_until = c.protected_until;
    batch.push_back(
        op::AddEvent{{c.job, now, it->second.rec.state, it->second.rec.state,
                      c.allocated ? "promoted: now allocated"
                                  : "demoted: now unallocated (budget over allocation)"}});
    batch.push_back(op::UpdateJob{it->second.rec});
  }
  // Why a job runs unallocated, in words its owner can act on (`allot why` shows it).
  auto unallocated_because = [&](const core::JobSpec& spec, const core::StartDecision& s) {
    if (s.allocated) return std::string();
    if (spec.min_runtime <= 0) return std::string(" (no minimum runtime asked: preemptible)");
    const auto& tree = sched_.budgets();
    if (s.limiting_budget == tree.root()) {
      return std::string(" (the inference tier holds its share of the cluster)");
    }
    if (s.limiting_budget == core::kNoBudget || !tree.valid(s.limiting_budget)) {
      return std::string(" (its budget could not fund the contract)");
    }
    const auto& path = tree.node(s.limiting_budget).path;
    return " (" + path +
           (s.at_burst_limit ? " is over its burst limit" : " is over its allocation") + ")";
  };
  for (const auto& s : res.starts) {
    auto it = active_.find(s.job);
    if (it == active_.end()) continue;
    auto& a = it->second;
    a.rec.cluster = sched_.clusters().at(s.cluster).name;
    a.rec.placement_json = placement_json(s.placement, nodes_, sched_.catalog());
    a.rec.allocated = s.allocated;
    a.rec.protected_until = s.protected_until;
    a.rec.run_start = now;
    a.rec.seg_start = now;
    a.rec.milli = 0;
    for (const auto& g : s.placement) a.rec.milli += g.milli;
    a.rec.runs += 1;
    set_placement(a);
    std::string reason = std::string(s.allocated ? "allocated" : "unallocated") +
                         unallocated_because(a.spec, s) +
                         (s.allowance_until > now
                              ? ", inside " + a.rec.owner +
                                    "'s interactive allowance: neither demoted nor preempted for " +
                                    core::format_duration(s.allowance_until - now)
                              : std::string()) +
                         ", " +
                         (s.mode == core::StartMode::Preempting   ? "preempting"
                          : s.mode == core::StartMode::Backfilled ? "backfilled"
                                                                  : "placed");
    transition(a, JobStatus::Starting, reason, now, batch);
    if (simulated(a)) {
      transition(a, JobStatus::Running, "started (simulated)", now, batch);
      a.sim_end = now + a.spec.expected_duration.value_or(options_.sim_default_duration);
    }
    batch.push_back(op::UpdateJob{a.rec});
  }
  for (const auto& r : res.repartitions) order_repartition(r, now, batch);
  if (explain) {
    auto why = std::make_shared<std::map<JobId, WhyInfo>>();
    for (const auto& e : res.waiting) {
      WhyInfo w;
      w.code = core::to_string(e.code);
      w.text = sched_.describe(e);
      w.rank = e.rank;
      w.funded = e.funded;
      w.expected_start = e.expected_start;
      why->emplace_hint(why->end(), e.job, std::move(w));
    }
    gate(now, batch, false);  // in the words of the states this cycle left
    for (const auto& [id, w] : gate_why_) why->emplace(id, w);
    why_ = std::move(why);
    explained_at_ = now;
    cluster_states_ = res.clusters;
    standing_ = standings();
    publish_services();  // its replicas' states
  }
  write(std::move(batch));
  dirty_ = false;
  publish();
}

int Controller::stop_notice_seconds(const Active& a) const {
  if (a.spec.kind != core::JobKind::Interactive) return 0;
  const auto grace = sched_.config().interactive_stop_grace;
  return static_cast<int>(std::max<core::Duration>(0, grace - options_.stop_grace_seconds));
}

void Controller::publish() {
  auto s = std::make_shared<Snapshot>();
  s->now = sched_.now();
  s->cycles = cycles_;
  s->why = why_;
  s->explained_at = explained_at_;
  s->standing = standing_;
  s->services = services_view_;
  if (!budgets_snap_ || budgets_snap_version_ != sched_.budgets().version()) {
    budgets_snap_ = std::make_shared<const core::BudgetTree>(sched_.budgets());
    budgets_snap_version_ = sched_.budgets().version();
  }
  s->budgets = budgets_snap_;
  for (const auto& [path, b] : budgets_) {
    if (b.removed) continue;
    s->members[path] = b.members;
    s->shares[path] = b.share;
    if (!b.owners.empty()) s->owners[path] = b.owners;
    if (!b.submit_limits.empty()) s->submit_limits[path] = b.submit_limits;
    if (b.default_min_runtime >= 0) s->default_min_runtime[path] = b.default_min_runtime;
    for (const auto& o : b.owners) s->owned_by[o].push_back(path);
  }
  s->user_limits = user_limits_;
  for (const auto& c : sched_.clusters()) {
    ClusterInfo info{c.name, sched_.capacity(c.id)};
    for (const auto& st : cluster_states_) {
      if (st.cluster != c.id) continue;
      info.free_gpus = st.free_gpus;
      info.largest_waiting_per_node = st.largest_waiting_per_node;
      info.fragmented_gpus = st.fragmented_gpus;
    }
    s->clusters.push_back(std::move(info));
  }
  s->cluster_ids = cluster_ids_;
  s->node_shapes.reserve(sched_.nodes().size());
  for (const auto& n : sched_.nodes()) {
    const bool simulated = n.id < nodes_.size() && nodes_[n.id].simulated;
    s->node_shapes.push_back({n.spec.cluster, n.spec.model, n.spec.gpus, simulated});
  }
  s->catalog = std::make_shared<const core::GpuCatalog>(sched_.catalog());
  s->policy = sched_.config();
  s->running = holding_.size();
  s->pending = active_.size() - holding_.size();
  for (const auto& [id, a] : active_) {
    if (holding_.count(id)) continue;
    ++s->waiting_by_owner[a.rec.owner];
    // Only budgets with limits of their own count apart (a few): each on the job's path.
    for (std::string b = a.rec.budget; !s->submit_limits.empty() && !b.empty() && b != "/";
         b = b.substr(0, b.rfind('/'))) {
      if (s->submit_limits.count(b)) ++s->waiting_by_owner_in[a.rec.owner + " " + b];
    }
  }
  s->submits_taken = taken_;
  s->version = ++published_;
  // GPUs still being vacated: those of runs stopping (preempted, drained, cancelled) that their
  // agents have not yet confirmed gone. A job placed on any of them reaches its agents only once
  // they are free, so that two jobs never share a GPU while one spends its grace period.
  std::map<std::string, std::set<int>> vacating;
  for (const auto& [id, v] : vacating_) {
    for (const auto& [node, gpus] : v.gpus) {
      s->assignments[node].stop.push_back({id, v.run});
      vacating[node].insert(gpus.begin(), gpus.end());
    }
  }
  for (JobId id : holding_) {
    auto found = active_.find(id);
    if (found == active_.end() || found->second.rec.state != "preempting") continue;
    const auto& a = found->second;
    if (!a.nodes) continue;
    for (std::size_t r = 0; r < a.nodes->size(); ++r) {
      const auto& node = (*a.nodes)[r];
      if (!a.stopped.count(node)) {
        vacating[node].insert(a.per_node[r].first.begin(), a.per_node[r].first.end());
      }
    }
  }
  // A re-partition reaches the agent once the runs stopped on that GPU (a yield to training) are
  // gone: an agent leaves a GPU a run still holds as it is.
  for (const auto& [node, gpus] : mig_orders_) {
    const auto v = vacating.find(node);
    for (const auto& [gpu, profiles] : gpus) {
      if (v == vacating.end() || v->second.count(gpu) == 0) {
        s->assignments[node].mig_layouts.push_back({gpu, profiles});
      }
    }
  }
  auto waits_for_gpus = [&](const Active& a) {
    for (std::size_t r = 0; r < a.nodes->size(); ++r) {
      auto v = vacating.find((*a.nodes)[r]);
      if (v == vacating.end()) continue;
      for (int g : a.per_node[r].first) {
        if (v->second.count(g)) return true;
      }
    }
    return false;
  };
  for (JobId id : holding_) {
    auto found = active_.find(id);
    if (found == active_.end()) continue;
    auto& a = found->second;
    auto st = parse_job_status(a.rec.state).value_or(JobStatus::Pending);
    if (!a.nodes || a.nodes->empty()) continue;
    if (st == JobStatus::Starting && waits_for_gpus(a)) continue;
    std::string rendezvous;
    {
      // Rank 0's host (its registered address without a port, else its name) and the job's port.
      const auto& first = a.nodes->front();
      std::string host = first;
      if (auto n = node_ids_.find(first);
          n != node_ids_.end() && !nodes_[n->second].address.empty()) {
        host = rendezvous_host(nodes_[n->second].address);
      }
      rendezvous = host + ":" + std::to_string(20000 + id % 10000);
    }
    for (std::size_t r = 0; r < a.nodes->size(); ++r) {
      const auto& node = (*a.nodes)[r];
      if (st == JobStatus::Preempting) {
        if (!a.stopped.count(node)) {
          s->assignments[node].stop.push_back({id, a.rec.runs, stop_notice_seconds(a)});
        }
        continue;
      }
      if (a.exited_ok.count(node)) continue;  // its part of the gang is done
      AssignedRun ar;
      ar.job = id;
      ar.run = a.rec.runs;
      ar.state = st == JobStatus::Running && a.unstarted.count(node) ? "starting" : a.rec.state;
      ar.gpus = a.per_node[r].first;
      ar.milli = a.per_node[r].second;
      ar.mig_profile = a.mig_per_node[r];
      ar.spec = a.spec_json;
      ar.owner = a.rec.owner;
      ar.budget = a.rec.budget;
      ar.name = a.rec.name;
      ar.rank = static_cast<int>(r);
      ar.nodes = a.nodes;
      ar.rendezvous = rendezvous;
      if (a.ready_run == a.rec.runs) ar.ready = a.ready;
      s->assignments[node].run.push_back(std::move(ar));
    }
  }
  std::function<void(std::shared_ptr<const Snapshot>)> hook;
  {
    std::lock_guard lk(snap_mu_);
    snap_ = s;
    hook = on_publish_;
  }
  if (hook) hook(std::move(s));
}

void Controller::on_publish(std::function<void(std::shared_ptr<const Snapshot>)> fn) {
  std::lock_guard lk(snap_mu_);
  on_publish_ = std::move(fn);
}

}  // namespace allot::server
