// Restoring the controller from the store on start: budgets, nodes, lookback usage from the
// ledger, running jobs on their nodes, then the queue.
#include <algorithm>

#include "server/controller.h"
#include "server/controller_internal.h"
#include "server/job_spec.h"

namespace allot::server {

void Controller::rebuild() {
  const Time now = options_.clock();
  WriteBatch batch;
  for (const auto& b : store_.budgets()) {
    budgets_[b.path] = b;
    if (b.removed || b.path == "/") continue;
    auto id = sched_.budgets().ensure_path(b.path, b.share);
    if (id.ok()) sched_.budgets().set_share(id.value(), b.share);
  }
  for (const auto& u : store_.user_limits()) user_limits_[u.user] = u.limits;
  for (const auto& n : store_.nodes()) {
    core::NodeSpec spec;
    spec.name = n.name;
    spec.cluster = cluster_id(n.cluster);
    spec.model = sched_.catalog().intern(n.model);
    spec.gpus = n.gpus;
    spec.block = n.block;
    spec.mig = mig_layout(n.devices_json, n.gpus, sched_.catalog());
    auto id = sched_.add_node(spec);
    if (!id.ok() && !spec.mig.empty()) {  // instances the core refuses: count its GPUs whole
      spec.mig.clear();
      id = sched_.add_node(spec);
    }
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
        const auto mig = sched_.catalog().find_mig_profile(slot.value("mig", ""));
        placement.push_back(core::GpuSlot{node->second, slot.value<std::uint16_t>("gpu", 0),
                                          slot.value<core::Milli>("milli", core::kWholeGpu),
                                          mig.value_or(0)});
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
    JobId id = a.rec.id;
    if (needs_gate(a.rec)) {  // held or dependent: the first cycle's gate decides
      gated_.insert(id);
      active_[id] = std::move(a);
      continue;
    }
    auto st = sched_.submit(a.spec, now);
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

}  // namespace allot::server
