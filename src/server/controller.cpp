#include "server/controller.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "server/job_spec.h"

namespace allot::server {

using core::Error;
using json = nlohmann::json;
using store::WriteBatch;
namespace op = store::op;

std::string placement_json(const core::Placement& p, const std::vector<store::NodeRecord>& nodes) {
  json a = json::array();
  for (const auto& s : p) {
    a.push_back({{"node", nodes.at(s.node).name}, {"gpu", s.gpu}, {"milli", s.milli}});
  }
  return a.dump();
}

std::string rendezvous_host(const std::string& address) {
  if (!address.empty() && address[0] == '[') {  // [v6] or [v6]:port
    auto close = address.find(']');
    return close == std::string::npos ? address : address.substr(0, close + 1);
  }
  auto colon = address.find(':');
  if (colon == std::string::npos) return address;
  if (address.find(':', colon + 1) != std::string::npos) return "[" + address + "]";  // bare v6
  return address.substr(0, colon);                                                    // host:port
}

std::vector<std::string> placement_nodes(const std::string& text) {
  std::vector<std::string> out;
  auto j = json::parse(text, nullptr, false);
  if (!j.is_array()) return out;
  for (const auto& s : j) {
    auto n = s.value("node", "");
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

namespace {

core::NodeHealth parse_health(const std::string& h) {
  if (h == "unhealthy") return core::NodeHealth::Unhealthy;
  if (h == "draining") return core::NodeHealth::Draining;
  if (h == "down") return core::NodeHealth::Down;
  return core::NodeHealth::Healthy;
}

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

template <typename T>
T Controller::call(std::function<T()> fn) {
  std::promise<T> p;
  auto fut = p.get_future();
  post([&] { p.set_value(fn()); });
  return fut.get();
}

void Controller::write(WriteBatch batch) {
  if (batch.empty()) return;
  for (const auto& o : options_.observers) o->committing(batch);
  const auto began = std::chrono::steady_clock::now();
  auto st = store_.write(std::move(batch));
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

void Controller::set_placement(Active& a) {
  // The spec as the agent gets it, parsed once per job when it first holds GPUs.
  if (!a.spec_json) {
    a.spec_json = std::make_shared<const json>(json::parse(a.rec.spec_json, nullptr, false));
  }
  auto nodes = std::make_shared<std::vector<std::string>>();
  a.per_node.clear();
  a.exited_ok.clear();
  a.stopped.clear();
  auto slots = json::parse(a.rec.placement_json, nullptr, false);
  if (slots.is_array()) {
    for (const auto& g : slots) {
      auto node = g.value("node", "");
      auto pos = std::find(nodes->begin(), nodes->end(), node);
      std::size_t i = static_cast<std::size_t>(pos - nodes->begin());
      if (pos == nodes->end()) {
        nodes->push_back(node);
        a.per_node.emplace_back();
      }
      a.per_node[i].first.push_back(g.value("gpu", 0));
      a.per_node[i].second = g.value("milli", core::kWholeGpu);
    }
  }
  a.nodes = std::move(nodes);
}

bool Controller::simulated(const Active& a) const {
  if (!a.nodes || a.nodes->empty()) return false;
  for (const auto& n : *a.nodes) {
    auto it = node_ids_.find(n);
    if (it == node_ids_.end() || !nodes_[it->second].simulated) return false;
  }
  return true;
}

Status Controller::transition(Active& a, JobStatus to, const std::string& reason, Time now,
                              WriteBatch& batch) {
  auto from = parse_job_status(a.rec.state).value_or(JobStatus::Pending);
  if (!can_transition(from, to)) {
    return Error{"state",
                 std::string("cannot go from ") + to_string(from) + " to " + to_string(to)};
  }
  a.rec.state = to_string(to);
  a.rec.reason = reason;
  a.rec.updated_at = now;
  if (holds_gpus(to)) {
    holding_.insert(a.rec.id);
  } else {
    holding_.erase(a.rec.id);
  }
  batch.push_back(op::AddEvent{{a.rec.id, now, to_string(from), to_string(to), reason}});
  return core::ok_status();
}

void Controller::close_segment(Active& a, Time now, WriteBatch& batch) {
  if (a.rec.seg_start > 0 && now > a.rec.seg_start && a.rec.milli > 0) {
    batch.push_back(op::AddLedger{{0, a.rec.id, a.rec.owner, a.rec.budget, a.rec.cluster,
                                   a.rec.seg_start, now, a.rec.milli, a.rec.allocated}});
  }
  a.rec.seg_start = now;
}

void Controller::finish(Active& a, JobStatus to, const std::string& reason, Time now,
                        std::optional<int> code, WriteBatch& batch) {
  auto from = parse_job_status(a.rec.state).value_or(JobStatus::Pending);
  if (holds_gpus(from)) close_segment(a, now, batch);
  if (!transition(a, to, reason, now, batch).ok()) return;
  a.rec.exit_code = code;
  a.rec.seg_start = 0;
  batch.push_back(op::UpdateJob{a.rec});
  sched_.job_finished(a.rec.id, now);
  holding_.erase(a.rec.id);
  active_.erase(a.rec.id);
}

void Controller::confirm_stop(Active& a, const std::string& how, Time now, WriteBatch& batch) {
  // The cause given when the stop was asked for ("preempted for job 24 ...: it ran unallocated")
  // stays the job's reason; how its processes ended ("killed by signal 15") follows it.
  const std::string reason =
      a.rec.state == "preempting" && !a.rec.reason.empty() && a.rec.reason != how
          ? a.rec.reason + "; " + how
          : how;
  close_segment(a, now, batch);
  a.rec.seg_start = 0;
  const auto* entry = sched_.job(a.rec.id);
  const bool requeue = entry && entry->run.requeue_on_stop;
  sched_.job_stopped(a.rec.id, now);
  a.sim_end = core::kNever;
  if (requeue) {
    transition(a, JobStatus::Requeued, reason, now, batch);
    batch.push_back(op::UpdateJob{a.rec});
  } else {
    transition(a, JobStatus::Preempted, reason, now, batch);
    batch.push_back(op::UpdateJob{a.rec});
    active_.erase(a.rec.id);
  }
}

Status Controller::start() {
  if (auto st = validate(options_); !st.ok()) return st;
  rebuild();
  for (const auto& o : options_.observers) o->rebuilt(store_);
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "allot-loop");
    run();
  });
  return core::ok_status();
}

void Controller::rebuild() {
  const Time now = options_.clock();
  WriteBatch batch;
  for (const auto& b : store_.budgets()) {
    budgets_[b.path] = b;
    if (b.removed || b.path == "/") continue;
    auto id = sched_.budgets().ensure_path(b.path, b.share);
    if (id.ok()) sched_.budgets().set_share(id.value(), b.share);
  }
  for (const auto& n : store_.nodes()) {
    core::NodeSpec spec;
    spec.name = n.name;
    spec.cluster = cluster_id(n.cluster);
    spec.model = sched_.catalog().intern(n.model);
    spec.gpus = n.gpus;
    spec.block = n.block;
    auto id = sched_.add_node(spec);
    if (!id.ok()) continue;
    node_ids_[n.name] = id.value();
    nodes_.resize(id.value() + 1);
    nodes_[id.value()] = n;
    // After a restart every node has a fresh node_timeout_seconds before it can be marked down.
    std::lock_guard lk(contact_mu_);
    last_contact_[n.name] = now;
    if (n.timed_out && n.health == "down") timed_out_.insert(n.name);
  }
  sched_.advance(now);
  const auto lookback = options_.policy.usage_half_life > 0 ? 20 * options_.policy.usage_half_life
                                                            : options_.policy.lookback;
  for (const auto& e : store_.ledger(now > lookback ? now - lookback : 0, now + 1)) {
    if (!e.allocated) continue;
    auto leaf = sched_.budgets().find(e.budget);
    auto c = cluster_ids_.find(e.cluster);
    if (leaf && c != cluster_ids_.end()) {
      sched_.record_usage(c->second, *leaf, e.start, std::min(e.end, now), e.milli);
    }
  }

  // Running jobs go back on the GPUs they hold (Scheduler::restore_running). The open ledger
  // segment up to now is closed first.
  std::vector<Active> queued;
  for (auto& rec : store_.active_jobs()) {
    last_job_id_ = std::max<JobId>(last_job_id_, rec.id);
    Active a;
    a.rec = rec;
    set_placement(a);
    auto spec =
        spec_from_canonical(rec.spec_json, sched_.catalog(), cluster_ids_, sched_.budgets());
    auto st = parse_job_status(rec.state).value_or(JobStatus::Pending);
    if (!spec.ok()) {
      active_[rec.id] = a;
      finish(active_[rec.id], JobStatus::Failed, "cannot be restored: " + spec.error().message(),
             now, std::nullopt, batch);
      continue;
    }
    a.spec = spec.value();
    a.spec.id = rec.id;
    a.spec.owner = rec.owner;
    a.spec.submit_time = rec.submit_time;
    if (is_queued(st)) {
      queued.push_back(std::move(a));
      continue;
    }
    // Holds GPUs: charge the open segment, then put it back where it was.
    if (a.rec.allocated && a.rec.seg_start > 0) {
      auto c = cluster_ids_.find(a.rec.cluster);
      if (c != cluster_ids_.end()) {
        sched_.record_usage(c->second, a.spec.budget, a.rec.seg_start, now, a.rec.milli);
      }
    }
    close_segment(a, now, batch);
    // Back on exactly the GPUs it held, with its class and contract as recorded.
    bool restored = false;
    core::Placement placement;
    auto slots = json::parse(a.rec.placement_json, nullptr, false);
    auto cluster = cluster_ids_.find(a.rec.cluster);
    if (slots.is_array() && cluster != cluster_ids_.end()) {
      bool known = true;
      for (const auto& slot : slots) {
        auto node = node_ids_.find(slot.value("node", ""));
        if (node == node_ids_.end()) {
          known = false;
          break;
        }
        placement.push_back(core::GpuSlot{node->second, slot.value<std::uint16_t>("gpu", 0),
                                          slot.value<core::Milli>("milli", core::kWholeGpu)});
      }
      const Time allocated_since = a.rec.allocated && a.rec.protected_until != core::kNever
                                       ? a.rec.protected_until - a.spec.min_runtime
                                       : a.rec.run_start;
      restored = known && sched_
                              .restore_running(a.spec, cluster->second, placement, a.rec.run_start,
                                               a.rec.allocated, allocated_since, now)
                              .ok();
    }
    active_[rec.id] = std::move(a);
    Active& act = active_[rec.id];
    if (!restored) {
      sched_.job_finished(rec.id, now);
      act.rec.seg_start = 0;
      transition(act, act.spec.resumable ? JobStatus::Requeued : JobStatus::Preempted,
                 "its nodes no longer hold it after a restart", now, batch);
      if (!act.spec.resumable) {
        batch.push_back(op::UpdateJob{act.rec});
        active_.erase(rec.id);
        continue;
      }
      queued.push_back(act);
      active_.erase(rec.id);
      continue;
    }
    if (st == JobStatus::Preempting) {
      // The stop was decided before the restart: carry it through. The agents keep stopping the
      // run with its grace period, and its GPUs reach no other job until they say it is gone.
      vacate(act, now);
      sched_.job_finished(rec.id, now);
      act.rec.seg_start = 0;
      transition(act, act.spec.resumable ? JobStatus::Requeued : JobStatus::Preempted,
                 "stopped across a restart", now, batch);
      batch.push_back(op::UpdateJob{act.rec});
      if (act.spec.resumable) {
        queued.push_back(act);
      }
      active_.erase(rec.id);
      continue;
    }
    if (simulated(act)) {
      act.sim_end =
          act.rec.run_start + act.spec.expected_duration.value_or(options_.sim_default_duration);
    }
    holding_.insert(rec.id);
    batch.push_back(op::UpdateJob{act.rec});
  }
  for (const auto& [name, id] : node_ids_) {
    const auto& n = nodes_[id];
    sched_.set_cordoned(id, n.cordoned);
    if (n.health != "healthy")
      sched_.set_node_health(id, parse_health(n.health), n.health_reason, now);
  }
  for (auto& a : queued) {
    auto st = sched_.submit(a.spec, now);
    JobId id = a.rec.id;
    active_[id] = std::move(a);
    if (!st.ok()) {
      finish(active_[id], JobStatus::Failed, "rejected by the scheduler: " + st.error().message(),
             now, std::nullopt, batch);
    }
  }
  last_job_id_ = std::max<JobId>(last_job_id_, store_.max_job_id());
  write(std::move(batch));
  why_ = std::make_shared<const std::map<JobId, WhyInfo>>();
  publish();
}

void Controller::submitted(store::JobRecord rec, core::JobSpec spec) {
  // Queued apart from other events (no closure to allocate), taken in order by the loop.
  bool wake = false;
  {
    std::lock_guard lk(mu_);
    wake = wake_on_submit_ && queue_.empty() && submits_.empty();
    submits_.emplace_back(std::move(rec), std::move(spec));
  }
  if (wake) cv_.notify_one();
}

void Controller::take_submits(std::vector<std::pair<store::JobRecord, core::JobSpec>>& jobs) {
  if (jobs.empty()) return;
  for (const auto& o : options_.observers) o->queued(jobs);
  const Time now = options_.clock();
  WriteBatch batch;
  for (auto& [rec, spec] : jobs) {
    Active a;
    a.rec = std::move(rec);
    a.spec = std::move(spec);
    const JobId id = a.rec.id;
    auto st = sched_.submit(a.spec, std::max(now, sched_.now()));
    auto& placed = active_[id];
    placed = std::move(a);
    if (!st.ok()) {
      finish(placed, JobStatus::Failed, "rejected by the scheduler: " + st.error().message(), now,
             std::nullopt, batch);
    }
  }
  jobs.clear();
  write(std::move(batch));
  dirty_ = true;
}

core::Result<store::JobRecord> Controller::cancel(JobId id, const std::string& reason) {
  return call<core::Result<store::JobRecord>>([&]() -> core::Result<store::JobRecord> {
    auto it = active_.find(id);
    if (it == active_.end()) {
      auto rec = store_.job(id);
      if (!rec) return Error{"id", "no such job"};
      return Error{"state", "the job already ended (" + rec->state + ")"};
    }
    WriteBatch batch;
    store::JobRecord out;
    auto& a = it->second;
    const Time now = options_.clock();
    // Its processes get SIGTERM and the grace period like any stop; meanwhile its GPUs are not
    // handed to another job.
    if (holds_gpus(parse_job_status(a.rec.state).value_or(JobStatus::Pending))) vacate(a, now);
    finish(a, JobStatus::Cancelled, reason, now, std::nullopt, batch);
    out = std::get<op::UpdateJob>(batch.back()).job;
    write(std::move(batch));
    dirty_ = true;
    return out;
  });
}

void Controller::lose(Active& a, const std::string& reason, Time now, WriteBatch& batch) {
  const JobId id = a.rec.id;
  auto st = parse_job_status(a.rec.state).value_or(JobStatus::Pending);
  if (st == JobStatus::Preempting) {
    confirm_stop(a, reason, now, batch);
    return;
  }
  // Starting or running: the core still counts it as running on its GPUs.
  transition(a, JobStatus::Preempting, reason, now, batch);
  close_segment(a, now, batch);
  a.rec.seg_start = 0;
  a.sim_end = core::kNever;
  sched_.job_finished(id, now);
  if (a.spec.resumable) {
    transition(a, JobStatus::Requeued, reason, now, batch);
    batch.push_back(op::UpdateJob{a.rec});
    if (auto s = sched_.submit(a.spec, now); !s.ok()) {
      finish(a, JobStatus::Failed, "cannot be requeued: " + s.error().message(), now, std::nullopt,
             batch);
    }
  } else {
    transition(a, JobStatus::Preempted, reason, now, batch);
    batch.push_back(op::UpdateJob{a.rec});
    active_.erase(id);
  }
}

void Controller::node_stopped(Active& a, const std::string& node, const std::string& reason,
                              Time now, WriteBatch& batch) {
  // A gang's GPUs are given back once every one of its nodes has stopped its part.
  a.stopped.insert(node);
  if (a.nodes) {
    for (const auto& n : *a.nodes) {
      if (!a.stopped.count(n)) return;
    }
  }
  confirm_stop(a, reason, now, batch);
}

// Keeps the GPUs of `a`'s current run from every other job until its agents report it gone
// (or a node timeout after the grace period): the run is ending outside the core (cancelled, or
// preempted across a restart) and its processes may still be spending their grace period.
void Controller::vacate(const Active& a, Time now) {
  if (!a.nodes || simulated(a)) return;
  Vacating v;
  v.run = a.rec.runs;
  v.until = now + options_.stop_grace_seconds + options_.node_timeout_seconds;
  for (std::size_t i = 0; i < a.nodes->size(); ++i) {
    const auto& node = (*a.nodes)[i];
    if (!a.stopped.count(node) && !a.exited_ok.count(node)) v.gpus[node] = a.per_node[i].first;
  }
  if (!v.gpus.empty()) vacating_[a.rec.id] = std::move(v);
}

ReportOutcome Controller::agent_report(const std::string& node, JobId id, int run,
                                       const std::string& event, std::optional<int> exit_code,
                                       std::optional<int> signal) {
  return call<ReportOutcome>([&]() -> ReportOutcome {
    if (auto v = vacating_.find(id);
        v != vacating_.end() && v->second.run == run && event != "started") {
      v->second.gpus.erase(node);  // gone from this node: its GPUs are free
      if (v->second.gpus.empty()) vacating_.erase(v);
      dirty_ = true;
    }
    // An agent hears only about jobs placed on its node: a job that does not exist and one
    // placed elsewhere get the same answer, and neither's state.
    const std::string elsewhere = "not a job on node " + node;
    auto here = [&](const std::string& placement) {
      const auto nodes = placement_nodes(placement);
      return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
    };
    auto it = active_.find(id);
    if (it == active_.end()) {
      auto rec = store_.job(id);
      if (!rec || !here(rec->placement_json)) return {"", elsewhere};
      if (run != rec->runs) return {"", "stale run"};
      return {rec->state, ""};  // the run already ended: a repeated report changes nothing
    }
    auto& a = it->second;
    if (!here(a.rec.placement_json)) return {"", elsewhere};
    if (run != a.rec.runs) return {"", "stale run"};
    auto st = parse_job_status(a.rec.state).value_or(JobStatus::Pending);
    if (!holds_gpus(st)) return {a.rec.state, ""};  // requeued: this run already ended
    if (!a.nodes || std::find(a.nodes->begin(), a.nodes->end(), node) == a.nodes->end()) {
      return {"", "not assigned to node " + node};
    }
    const Time now = options_.clock();
    const bool gang = a.nodes->size() > 1;
    const std::string where = " on " + node;
    WriteBatch batch;
    const int code = exit_code.value_or(0);
    const std::string how = signal ? "killed by signal " + std::to_string(*signal)
                                   : "exited with code " + std::to_string(code);
    if (event == "started") {
      if (st != JobStatus::Starting) return {a.rec.state, ""};  // repeated, or another node's
      // The contract runs from the processes' start, not from the placement.
      if (sched_.job_running(id, now).ok()) {
        if (const auto* j = sched_.job(id)) a.rec.protected_until = j->run.protected_until;
      }
      transition(a, JobStatus::Running, "started" + where, now, batch);
      batch.push_back(op::UpdateJob{a.rec});
      dirty_ = true;
    } else if (event == "exited") {
      if (st == JobStatus::Preempting) {
        if (a.stopped.count(node)) return {a.rec.state, ""};
        node_stopped(a, node, "stopped" + where + " (" + how + ")", now, batch);
      } else if (code != 0) {
        finish(a, JobStatus::Failed, gang ? how + where : how, now, code, batch);
      } else if (!a.exited_ok.count(node)) {
        a.exited_ok.insert(node);
        if (a.exited_ok.size() >= a.nodes->size()) {
          finish(a, JobStatus::Succeeded,
                 gang ? "every node exited with code 0" : "exited with code 0", now, 0, batch);
        } else {
          batch.push_back(op::AddEvent{{id, now, a.rec.state, a.rec.state,
                                        "exited with code 0" + where + " (" +
                                            std::to_string(a.exited_ok.size()) + " of " +
                                            std::to_string(a.nodes->size()) + " nodes)"}});
        }
      }
    } else if (event == "preempted") {
      if (st != JobStatus::Preempting) return {"", "no stop was asked for this job"};
      if (a.stopped.count(node)) return {a.rec.state, ""};
      node_stopped(a, node,
                   "stopped" + where + (exit_code || signal ? " (" + how + ")" : std::string()),
                   now, batch);
    } else if (event == "lost") {
      lose(a, "lost" + where + " (its agent no longer runs it)", now, batch);
    } else {
      return {"", "event must be started, exited, preempted or lost"};
    }
    // `a` may be gone now (ended); the state is the last one written.
    std::string state;
    for (auto& w : batch) {
      if (auto* u = std::get_if<op::UpdateJob>(&w); u && u->job.id == id) state = u->job.state;
    }
    if (state.empty()) {
      auto again = active_.find(id);
      state = again != active_.end() ? again->second.rec.state : std::string();
    }
    write(std::move(batch));
    dirty_ = true;
    return {state, ""};
  });
}

void Controller::record_health(const store::NodeRecord& n, Time now, WriteBatch& batch) {
  batch.push_back(op::AddNodeHealth{{n.name, now, n.health, n.cordoned, n.gpus, n.health_reason}});
}

core::Result<std::pair<store::NodeRecord, bool>> Controller::register_node(store::NodeRecord n) {
  using R = core::Result<std::pair<store::NodeRecord, bool>>;
  return call<R>([&]() -> R {
    const Time now = options_.clock();
    auto model = sched_.catalog().find(n.model);
    if (!model) return Error{"model", "unknown GPU model '" + n.model + "'"};
    n.model = sched_.catalog().model(*model).name;
    auto it = node_ids_.find(n.name);
    if (it != node_ids_.end()) {
      auto& cur = nodes_[it->second];
      if (cur.cluster != n.cluster || cur.model != n.model || cur.gpus != n.gpus ||
          cur.block != n.block) {
        return Error{"name", "node " + n.name + " is registered with another shape (cluster " +
                                 cur.cluster + ", " + std::to_string(cur.gpus) + " x " + cur.model +
                                 (cur.block.empty() ? "" : ", block " + cur.block) + ")"};
      }
      // Same node again (an agent restart): what the agent tells about it may have changed.
      cur.address = n.address;
      cur.devices_json = n.devices_json;
      cur.labels_json = n.labels_json;
      cur.agent_json = n.agent_json;
      cur.last_heartbeat = now;
      write({op::PutNode{cur}});
      return std::pair{cur, false};
    }
    core::NodeSpec spec;
    spec.name = n.name;
    spec.cluster = cluster_id(n.cluster);
    spec.model = *model;
    spec.gpus = n.gpus;
    spec.block = n.block;
    auto id = sched_.add_node(spec);
    if (!id.ok()) return id.error();
    n.registered_at = now;
    n.last_heartbeat = now;
    node_ids_[n.name] = id.value();
    nodes_.resize(id.value() + 1);
    nodes_[id.value()] = n;
    {
      std::lock_guard lk(contact_mu_);
      last_contact_[n.name] = now;
    }
    WriteBatch batch{op::PutNode{n}};
    record_health(n, now, batch);
    write(std::move(batch));
    dirty_ = true;
    publish();  // its cluster is known to submits at once
    return std::pair{n, true};
  });
}

core::Result<store::NodeRecord> Controller::set_node(const std::string& name,
                                                     const std::string& health,
                                                     const std::string& reason,
                                                     std::optional<bool> cordon) {
  return call<core::Result<store::NodeRecord>>([&]() -> core::Result<store::NodeRecord> {
    auto it = node_ids_.find(name);
    if (it == node_ids_.end()) return Error{"node", "no node named " + name};
    auto& n = nodes_[it->second];
    const Time now = options_.clock();
    const auto before = std::pair{n.health, n.cordoned};
    if (!health.empty()) {
      auto st = sched_.set_node_health(it->second, parse_health(health), reason, now);
      if (!st.ok()) return st.error();
      n.health = health;
      n.health_reason = reason;
      n.timed_out = false;  // set by someone, not by the server's timeout
      std::lock_guard lk(contact_mu_);
      timed_out_.erase(name);
    }
    if (cordon) {
      sched_.set_cordoned(it->second, *cordon);
      n.cordoned = *cordon;
    }
    WriteBatch batch{op::PutNode{n}};
    if (before != std::pair{n.health, n.cordoned}) record_health(n, now, batch);
    write(std::move(batch));
    dirty_ = true;
    return n;
  });
}

bool Controller::contact(const std::string& name) {
  bool back = false;
  {
    std::lock_guard lk(contact_mu_);
    auto it = last_contact_.find(name);
    if (it == last_contact_.end()) return false;
    it->second = std::max(it->second, options_.clock());
    back = timed_out_.count(name) > 0;
  }
  if (back) {
    call<int>([&] {
      revive(name);
      return 0;
    });
  }
  return true;
}

void Controller::revive(const std::string& name) {
  auto it = node_ids_.find(name);
  if (it == node_ids_.end()) return;
  auto& n = nodes_[it->second];
  {
    std::lock_guard lk(contact_mu_);
    timed_out_.erase(name);
  }
  if (!n.timed_out || n.health != "down") return;
  const Time now = options_.clock();
  n.health = "healthy";
  n.health_reason = "its agent is back";
  n.timed_out = false;
  sched_.set_node_health(it->second, core::NodeHealth::Healthy, n.health_reason, now);
  WriteBatch batch{op::PutNode{n}};
  record_health(n, now, batch);
  write(std::move(batch));
  dirty_ = true;
}

void Controller::check_timeouts(Time now, WriteBatch& batch) {
  std::vector<std::pair<core::NodeId, Time>> silent;
  {
    std::lock_guard lk(contact_mu_);
    for (const auto& [name, id] : node_ids_) {
      const auto& n = nodes_[id];
      if (n.simulated || n.health == "down") continue;
      auto it = last_contact_.find(name);
      if (it == last_contact_.end()) {
        last_contact_[name] = now;
        continue;
      }
      if (now - it->second >= options_.node_timeout_seconds)
        silent.emplace_back(id, now - it->second);
    }
  }
  for (const auto& [id, quiet] : silent) {
    auto& n = nodes_[id];
    n.health = "down";
    n.health_reason = "no heartbeat for " + std::to_string(quiet) + " s";
    n.timed_out = true;
    sched_.set_node_health(id, core::NodeHealth::Down, n.health_reason, now);
    batch.push_back(op::PutNode{n});
    record_health(n, now, batch);
    {
      std::lock_guard lk(contact_mu_);
      timed_out_.insert(n.name);
    }
    // Nothing runs on a node that is down.
    for (auto v = vacating_.begin(); v != vacating_.end();) {
      v->second.gpus.erase(n.name);
      v = v->second.gpus.empty() ? vacating_.erase(v) : std::next(v);
    }
    // Stops already asked of this node will never be confirmed by it.
    std::vector<JobId> waiting;
    for (auto& [jid, a] : active_) {
      if (a.rec.state == "preempting" && a.nodes &&
          std::find(a.nodes->begin(), a.nodes->end(), n.name) != a.nodes->end()) {
        waiting.push_back(jid);
      }
    }
    for (JobId jid : waiting) {
      auto it = active_.find(jid);
      if (it != active_.end()) node_stopped(it->second, n.name, n.health_reason, now, batch);
    }
  }
}

void Controller::set_node_telemetry(const std::string& name, std::string gpus_json) {
  std::lock_guard lk(contact_mu_);
  node_gpus_[name] = std::move(gpus_json);
}

std::string Controller::node_telemetry(const std::string& name) const {
  std::lock_guard lk(contact_mu_);
  auto it = node_gpus_.find(name);
  return it == node_gpus_.end() ? std::string() : it->second;
}

Status Controller::heartbeat(const std::string& name) {
  return call<Status>([&]() -> Status {
    if (!node_ids_.count(name)) return Error{"node", "no node named " + name};
    const Time now = options_.clock();
    nodes_[node_ids_[name]].last_heartbeat = now;
    write({op::TouchNode{name, now}});
    return core::ok_status();
  });
}

namespace {
std::string joined(const std::vector<std::string>& v) {
  std::string m;
  for (const auto& x : v) m += (m.empty() ? "" : ",") + x;
  return m;
}
}  // namespace

core::Result<store::BudgetRecord> Controller::set_budget(
    const std::string& path, std::optional<double> share,
    std::optional<std::vector<std::string>> members, const std::string& actor,
    std::optional<std::vector<std::string>> owners, std::int64_t actor_token) {
  return call<core::Result<store::BudgetRecord>>([&]() -> core::Result<store::BudgetRecord> {
    const Time now = options_.clock();
    auto& tree = sched_.budgets();
    WriteBatch batch;
    auto existing = tree.find(path);
    if (!existing) {
      // Create the missing nodes along the path, each recorded.
      std::string cur;
      std::size_t start = 1;
      while (start <= path.size()) {
        auto slash = path.find('/', start);
        if (slash == std::string::npos) slash = path.size();
        cur = path.substr(0, slash);
        if (!tree.find(cur)) {
          const bool leaf = slash == path.size();
          auto parent =
              tree.find(cur.substr(0, cur.rfind('/')).empty() ? std::string("/")
                                                              : cur.substr(0, cur.rfind('/')));
          auto id =
              tree.add(*parent, cur.substr(cur.rfind('/') + 1), leaf ? share.value_or(1.0) : 1.0);
          if (!id.ok()) return id.error();
          store::BudgetRecord r{cur, leaf ? share.value_or(1.0) : 1.0, {}, false, {}};
          if (leaf && members) r.members = *members;
          if (leaf && owners) r.owners = *owners;
          budgets_[cur] = r;
          batch.push_back(op::PutBudget{r});
          batch.push_back(op::AddAudit{
              {0, now, actor, cur, "created", "", "share " + json(r.share).dump(), actor_token}});
        }
        start = slash + 1;
      }
      if (members && !members->empty()) {
        batch.push_back(
            op::AddAudit{{0, now, actor, path, "members", "", joined(*members), actor_token}});
      }
      if (owners && !owners->empty()) {
        batch.push_back(
            op::AddAudit{{0, now, actor, path, "owners", "", joined(*owners), actor_token}});
      }
    } else {
      auto& r = budgets_[path];
      r.path = path;
      r.removed = false;
      if (share) {
        auto st = tree.set_share(*existing, *share);
        if (!st.ok()) return st.error();
        batch.push_back(op::AddAudit{{0, now, actor, path, "share", json(r.share).dump(),
                                      json(*share).dump(), actor_token}});
        r.share = *share;
      }
      if (members) {
        batch.push_back(op::AddAudit{
            {0, now, actor, path, "members", joined(r.members), joined(*members), actor_token}});
        r.members = *members;
      }
      if (owners) {
        batch.push_back(op::AddAudit{
            {0, now, actor, path, "owners", joined(r.owners), joined(*owners), actor_token}});
        r.owners = *owners;
      }
      batch.push_back(op::PutBudget{r});
    }
    write(std::move(batch));
    dirty_ = true;
    publish();
    return budgets_[path];
  });
}

core::Result<std::vector<std::string>> Controller::remove_budget(const std::string& path,
                                                                 const std::string& actor,
                                                                 std::int64_t actor_token) {
  using R = core::Result<std::vector<std::string>>;
  return call<R>([&]() -> R {
    auto& tree = sched_.budgets();
    auto id = tree.find(path);
    if (!id || *id == tree.root()) return Error{"path", "no budget " + path};
    std::size_t busy = 0;
    for (const auto& [jid, a] : active_) {
      if (a.rec.budget == path ||
          (a.rec.budget.size() > path.size() && a.rec.budget.compare(0, path.size(), path) == 0 &&
           a.rec.budget[path.size()] == '/')) {
        ++busy;
      }
    }
    if (busy > 0) {
      return Error{"path", std::to_string(busy) + " job" + (busy == 1 ? " is" : "s are") +
                               " queued or running in " + path +
                               ": cancel them or wait for them to end"};
    }
    // Deepest first: the tree removes leaves only.
    std::vector<core::BudgetId> order;
    std::vector<core::BudgetId> stack{*id};
    while (!stack.empty()) {
      auto b = stack.back();
      stack.pop_back();
      order.push_back(b);
      for (auto c : tree.node(b).children) {
        if (tree.valid(c)) stack.push_back(c);
      }
    }
    const Time now = options_.clock();
    WriteBatch batch;
    std::vector<std::string> removed;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const std::string p = tree.node(*it).path;
      if (auto st = tree.remove(*it); !st.ok()) return st.error();
      auto& r = budgets_[p];
      r.path = p;
      r.removed = true;
      batch.push_back(op::PutBudget{r});
      batch.push_back(op::AddAudit{
          {0, now, actor, p, "removed", "share " + json(r.share).dump(), "", actor_token}});
      removed.push_back(p);
    }
    write(std::move(batch));
    dirty_ = true;
    publish();
    return removed;
  });
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
  auto res = sched_.cycle(now, copts);
  ++cycles_;
  for (const auto& s : res.stops) {
    auto it = active_.find(s.job);
    if (it == active_.end()) continue;
    auto& a = it->second;
    std::string reason = sched_.describe(s);
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
    a.rec.placement_json = placement_json(s.placement, nodes_);
    a.rec.allocated = s.allocated;
    a.rec.protected_until = s.protected_until;
    a.rec.run_start = now;
    a.rec.seg_start = now;
    a.rec.milli = 0;
    for (const auto& g : s.placement) a.rec.milli += g.milli;
    a.rec.runs += 1;
    set_placement(a);
    std::string reason = std::string(s.allocated ? "allocated" : "unallocated") +
                         unallocated_because(a.spec, s) + ", " +
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
    why_ = std::move(why);
    explained_at_ = now;
  }
  write(std::move(batch));
  dirty_ = false;
  publish();
}

void Controller::publish() {
  auto s = std::make_shared<Snapshot>();
  s->now = sched_.now();
  s->cycles = cycles_;
  s->why = why_;
  s->explained_at = explained_at_;
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
    for (const auto& o : b.owners) s->owned_by[o].push_back(path);
  }
  for (const auto& c : sched_.clusters()) {
    s->clusters.push_back({c.name, sched_.capacity(c.id), 0});
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
    if (!holding_.count(id)) ++s->waiting_by_owner[a.rec.owner];
  }
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
        if (!a.stopped.count(node)) s->assignments[node].stop.push_back({id, a.rec.runs});
        continue;
      }
      if (a.exited_ok.count(node)) continue;  // its part of the gang is done
      AssignedRun ar;
      ar.job = id;
      ar.run = a.rec.runs;
      ar.state = a.rec.state;
      ar.gpus = a.per_node[r].first;
      ar.milli = a.per_node[r].second;
      ar.spec = a.spec_json;
      ar.owner = a.rec.owner;
      ar.budget = a.rec.budget;
      ar.name = a.rec.name;
      ar.rank = static_cast<int>(r);
      ar.nodes = a.nodes;
      ar.rendezvous = rendezvous;
      s->assignments[node].run.push_back(std::move(ar));
    }
  }
  std::lock_guard lk(snap_mu_);
  snap_ = std::move(s);
}

}  // namespace allot::server
