// Agents and nodes: registration, health (operators' and agents' verdicts, silence), contact,
// heartbeats, telemetry, and what an agent reports about its runs.
#include <algorithm>

#include "core/drain.h"
#include "server/controller.h"
#include "server/controller_internal.h"
#include "server/event_log.h"

namespace allot::server {

core::NodeHealth parse_health(const std::string& h) {
  if (h == "unhealthy") return core::NodeHealth::Unhealthy;
  if (h == "draining") return core::NodeHealth::Draining;
  if (h == "down") return core::NodeHealth::Down;
  return core::NodeHealth::Healthy;
}

std::vector<std::vector<core::MigInstance>> mig_layout(const std::string& devices_json, int gpus,
                                                       core::GpuCatalog& catalog) {
  std::vector<std::vector<core::MigInstance>> out;
  const auto devices = json::parse(devices_json, nullptr, false);
  if (!devices.is_array() || gpus <= 0) return out;
  for (const auto& d : devices) {
    const auto mig = d.find("mig");
    const int index = d.value("index", -1);
    if (mig == d.end() || !mig->is_array() || mig->empty() || index < 0 || index >= gpus) continue;
    out.resize(static_cast<std::size_t>(gpus));
    for (const auto& m : *mig) {
      const core::Milli milli = m.value("milli", 0);
      out[static_cast<std::size_t>(index)].push_back(
          {catalog.intern_mig_profile(m.value("profile", ""), milli), milli});
    }
  }
  return out;
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
      // Another node of the gang may have made the job running already.
      if (a.unstarted.erase(node) > 0) dirty_ = true;           // its assignment says running now
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
      // Same node again (an agent restart): what the agent tells about it may have changed, its
      // GPUs' MIG instances too (split again while it was away).
      auto layout = mig_layout(n.devices_json, n.gpus, sched_.catalog());
      if (layout != sched_.nodes().at(it->second).spec.mig) {
        if (auto st = sched_.set_node_mig(it->second, std::move(layout)); !st.ok()) {
          return st.error();
        }
        dirty_ = true;
      }
      // A re-partition ordered before this registration is settled by it: the agent made it
      // (the layout above matched it) or could not (the GPU takes work as it is).
      if (sched_.mig_reconfiguring(it->second) || mig_orders_.count(n.name) > 0) {
        sched_.cancel_mig_plans(it->second);
        mig_orders_.erase(n.name);
        dirty_ = true;
      }
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
    spec.mig = mig_layout(n.devices_json, n.gpus, sched_.catalog());
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
    tell_jobs_on_node(n, before.first, now, batch);
    write(std::move(batch));
    dirty_ = true;
    return n;
  });
}

// The owners of the jobs on a node hear of its drain in each job's events: that it drains, why,
// and when this job will be stopped (docs/policy.md §9: once its minimum runtime, or its
// protected period if longer, has run); and that the drain is over when the node is back.
void Controller::tell_jobs_on_node(const store::NodeRecord& n, const std::string& was, Time now,
                                   WriteBatch& batch) {
  auto drains = [](const std::string& h) { return h == "draining" || h == "unhealthy"; };
  if (drains(was) == drains(n.health) || n.health == "down") return;
  const std::string why = n.health_reason.empty() ? "" : " (" + n.health_reason + ")";
  for (auto& [id, a] : active_) {
    if (!a.nodes || std::find(a.nodes->begin(), a.nodes->end(), n.name) == a.nodes->end()) continue;
    const auto st = parse_job_status(a.rec.state).value_or(JobStatus::Pending);
    if (st != JobStatus::Starting && st != JobStatus::Running) continue;
    std::string reason;
    if (!drains(n.health)) {
      reason = "node " + n.name + " is " + n.health + " again: the drain is over" + why;
    } else {
      const auto* j = sched_.job(id);
      const Time protected_until = j && j->run.allocated ? j->run.protected_until : 0;
      const Time deadline = j ? core::drain_deadline(j->run.started, j->spec.min_runtime,
                                                     j->run.allocated, j->run.protected_until)
                              : now;
      reason = "node " + n.name + " is " + n.health + why + ": this job will be stopped ";
      if (deadline <= now) {
        reason += "now (it is not protected)";
      } else {
        reason += "at " + rfc3339(deadline) +
                  (protected_until >= deadline ? " (its protection ends then)"
                                               : " (it has run its minimum runtime then)");
      }
    }
    batch.push_back(op::AddEvent{{id, now, a.rec.state, a.rec.state, reason}});
  }
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
      auto& n = nodes_[id];
      if (n.simulated || n.health == "down") continue;
      auto it = last_contact_.find(name);
      if (it == last_contact_.end()) {
        last_contact_[name] = now;
        continue;
      }
      if (it->second > n.last_heartbeat) {  // heard from since the last write (heartbeat())
        n.last_heartbeat = it->second;
        batch.push_back(op::TouchNode{name, it->second});
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

// A heartbeat is contact like any agent call (contact(), in memory): it waits for no store write.
// The loop persists each node's latest contact as its last_heartbeat, the nodes heard from since
// the last cycle in that cycle's one batch (check_timeouts), instead of one durable write per
// heartbeat (2,048 agents send 410 a second: docs/benchmarks.md, "A fleet of 2,048 agents").
// After a server restart a node's last_heartbeat counts from the restart, as its timeout does
// (controller_restore.cpp gives every node a fresh contact then).
Status Controller::heartbeat(const std::string& name) {
  std::lock_guard lk(contact_mu_);
  if (!last_contact_.count(name)) return Error{"node", "no node named " + name};
  return core::ok_status();
}

void Controller::order_repartition(const core::MigRepartition& r, Time now,
                                   store::WriteBatch& batch) {
  if (r.node >= nodes_.size()) return;
  const std::string& name = nodes_[r.node].name;
  std::vector<std::string> profiles;
  std::string list;
  for (const auto& m : r.instances) {
    profiles.push_back(sched_.catalog().mig_profile(m.profile).name);
    list += (list.empty() ? "" : ", ") + profiles.back();
  }
  const std::string what = "GPU " + std::to_string(r.gpu) + " of node " + name +
                           (profiles.empty() ? " made whole for waiting whole-GPU work"
                                             : " being split into MIG instances " + list);
  std::fprintf(stderr, "allot: %s\n", what.c_str());
  if (auto a = active_.find(r.for_job); a != active_.end()) {
    batch.push_back(op::AddEvent{
        {r.for_job, now, a->second.rec.state, a->second.rec.state, what + " for this job"}});
  }
  if (nodes_[r.node].simulated) {  // no agent: the layout is made at once
    (void)sched_.set_gpu_mig(r.node, r.gpu, r.instances);
    return;
  }
  mig_orders_[name][r.gpu] = std::move(profiles);
}

}  // namespace allot::server
