// Jobs through their lifecycle on the loop thread: submissions taken into the core, cancels, and
// the state changes (transitions, ledger segments, stops and losses) every event makes.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "server/controller.h"
#include "server/controller_internal.h"
#include "server/job_spec.h"

namespace allot::server {

std::string placement_json(const core::Placement& p, const std::vector<store::NodeRecord>& nodes,
                           const core::GpuCatalog& catalog) {
  json a = json::array();
  for (const auto& s : p) {
    json slot = {{"node", nodes.at(s.node).name}, {"gpu", s.gpu}, {"milli", s.milli}};
    if (s.mig != 0) slot["mig"] = catalog.mig_profile(s.mig).name;
    a.push_back(std::move(slot));
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

void Controller::set_placement(Active& a) {
  // The spec as the agent gets it, parsed once per job when it first holds GPUs.
  if (!a.spec_json) {
    auto spec = json::parse(a.rec.spec_json, nullptr, false);
    if (a.rec.array_job != 0 && spec.is_object()) {
      // An array task learns its place: the server's own variables (ALLOT_* are refused in a
      // request's env), like Slurm's SLURM_ARRAY_TASK_ID and SLURM_ARRAY_JOB_ID.
      spec["env"]["ALLOT_ARRAY_INDEX"] = std::to_string(a.rec.array_index);
      spec["env"]["ALLOT_ARRAY_JOB_ID"] = std::to_string(a.rec.array_job);
    }
    a.spec_json = std::make_shared<const json>(std::move(spec));
  }
  auto nodes = std::make_shared<std::vector<std::string>>();
  a.per_node.clear();
  a.mig_per_node.clear();
  a.exited_ok.clear();
  a.stopped.clear();
  a.unstarted.clear();
  auto slots = json::parse(a.rec.placement_json, nullptr, false);
  if (slots.is_array()) {
    for (const auto& g : slots) {
      auto node = g.value("node", "");
      auto pos = std::find(nodes->begin(), nodes->end(), node);
      std::size_t i = static_cast<std::size_t>(pos - nodes->begin());
      if (pos == nodes->end()) {
        nodes->push_back(node);
        a.per_node.emplace_back();
        a.mig_per_node.emplace_back();
      }
      a.per_node[i].first.push_back(g.value("gpu", 0));
      a.per_node[i].second = g.value("milli", core::kWholeGpu);
      a.mig_per_node[i] = g.value("mig", "");
    }
  }
  // No node of a gang has said its part started (after a restart too: that is not stored). Each
  // is told "starting" until it does, even once another made the job running.
  if (nodes->size() > 1) a.unstarted.insert(nodes->begin(), nodes->end());
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
  // A job that waits for this one learns how it ended without reading the store (this batch is
  // not written yet).
  if (!gated_.empty()) ended_deps_[a.rec.id] = a.rec.state;
  sched_.job_finished(a.rec.id, now);  // not in the core while gated: refused, harmlessly
  holding_.erase(a.rec.id);
  gated_.erase(a.rec.id);
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

std::uint64_t Controller::submitted(store::JobRecord rec, core::JobSpec spec) {
  // Queued apart from other events (no closure to allocate), taken in order by the loop.
  bool wake = false;
  std::uint64_t seq = 0;
  {
    std::lock_guard lk(mu_);
    wake = wake_on_submit_ && queue_.empty() && submits_.empty();
    submits_.emplace_back(std::move(rec), std::move(spec));
    seq = ++handed_;
  }
  if (wake) cv_.notify_one();
  return seq;
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
    if (needs_gate(a.rec)) {  // held, dependent or a limited array's task: the gate decides
      gated_.insert(id);
      active_[id] = std::move(a);
      continue;
    }
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

}  // namespace allot::server
