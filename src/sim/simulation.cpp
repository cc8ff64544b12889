// The event loop: events in, one core cycle per timestamp, decisions carried out, metrics kept.
#include "sim/simulation.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <queue>

#include "sim/simulation_run.h"

namespace allot::sim {
namespace {

// CPU time of the calling thread: a run's cost whatever else shares the machine (runs go in
// parallel, one per thread).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

namespace run_detail {

core::JobSpec Run::spec_for(std::size_t i, std::uint64_t run_id, Time t) const {
  const AdmittedJob& a = job(i);
  const core::PolicyConfig& p = o_.policy;
  core::JobSpec s;
  s.id = run_id;
  s.owner = "job" + std::to_string(a.job.id);
  s.budget = jobs_[i].leaf;
  s.shape = a.shape_for(o_.gang_shape);
  s.earlier_starts = jobs_[i].starts;  // a resubmission carries its earlier runs
  for (const std::string& m : a.job.gpu_models) s.models.push_back(*sched_.catalog().find(m));
  s.kind = *a.job.kind;
  s.min_runtime = std::min(*a.job.min_runtime, p.max_min_runtime);
  if (s.kind == core::JobKind::Debug) {
    if (s.shape.total_gpus() > p.max_debug_gpus) {
      s.kind = core::JobKind::Batch;
    } else {
      s.min_runtime = std::min(s.min_runtime, p.max_debug_min_runtime);
    }
  }
  s.resumable = *a.job.resumable;
  s.priority = *a.job.priority;
  s.submit_time = t;
  if (o_.oracle_durations) s.expected_duration = a.job.duration;
  if (jobs_[i].service >= 0) {  // docs/policy.md §15: the tiers of a service's replicas
    const SimService& svc = sc_.services[static_cast<std::size_t>(jobs_[i].service)].spec;
    s.min_runtime = jobs_[i].protected_tier ? std::min(svc.contract, p.max_min_runtime) : 0;
    s.renew_contract = jobs_[i].protected_tier;
    s.expected_duration.reset();
  }
  return s;
}

void Run::setup() {
  auto c = build_cluster(sc_.cluster, sched_);
  cluster_ = c.ok() ? c.value() : 0;
  (void)apply_budgets(sc_.budgets, sched_.budgets());
  origin_ = sc_.jobs.empty() ? 0 : sc_.jobs.front().job.submit;
  const auto& nodes = sched_.nodes();
  for (const core::Node& n : nodes) {
    node_milli_.push_back(static_cast<Milli>(n.spec.gpus) * core::kWholeGpu);
    capacity_ += node_milli_.back();
  }
  node_alloc_.assign(nodes.size(), 0);
  node_unalloc_.assign(nodes.size(), 0);
  healthy_.assign(nodes.size(), 1);
  for (BucketSeries* s :
       {&available_, &allocated_, &unallocated_, &occupied_, &assigned_all_, &fragmented_}) {
    *s = BucketSeries(origin_, o_.bucket);
  }
  available_.set(origin_, capacity_);
  const std::size_t nb = sched_.budgets().size();
  demand_.assign(nb, BucketSeries(origin_, o_.bucket));
  delivered_ = demand_;
  delivered_allocated_ = demand_;
  budget_jobs_.assign(nb, 0);
  budget_waits_.assign(nb, {});
  budget_censored_.assign(nb, 0);
  budget_preemptions_.assign(nb, 0);
  budget_lost_ms_.assign(nb, 0);
  for (const AdmittedJob& a : sc_.jobs) utilization_known_ |= a.job.utilization_known;

  jobs_.reserve(sc_.jobs.size());
  for (std::size_t i = 0; i < sc_.jobs.size(); ++i) add_logical(i);
  next_run_id_ = sc_.jobs.size() + 1;
  if (sc_.job_source) source_ = sc_.job_source();
  for (const FaultEvent& e : o_.scripted_health) {
    if (e.node < nodes.size()) {
      push(e.time, EventKind::Scripted, e.node, static_cast<std::uint64_t>(e.health));
    }
  }
  if (o_.faults.enabled) {
    faults_ = std::make_unique<FaultSchedule>(o_.faults, nodes.size(), origin_);
    for (const FaultEvent& e : faults_->initial()) {
      push(e.time, EventKind::Fault, e.node, static_cast<std::uint64_t>(e.health));
    }
  }
  setup_services();
}

void Run::add_logical(std::size_t i) {
  const AdmittedJob& a = job(i);
  LogicalJob& j = jobs_.emplace_back();
  j.remaining = a.job.duration;
  j.milli = a.shape.total_milli();
  j.leaf = *sched_.budgets().find(a.budget_path);
  j.category = a.shape.mig != 0                      ? kMig
               : a.shape.nodes > 1                   ? kLarge
               : *a.job.kind == core::JobKind::Debug ? kDebug
                                                     : kBatch;
  if (i < sc_.jobs.size()) ++budget_jobs_[j.leaf];
}

// Tells the JobSource that logical job `ended` is over and queues the jobs it answers with.
void Run::source_answers(std::size_t ended, Time t) {
  if (!source_) return;
  const int node_gpus = sc_.cluster.largest_node_gpus();
  for (SimJob& next : source_->on_job_end(job(ended).job, t)) {
    const auto leaf = sched_.budgets().find(next.budget);
    if (!leaf || !sched_.budgets().is_leaf(*leaf)) {
      ++r_.submit_errors;  // a source's bug; counted, so the conservation checks show it
      continue;
    }
    const std::size_t i = sc_.jobs.size() + made_.size();
    next.id = i + 1;
    next.submit = std::max(next.submit, t);
    AdmittedJob a;
    a.shape = shape_for(next, node_gpus);
    a.uneven_shape = shape_for(next, node_gpus, GangShape::Uneven);
    a.budget_path = next.budget;
    a.job = std::move(next);
    if (!a.job.kind) a.job.kind = core::JobKind::Batch;
    if (!a.job.min_runtime) a.job.min_runtime = 0;
    if (!a.job.resumable) a.job.resumable = false;
    if (!a.job.priority) a.job.priority = core::Priority::Normal;
    const Time at = a.job.submit;
    made_.push_back(std::move(a));
    add_logical(i);
    jobs_.back().arrived = false;
    ++arrivals_due_;
    push(at, EventKind::Arrival, i, 0);
  }
}

void Run::submit(std::size_t i, Time t, bool resubmission) {
  if (!jobs_[i].arrived) {
    jobs_[i].arrived = true;
    --arrivals_due_;
    ++budget_jobs_[jobs_[i].leaf];
  }
  LogicalJob& j = jobs_[i];
  // A JobSource's job takes the next free core id: i + 1 may be a resubmission's already.
  j.run_id = resubmission || i >= sc_.jobs.size() ? next_run_id_++ : i + 1;
  RunSlot& s = slot(j.run_id);
  s.logical = i;
  auto st = sched_.submit(spec_for(i, j.run_id, t), t);
  if (!st.ok()) {
    ++r_.submit_errors;
    j.ended = true;
    record(t, "reject", job(i).job.id, j.run_id, j.milli, st.error().message());
    if (resubmission) demand_[j.leaf].add(t, -j.milli);
    source_answers(i, t);
    return;
  }
  if (!resubmission) demand_[j.leaf].add(t, j.milli);
  record(t, resubmission ? "resubmit" : "submit", job(i).job.id, j.run_id, j.milli,
         job(i).budget_path);
}

void Run::place(const core::Placement& p, bool allocated, int sign, Time t) {
  Milli on_healthy = 0, all = 0;
  for (const core::GpuSlot& g : p) {
    const Milli m = sign * g.milli;
    (allocated ? node_alloc_ : node_unalloc_)[g.node] += m;
    all += m;
    if (healthy_[g.node]) on_healthy += m;
    if (node_alloc_[g.node] + node_unalloc_[g.node] > node_milli_[g.node]) ++overfull_;
  }
  (allocated ? allocated_ : unallocated_).add(t, on_healthy);
  occupied_.add(t, on_healthy);
  assigned_all_.add(t, all);
}

void Run::on_start(const core::StartDecision& d, Time t) {
  RunSlot& s = slot(d.job);
  LogicalJob& j = jobs_[s.logical];
  const AdmittedJob& a = job(s.logical);
  s.running = true;
  s.allocated = d.allocated;
  s.started = t;
  s.placement = d.placement;
  s.overhead = j.starts > 0 && *a.job.resumable ? o_.cost.restart_delay : 0;
  if (auto g = grace_for_.find(d.job); g != grace_for_.end()) {
    s.overhead += g->second;
    grace_for_.erase(g);
  }
  ++s.serial;
  if (j.first_start < 0) {
    j.first_start = t;
    waits_[j.category].push_back(static_cast<double>(t - a.job.submit));
    if (*a.job.kind == core::JobKind::Interactive) {
      interactive_waits_.push_back(static_cast<double>(t - a.job.submit));
    }
    if (j.service < 0) budget_waits_[j.leaf].push_back(static_cast<double>(t - a.job.submit));
  }
  ++j.starts;
  ++r_.runs;
  if (j.service >= 0) {  // a replica runs until the service lets it go; it serves once loaded
    const SimService& svc = sc_.services[static_cast<std::size_t>(j.service)].spec;
    push(t + svc.start_delay, EventKind::ReplicaReady, d.job, s.serial);
  } else {
    push(t + j.remaining + s.overhead, EventKind::JobEnd, d.job, s.serial);
  }
  place(s.placement, s.allocated, +1, t);
  delivered_[j.leaf].add(t, j.milli);
  if (s.allocated) delivered_allocated_[j.leaf].add(t, j.milli);
  if (o_.record_events) {
    std::string why = d.allocated
                          ? "allocated until +" + std::to_string(d.protected_until - t) + "s"
                          : "unallocated";
    why += d.mode == core::StartMode::Backfilled ? ", backfilled"
           : d.mode == core::StartMode::Preempting
               ? ", preempting " + std::to_string(d.victims.size())
               : "";
    record(t, "start", a.job.id, d.job, j.milli, why);
  }
}

// Returns true when the job is pending again (requeued or resubmitted).
bool Run::on_stop(const core::StopDecision& d, Time t) {
  RunSlot& s = slot(d.job);
  const std::size_t i = s.logical;
  if (jobs_[i].service >= 0) {
    stop_replica(d, t);
    return true;
  }
  LogicalJob& j = jobs_[i];
  const AdmittedJob& a = job(i);
  const core::Duration ran = t - s.started;
  const core::Duration useful = std::max<core::Duration>(0, ran - s.overhead);
  core::Duration saved = 0;
  // An interactive session warned before its stop saves its state within the grace: it keeps
  // its work, and the GPUs stay busy for the grace (the requester's overhead; for a drain, lost).
  const core::Duration grace = sched_.config().interactive_stop_grace;
  const bool interactive = *a.job.kind == core::JobKind::Interactive;
  const bool graced = interactive && grace > 0 && d.reason != core::StopReason::NodeDown;
  if (graced) {
    saved = std::min(useful, j.remaining);
    j.remaining -= saved;
    if (d.reason == core::StopReason::Preempted) {
      core::Duration& g = grace_for_[d.for_job];
      g = std::max(g, grace);
    } else {
      lost_ms_ += static_cast<double>(j.milli) * static_cast<double>(grace);
      budget_lost_ms_[j.leaf] += static_cast<double>(j.milli) * static_cast<double>(grace);
    }
  } else if (d.requeue) {
    const core::Duration every = o_.cost.checkpoint_interval;
    saved = every > 0 ? useful / every * every : useful;
    saved = std::min(saved, j.remaining);
    j.remaining -= saved;
  } else {
    j.remaining = a.job.duration;
  }
  if (interactive) {
    ++r_.interactive_stops;
    r_.interactive_preemptions += d.reason == core::StopReason::Preempted;
    interactive_lost_ms_ += static_cast<double>(j.milli) * static_cast<double>(ran - saved);
  }
  lost_ms_ += static_cast<double>(j.milli) * static_cast<double>(ran - saved);
  budget_lost_ms_[j.leaf] += static_cast<double>(j.milli) * static_cast<double>(ran - saved);
  end_run(i, t);
  switch (d.reason) {
    case core::StopReason::Preempted:
      ++r_.preemptions;
      ++budget_preemptions_[j.leaf];
      break;
    case core::StopReason::Drain:
      ++r_.drain_stops;
      break;
    case core::StopReason::NodeDown:
      ++r_.node_down_stops;
      break;
  }
  if (o_.record_events) {
    std::string why = core::to_string(d.reason);
    if (d.reason == core::StopReason::Preempted) {
      why += " for job " + std::to_string(d.for_job) +
             (d.victim.cls == core::VictimClass::Unallocated  ? " (unallocated)"
              : d.victim.cls == core::VictimClass::AboveShare ? " (above share)"
                                                              : " (over allocation)");
    } else {
      why += " on " + sched_.nodes()[d.node].spec.name;
    }
    why += "; lost " + std::to_string(ran - saved) + "s";
    record(t, "stop", a.job.id, d.job, j.milli, why);
  }
  (void)sched_.job_stopped(d.job, t);
  if (d.requeue) return true;
  ++r_.resubmissions;
  submit(i, t, true);
  return !jobs_[i].ended;  // not j: a refused job's JobSource answer may grow jobs_
}

// Logical job i's current run gives its GPUs back at t: its GPU-time counts toward utilization,
// and its placement and its budget's delivered GPUs are taken off.
void Run::end_run(std::size_t i, Time t) {
  const LogicalJob& j = jobs_[i];
  RunSlot& s = slot(j.run_id);
  const double ms = static_cast<double>(j.milli) * static_cast<double>(t - s.started);
  assigned_ms_ += ms;
  used_ms_ += ms * job(i).job.utilization;
  place(s.placement, s.allocated, -1, t);
  delivered_[j.leaf].add(t, -j.milli);
  if (s.allocated) delivered_allocated_[j.leaf].add(t, -j.milli);
  s.running = false;
  s.serving = false;
  ++s.serial;
}

void Run::on_class_change(const core::ClassChange& c, Time t) {
  RunSlot& s = slot(c.job);
  if (!s.running || s.allocated == c.allocated) return;
  LogicalJob& j = jobs_[s.logical];
  place(s.placement, s.allocated, -1, t);
  s.allocated = c.allocated;
  place(s.placement, s.allocated, +1, t);
  delivered_allocated_[j.leaf].add(t, c.allocated ? j.milli : -j.milli);
  ++r_.class_changes;
  if (o_.record_events) {
    std::string why = c.allocated ? "promoted to allocated" : "demoted to unallocated";
    if (c.limiting_budget != core::kNoBudget) {
      why += ": " + sched_.budgets().node(c.limiting_budget).path + " over allocation";
    }
    record(t, "class", job(s.logical).job.id, c.job, j.milli, why);
  }
}

void Run::on_end(std::uint64_t run_id, std::uint64_t serial, Time t) {
  RunSlot& s = slot(run_id);
  if (!s.running || s.serial != serial) return;  // stopped since this end was planned
  LogicalJob& j = jobs_[s.logical];
  const AdmittedJob& a = job(s.logical);
  lost_ms_ += static_cast<double>(j.milli) * static_cast<double>(s.overhead);
  budget_lost_ms_[j.leaf] += static_cast<double>(j.milli) * static_cast<double>(s.overhead);
  end_run(s.logical, t);
  demand_[j.leaf].add(t, -j.milli);
  j.remaining = 0;
  j.ended = true;
  ++j.end_count;
  ++r_.completed;
  completion_.push_back(static_cast<double>(t - a.job.submit));
  last_completion_ = std::max(last_completion_, t);
  record(t, "finish", a.job.id, run_id, j.milli, "");
  (void)sched_.job_finished(run_id, t);
  source_answers(s.logical, t);
}

void Run::on_fault(core::NodeId node, core::NodeHealth health, Time t, bool scripted) {
  const bool now_healthy = health == core::NodeHealth::Healthy;
  if (now_healthy != static_cast<bool>(healthy_[node])) {
    const int sign = now_healthy ? +1 : -1;
    available_.add(t, sign * node_milli_[node]);
    allocated_.add(t, sign * node_alloc_[node]);
    unallocated_.add(t, sign * node_unalloc_[node]);
    occupied_.add(t, sign * (node_alloc_[node] + node_unalloc_[node]));
    healthy_[node] = now_healthy;
  }
  (void)sched_.set_node_health(node, health, now_healthy ? "repaired" : "simulated fault", t);
  record(t, "node", 0, 0, node_milli_[node],
         sched_.nodes()[node].spec.name + " " + core::to_string(health));
  if (scripted) return;
  const FaultEvent next = faults_->next(node);
  push(next.time, EventKind::Fault, next.node, static_cast<std::uint64_t>(next.health));
}

// The core decided a new MIG layout for a GPU: it is unusable (the core holds it) until the
// layout is made, SimOptions::mig_reconfigure later.
void Run::on_repartition(const core::MigRepartition& r, Time t) {
  ++(r.instances.empty() ? r_.mig_merges : r_.mig_splits);
  r_.mig_reconfigure_gpu_hours += static_cast<double>(o_.mig_reconfigure) / 3600.0;
  mig_making_[{r.node, r.gpu}] = r.instances;
  push(t + o_.mig_reconfigure, EventKind::MigReady, r.node, static_cast<std::uint64_t>(r.gpu));
  if (o_.record_events) {
    std::string layout;
    for (const core::MigInstance& m : r.instances) {
      layout += (layout.empty() ? "" : " ") + sched_.catalog().mig_profile(m.profile).name;
    }
    record(t, "mig", 0, r.for_job, core::kWholeGpu,
           sched_.nodes()[r.node].spec.name + " GPU " + std::to_string(r.gpu) + ": " +
               (layout.empty() ? "whole" : layout));
  }
}

void Run::on_mig_ready(core::NodeId node, int gpu) {
  auto it = mig_making_.find({node, gpu});
  if (it == mig_making_.end()) return;
  (void)sched_.set_gpu_mig(node, gpu, std::move(it->second));
  mig_making_.erase(it);
}

// When the run is expected to end, for the progress bar: the period asked for (--until, a closed
// loop's horizon), else a lower bound of when a fixed workload's last job ends: no job ends
// before its submission plus its duration, and all the work takes at least work / capacity.
Time Run::expected_end(Time stop_at) const {
  if (o_.until != core::kNever) return o_.until;
  Time end = origin_;
  double work = 0;  // milli-GPU-seconds
  for (const AdmittedJob& a : sc_.jobs) {
    end = std::max(end, a.job.submit + a.job.duration);
    work += static_cast<double>(a.shape.total_milli()) * static_cast<double>(a.job.duration);
  }
  if (capacity_ > 0) {
    end = std::max(end, origin_ + static_cast<Time>(work / static_cast<double>(capacity_)));
  }
  if (source_) end = std::max(end, source_->horizon());
  return std::min(end, stop_at);
}

void Run::measure_fragmentation(Time t) {
  const Milli free = available_.rate() - occupied_.rate();
  // The cycles explain nothing (CycleOptions{explain_all = false}), so the smallest request comes
  // from the core's own count of pending sizes.
  const Milli smallest = sched_.smallest_pending();
  fragmented_.set(t, free > 0 && smallest > 0 && smallest <= free ? free : 0);
}

void Run::charge_backlog(std::size_t backlog, double seconds) {
  static constexpr std::size_t kFrom[] = {0, 1'000, 3'000, 10'000, 30'000, 100'000};
  auto& buckets = r_.core_by_backlog;
  if (buckets.empty()) {
    for (std::size_t from : kFrom) buckets.push_back(RunResult::BacklogCost{from, 0, 0});
  }
  std::size_t i = buckets.size() - 1;
  while (backlog < buckets[i].pending_from) --i;
  ++buckets[i].cycles;
  buckets[i].core_seconds += seconds;
}

void Run::cycles(Time t) {
  // Requeued and resubmitted jobs are considered again at once, in a further cycle at the same
  // time (a bounded number of times).
  for (int round = 0; round < 4; ++round) {
    const std::size_t backlog = sched_.pending_count();
    // CPU time of this thread, not wall time: on a shared machine the wall clock also counts
    // the time other processes held the core.
    const double c0 = thread_cpu_seconds();
    const core::CycleResult cr = sched_.cycle(t, core::CycleOptions{/*explain_all=*/false});
    const double spent = thread_cpu_seconds() - c0;
    r_.core_seconds += spent;
    ++r_.cycles;
    charge_backlog(backlog, spent);
    bool again = false;
    for (const core::StopDecision& d : cr.stops) again |= on_stop(d, t);
    for (const core::ClassChange& c : cr.class_changes) on_class_change(c, t);
    for (const core::StartDecision& d : cr.starts) on_start(d, t);
    for (const core::MigRepartition& r : cr.repartitions) on_repartition(r, t);
    measure_fragmentation(t);
    if (!again) break;
  }
}

RunResult Run::go() {
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = thread_cpu_seconds();
  r_.policy = o_.policy_name;
  r_.description = o_.policy_description;
  r_.label = o_.label;
  r_.config = o_.policy;
  r_.uneven_gangs = o_.gang_shape == GangShape::Uneven;
  RunProgress* const progress = o_.progress;
  if (progress) {
    progress->start_ns.store(progress_clock_ns(), std::memory_order_relaxed);
    progress->started.store(true, std::memory_order_relaxed);
  }
  setup();
  const std::size_t n = sc_.jobs.size();
  Time last_arrival = n ? sc_.jobs.back().job.submit : origin_;
  if (source_) last_arrival = std::max(last_arrival, source_->horizon());
  const Time stop_at = std::min(o_.until, last_arrival + o_.max_drain);
  if (progress)
    progress->expected.store(expected_end(stop_at) - origin_, std::memory_order_relaxed);
  std::size_t next = 0;
  Time wake = core::kNever, now = origin_;
  bool cut = false;
  while (true) {
    // Done when the workload's jobs are. Services' replicas run for as long as the run: to
    // --until where it is given.
    if (next >= n && sched_.jobs().size() == live_replicas() && arrivals_due_ == 0 &&
        (services_.empty() || o_.until == core::kNever)) {
      break;
    }
    Time t = core::kNever;
    if (next < n) t = sc_.jobs[next].job.submit;
    if (!events_.empty()) t = std::min(t, events_.top().time);
    t = std::min(t, wake);
    if (t == core::kNever) break;
    if (t > stop_at) {
      cut = true;
      break;
    }
    now = t;
    while (!events_.empty() && events_.top().time == t) {
      const Event e = events_.top();
      events_.pop();
      ++r_.events_processed;
      if (e.kind == EventKind::JobEnd) {
        on_end(e.a, e.b, t);
      } else if (e.kind == EventKind::Arrival) {
        submit(static_cast<std::size_t>(e.a), t, false);
      } else if (e.kind == EventKind::MigReady) {
        on_mig_ready(static_cast<core::NodeId>(e.a), static_cast<int>(e.b));
      } else if (e.kind == EventKind::ServiceReport) {
        on_service_report(static_cast<std::size_t>(e.a), t);
      } else if (e.kind == EventKind::ReplicaReady) {
        on_replica_ready(e.a, e.b, t);
      } else {
        on_fault(static_cast<core::NodeId>(e.a), static_cast<core::NodeHealth>(e.b), t,
                 e.kind == EventKind::Scripted);
      }
    }
    while (next < n && sc_.jobs[next].job.submit == t) {
      ++r_.events_processed;
      submit(next++, t, false);
    }
    cycles(t);
    wake = sched_.next_wakeup();
    if (wake <= t) wake = core::kNever;  // the core promises a time after now
    if (progress) {
      progress->elapsed.store(t - origin_, std::memory_order_relaxed);
      progress->events.store(r_.events_processed, std::memory_order_relaxed);
    }
  }
  finish(cut ? stop_at : now);
  if (progress) {
    progress->elapsed.store((cut ? stop_at : now) - origin_, std::memory_order_relaxed);
    progress->events.store(r_.events_processed, std::memory_order_relaxed);
    progress->end_ns.store(progress_clock_ns(), std::memory_order_relaxed);
    progress->done.store(true, std::memory_order_release);
  }
  r_.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  r_.cpu_seconds = thread_cpu_seconds() - cpu0;
  return std::move(r_);
}

}  // namespace run_detail

Summary summarize(std::vector<double>& v, std::size_t censored) {
  Summary s;
  s.count = v.size();
  s.censored = censored;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  auto rank = [&](double p) {
    const std::size_t k = static_cast<std::size_t>(std::ceil(p * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
  };
  s.p50 = rank(0.50);
  s.p90 = rank(0.90);
  s.p99 = rank(0.99);
  s.max = v.back();
  return s;
}

RunResult simulate(const Scenario& scenario, const SimOptions& options) {
  run_detail::Run run(scenario, options);
  return run.go();
}

}  // namespace allot::sim
