// The gate before the core, as Slurm's controller keeps held and dependent jobs out of its
// scheduler: a waiting job that is held (allot hold), waits for other jobs to end (submit
// --after / --after-any) or is an array task over its array's limit (--array 0-99%N) stays in
// the controller's mirror but not in the core's queue. Each cycle hands the core those that became
// eligible (in id order, so an array's tasks start in index order) and fails those whose
// dependency failed, so that none waits forever.
#include <algorithm>
#include <set>

#include "server/controller.h"
#include "server/controller_internal.h"

namespace allot::server {

bool Controller::needs_gate(const store::JobRecord& rec) {
  return !rec.held_by.empty() || !rec.after.empty() || !rec.after_any.empty() ||
         rec.array_limit > 0;
}

void Controller::gate(Time now, WriteBatch& batch, bool decide) {
  gate_why_.clear();
  if (gated_.empty()) {
    ended_deps_.clear();
    return;
  }
  if (decide) {  // only the ended jobs some gated job still waits for are remembered
    std::set<JobId> wanted;
    for (JobId id : gated_) {
      const auto& r = active_.at(id).rec;
      wanted.insert(r.after.begin(), r.after.end());
      wanted.insert(r.after_any.begin(), r.after_any.end());
    }
    std::erase_if(ended_deps_, [&](const auto& e) { return !wanted.count(e.first); });
  }
  // The state of a dependency: from the mirror while it is live, else (ended) from the store once.
  auto state_of = [&](JobId dep) -> std::string {
    if (auto it = active_.find(dep); it != active_.end()) {
      return it->second.rec.held_by.empty() ? it->second.rec.state
                                            : it->second.rec.state + ", held";
    }
    if (auto it = ended_deps_.find(dep); it != ended_deps_.end()) return it->second;
    auto rec = store_.job(dep);
    if (!rec) return "unknown";
    if (!is_terminal(parse_job_status(rec->state).value_or(JobStatus::Pending))) return rec->state;
    ended_deps_[dep] = rec->state;
    return rec->state;
  };
  // Tasks of each limited array that the core has (queued or running).
  std::map<JobId, int> in_core;
  bool limited = false;
  for (JobId id : gated_) limited = limited || active_.at(id).rec.array_limit > 0;
  if (limited) {
    for (const auto& [id, a] : active_) {
      if (a.rec.array_job != 0 && !gated_.count(id)) ++in_core[a.rec.array_job];
    }
  }
  std::vector<JobId> eligible;
  std::vector<std::pair<JobId, std::string>> failed;
  for (JobId id : gated_) {
    auto& a = active_.at(id);
    WhyInfo w;
    if (!a.rec.held_by.empty()) {
      w.code = "held";
      w.text = "held (by " + a.rec.held_by + "): 'allot release " + std::to_string(id) +
               "' lets it be scheduled";
      gate_why_.emplace(id, std::move(w));
      continue;
    }
    std::string waiting, failure;
    for (JobId dep : a.rec.after) {
      const auto st = state_of(dep);
      if (st == "succeeded") continue;
      const auto parsed = parse_job_status(st.substr(0, st.find(',')));
      if (!parsed || is_terminal(*parsed)) {
        failure = "dependency " + std::to_string(dep) + " failed (" + st + ")";
        break;
      }
      if (waiting.empty()) waiting = "waiting for job " + std::to_string(dep) + " (" + st + ")";
    }
    for (JobId dep : a.rec.after_any) {
      if (!failure.empty()) break;
      const auto st = state_of(dep);
      const auto parsed = parse_job_status(st.substr(0, st.find(',')));
      if (!parsed) {
        failure = "dependency " + std::to_string(dep) + " no longer exists";
        break;
      }
      if (!is_terminal(*parsed) && waiting.empty()) {
        waiting = "waiting for job " + std::to_string(dep) + " to end (" + st + ")";
      }
    }
    if (!failure.empty() && decide) {
      failed.emplace_back(id, failure);
      continue;
    }
    if (!failure.empty()) {
      w.code = "dependency";
      w.text = failure + ": it fails at the next cycle";
      gate_why_.emplace(id, std::move(w));
      continue;
    }
    if (!waiting.empty()) {
      w.code = "dependency";
      w.text = waiting;
      gate_why_.emplace(id, std::move(w));
      continue;
    }
    if (a.rec.array_limit > 0 && in_core[a.rec.array_job] >= a.rec.array_limit) {
      w.code = "array-limit";
      w.text = "array " + std::to_string(a.rec.array_job) + " already has " +
               std::to_string(a.rec.array_limit) + " tasks queued or running (its %" +
               std::to_string(a.rec.array_limit) + " limit)";
      gate_why_.emplace(id, std::move(w));
      continue;
    }
    if (a.rec.array_limit > 0) ++in_core[a.rec.array_job];
    if (!decide) {
      w.code = "dependency";
      w.text = "its dependencies are met: the next cycle considers it";
      gate_why_.emplace(id, std::move(w));
      continue;
    }
    eligible.push_back(id);
  }
  for (const auto& [id, why] : failed) {
    gated_.erase(id);
    finish(active_.at(id), JobStatus::Failed, why, now, std::nullopt, batch);
    ended_deps_[id] = "failed";
    dirty_ = true;
  }
  for (JobId id : eligible) {
    gated_.erase(id);
    dirty_ = true;
    auto& a = active_.at(id);
    if (auto st = sched_.submit(a.spec, std::max(now, sched_.now())); !st.ok()) {
      finish(a, JobStatus::Failed, "rejected by the scheduler: " + st.error().message(), now,
             std::nullopt, batch);
    }
  }
}

core::Result<store::JobRecord> Controller::hold(JobId id, const std::string& by) {
  return call<core::Result<store::JobRecord>>([&]() -> core::Result<store::JobRecord> {
    auto it = active_.find(id);
    if (it == active_.end()) {
      auto rec = store_.job(id);
      if (!rec) return Error{"id", "no such job"};
      return Error{"state", "job " + std::to_string(id) + " already ended (" + rec->state +
                                "): only a waiting job can be held"};
    }
    auto& a = it->second;
    const auto st = parse_job_status(a.rec.state).value_or(JobStatus::Pending);
    if (!is_queued(st)) {
      return Error{"state", "job " + std::to_string(id) + " is " + a.rec.state +
                                ": only a waiting job can be held ('allot cancel' stops it)"};
    }
    if (!a.rec.held_by.empty()) return a.rec;
    const Time now = options_.clock();
    if (!gated_.count(id)) sched_.job_finished(id, std::max(now, sched_.now()));
    gated_.insert(id);
    a.rec.held_by = by;
    a.rec.updated_at = now;
    WriteBatch batch;
    batch.push_back(op::AddEvent{{id, now, a.rec.state, a.rec.state, "held by " + by}});
    batch.push_back(op::UpdateJob{a.rec});
    write(std::move(batch));
    dirty_ = true;
    return a.rec;
  });
}

core::Result<store::JobRecord> Controller::release(JobId id, const std::string& by) {
  return call<core::Result<store::JobRecord>>([&]() -> core::Result<store::JobRecord> {
    auto it = active_.find(id);
    if (it == active_.end() || it->second.rec.held_by.empty()) {
      if (it == active_.end() && !store_.job(id)) return Error{"id", "no such job"};
      return Error{"state", "job " + std::to_string(id) + " is not held"};
    }
    auto& a = it->second;
    const Time now = options_.clock();
    a.rec.held_by.clear();
    a.rec.updated_at = now;
    WriteBatch batch;
    batch.push_back(op::AddEvent{{id, now, a.rec.state, a.rec.state, "released by " + by}});
    batch.push_back(op::UpdateJob{a.rec});
    write(std::move(batch));
    dirty_ = true;  // the next cycle's gate hands it to the core if nothing else holds it back
    return a.rec;
  });
}

}  // namespace allot::server
