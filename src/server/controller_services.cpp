// Inference services on the scheduling loop (server/service.h, docs/policy.md §15): creating,
// scaling and deleting them, and the reconciler that keeps each one's replicas as wanted.

#include <algorithm>
#include <array>
#include <cstdio>

#include "server/controller.h"
#include "server/controller_internal.h"

namespace allot::server {

namespace {

// How long after a replica that ended within a minute of its start the next one is submitted:
// 5 s, doubling with each such end in a row, at most 5 minutes (a crash loop must not flood the
// queue or the store).
core::Duration replace_delay(int quick_ends) {
  core::Duration d = 5;
  for (int i = 1; i < quick_ends && d < 300; ++i) d *= 2;
  return std::min<core::Duration>(d, 300);
}

// Keeps a decision that is not the autoscaler's (a person's): its cool-down does not start again.
void note_decision(ScaleDecision d, ServiceState& state, store::ServiceRecord& rec,
                   const ServiceLimits& limits) {
  const Time last = state.last_scale;
  rec.updated = d.at;
  record_decision(state, std::move(d), limits);
  state.last_scale = last;
  rec.state_json = state_to_json(state).dump();
}

}  // namespace

void Controller::cancel_in_loop(Active& a, const std::string& reason, Time now, WriteBatch& batch) {
  // Its processes get SIGTERM and the grace period like any stop; meanwhile its GPUs are not
  // handed to another job.
  if (holds_gpus(parse_job_status(a.rec.state).value_or(JobStatus::Pending))) vacate(a, now);
  finish(a, JobStatus::Cancelled, reason, now, std::nullopt, batch);
}

void Controller::submit_replica(ServiceRt& s, bool protected_tier, Time now, WriteBatch& batch) {
  const json spec_json = replica_job(s.spec, protected_tier);
  auto spec =
      spec_from_canonical(spec_json.dump(), sched_.catalog(), cluster_ids_, sched_.budgets());
  const std::string tier = protected_tier ? "protected" : "elastic";
  if (!spec.ok()) {
    // Its budget was removed, say: nothing can run until the service is changed; said once.
    ScaleDecision d{now,
                    s.state.desired,
                    s.state.desired,
                    "cannot submit a replica: " + spec.error().message(),
                    std::nullopt,
                    std::nullopt};
    if (s.state.decisions.empty() || s.state.decisions.back().reason != d.reason) {
      note_decision(std::move(d), s.state, s.rec, service_limits_);
      batch.push_back(op::PutService{s.rec});
    }
    return;
  }
  Active a;
  a.rec.id = next_job_id();
  a.rec.owner = s.rec.owner;
  a.rec.idempotency_key = "service " + s.spec.name + " replica " + std::to_string(a.rec.id);
  a.rec.name = s.spec.name;
  a.rec.budget = s.spec.budget;
  a.rec.spec_json = spec_json.dump();
  a.rec.state = "pending";
  a.rec.reason = "submitted by service " + s.spec.name + " (" + tier + " replica" +
                 (protected_tier ? ", contract " + core::format_duration(s.spec.contract) : "") +
                 ")";
  a.rec.submit_time = now;
  a.rec.updated_at = now;
  a.spec = std::move(spec.value());
  a.spec.id = a.rec.id;
  a.spec.owner = a.rec.owner;
  a.spec.submit_time = now;
  batch.push_back(op::InsertJob{a.rec});
  const JobId id = a.rec.id;
  auto st = sched_.submit(a.spec, std::max(now, sched_.now()));
  auto& placed = active_[id];
  placed = std::move(a);
  s.replicas[id] = protected_tier;
  if (!st.ok()) {
    finish(placed, JobStatus::Failed, "rejected by the scheduler: " + st.error().message(), now,
           std::nullopt, batch);
    s.replicas.erase(id);
  }
}

bool Controller::serving(const Active& a) {
  if (a.rec.state != "running") return false;
  if (!a.spec_json || !has_ready_check(*a.spec_json)) return true;
  return a.ready_run == a.rec.runs && a.ready;
}

ReportOutcome Controller::agent_readiness(const std::string& node, JobId id, int run, bool ready,
                                          const std::string& reason) {
  return call<ReportOutcome>([&]() -> ReportOutcome {
    const std::string elsewhere = "not a job on node " + node;
    auto it = active_.find(id);
    if (it == active_.end() || !it->second.nodes ||
        std::find(it->second.nodes->begin(), it->second.nodes->end(), node) ==
            it->second.nodes->end()) {
      return {"", elsewhere};
    }
    auto& a = it->second;
    if (run != a.rec.runs) return {"", "stale run"};
    if (!a.spec_json || !has_ready_check(*a.spec_json)) {
      return {"", "job " + std::to_string(id) + " has no readiness check"};
    }
    const Time now = options_.clock();
    if (a.ready_run != run) {
      a.ready_run = run;
      a.ever_ready = false;
      a.ready_reason.clear();  // the last run's
      a.ready = !ready;        // so that the value below counts as a change
    }
    if (a.ready != ready) {
      a.ready = ready;
      a.ready_since = now;
      dirty_ = true;  // the assignment carries what the server knows; services count it
    }
    if (ready) a.ever_ready = true;
    if (!ready) a.ready_reason = reason.substr(0, 256);
    return {a.rec.state, ""};
  });
}

std::optional<std::pair<double, int>> Controller::replica_memory(const Active& a, Time now) const {
  if (!a.nodes) return std::nullopt;
  double sum = 0;
  int n = 0;
  for (std::size_t i = 0; i < a.nodes->size() && i < a.per_node.size(); ++i) {
    std::string text;
    {
      std::lock_guard lk(contact_mu_);
      auto it = node_gpus_.find((*a.nodes)[i]);
      if (it == node_gpus_.end()) continue;
      text = it->second;
    }
    auto t = json::parse(text, nullptr, false);
    if (!t.is_object() || now - t.value("time", Time{0}) > 30) continue;  // stale
    const auto gpus = t.find("gpus");
    if (gpus == t.end() || !gpus->is_array()) continue;
    for (int g : a.per_node[i].first) {
      for (const auto& s : *gpus) {
        if (s.value("index", -1) != g) continue;
        const auto used = s.value("mem_used_mib", std::int64_t{-1});
        const auto total = s.value("mem_total_mib", std::int64_t{0});
        if (used < 0 || total <= 0) continue;
        sum += std::min(1.0, static_cast<double>(used) / static_cast<double>(total));
        ++n;
      }
    }
  }
  if (n == 0) return std::nullopt;
  return std::make_pair(sum / n, n);
}

void Controller::reconcile_services(Time now, WriteBatch& batch, bool measure) {
  bool changed = false;
  for (auto& entry : services_) {
    const std::string& name = entry.first;  // not a structured binding: the lambdas use them
    ServiceRt& s = entry.second;
    // Replicas that ended since: replaced below, no sooner than a crash loop allows.
    for (auto it = s.replicas.begin(); it != s.replicas.end();) {
      if (active_.count(it->first)) {
        ++it;
        continue;
      }
      auto ended = store_.job(it->first);
      const bool quick = ended && ended->state == "failed" &&
                         (ended->run_start == 0 || ended->updated_at - ended->run_start < 60);
      s.quick_ends = quick ? s.quick_ends + 1 : 0;
      if (quick) s.replace_after = ended->updated_at + replace_delay(s.quick_ends);
      s.stale.erase(it->first);
      it = s.replicas.erase(it);
      changed = true;
    }
    // Per tier (0: elastic, 1: protected): replicas not being replaced, and those that are.
    std::array<int, 2> fresh{0, 0}, stale{0, 0};
    int running = 0, ready = 0, fresh_waiting = 0;
    double mem_sum = 0;
    int mem_n = 0;
    std::vector<JobId> never_ready;
    for (const auto& [id, prot] : s.replicas) {
      const auto& a = active_.at(id);
      const bool is_running = a.rec.state == "running";
      const bool is_serving = serving(a);
      (s.stale.count(id) ? stale : fresh)[prot] += 1;
      // A new replica is waited for until it serves (make before break waits for readiness).
      if (!s.stale.count(id) && !is_serving) ++fresh_waiting;
      if (!is_running) continue;
      ++running;
      if (!is_serving) {
        if (a.rec.run_start > 0 && now - a.rec.run_start >= s.spec.ready_timeout &&
            !(a.ready_run == a.rec.runs && a.ever_ready)) {
          never_ready.push_back(id);
        }
        continue;
      }
      ++ready;
      if (!measure) continue;
      if (auto m = replica_memory(a, now)) {
        mem_sum += m->first * m->second;
        mem_n += m->second;
      }
    }
    if (running != s.running || ready != s.serving) changed = true;
    s.running = running;
    s.serving = ready;
    // A replica that has run for ready_timeout without once being ready is restarted: cancelled
    // here and replaced below like any replica that ended.
    for (const JobId id : never_ready) {
      auto& a = active_.at(id);
      const std::string why = "replica " + std::to_string(id) + " not ready within " +
                              core::format_duration(s.spec.ready_timeout) + " of its placement" +
                              (a.ready_run == a.rec.runs && !a.ready_reason.empty()
                                   ? " (last check: " + a.ready_reason + ")"
                                   : std::string(" (no check reported)"));
      const bool prot = s.replicas.at(id);
      (s.stale.count(id) ? stale : fresh)[prot] -= 1;
      cancel_in_loop(a, "service " + name + ": " + why + "; restarted", now, batch);
      s.replicas.erase(id);
      s.stale.erase(id);
      --s.running;
      note_decision(
          {now, s.state.desired, s.state.desired, "restart: " + why, std::nullopt, std::nullopt},
          s.state, s.rec, service_limits_);
      batch.push_back(op::PutService{s.rec});
      changed = true;
    }
    if (measure) {
      s.memory = mem_n > 0 ? std::optional<double>(mem_sum / mem_n) : std::nullopt;
      ScaleSignals sig;
      sig.running = ready;
      sig.memory = s.memory;
      if (s.load && now - s.load_at <= s.spec.autoscale.load_max_age) sig.load = s.load;
      if (auto d = scale_decision(s.spec, s.state, sig, now)) {
        record_decision(s.state, std::move(*d), service_limits_);
        s.rec.state_json = state_to_json(s.state).dump();
        s.rec.updated = now;
        batch.push_back(op::PutService{s.rec});
        changed = true;
      }
    }
    const std::array<int, 2> want{std::max(0, s.state.desired - s.spec.min_replicas),
                                  s.spec.min_replicas};
    // Cancels `over` replicas of a tier, of those being replaced or not: waiting (or not ready)
    // ones before serving ones, the newest first (of those being replaced, the oldest).
    auto trim = [&](bool prot, bool of_stale, int over, const std::string& why) {
      std::vector<JobId> order;  // waiting ones, then running ones; newest first (old: oldest)
      for (const bool waiting : {true, false}) {
        std::vector<JobId> part;
        for (const auto& [id, p] : s.replicas) {
          if (p == prot && s.stale.count(id) == (of_stale ? 1u : 0u) &&
              !serving(active_.at(id)) == waiting) {
            part.push_back(id);
          }
        }
        if (!of_stale) std::reverse(part.begin(), part.end());
        order.insert(order.end(), part.begin(), part.end());
      }
      for (int i = 0; i < over && i < static_cast<int>(order.size()); ++i) {
        const JobId id = order[static_cast<std::size_t>(i)];
        cancel_in_loop(active_.at(id), why, now, batch);
        s.replicas.erase(id);
        s.stale.erase(id);
        (of_stale ? stale : fresh)[prot] -= 1;
        changed = true;
      }
    };
    if (fresh[1] > want[1]) {
      trim(true, false, fresh[1] - want[1],
           "service " + name + ": more protected replicas than its minimum (" +
               std::to_string(want[1]) + ")");
    }
    if (fresh[0] > want[0]) {
      trim(false, false, fresh[0] - want[0],
           "service " + name + " scaled in to " + std::to_string(s.state.desired) + " replicas");
    }
    // A rolling restart: an old replica goes only once every new one serves (runs, and is ready
    // where the service has a readiness check) and its tier has one more than it wants (make
    // before break: as many replicas available as before), one a cycle.
    if (!s.stale.empty() && fresh_waiting == 0) {
      for (const bool prot : {true, false}) {
        if (stale[prot] > 0 && fresh[prot] + stale[prot] > want[prot]) {
          trim(prot, true, 1, "service " + name + ": rolling restart, replaced by a new replica");
          break;
        }
      }
    }
    if (s.stale.empty() && !s.state.replacing.empty()) {  // the rolling restart is over
      s.state.replacing.clear();
      s.rec.state_json = state_to_json(s.state).dump();
      batch.push_back(op::PutService{s.rec});
    }
    if (now < s.replace_after) continue;
    for (const bool prot : {true, false}) {
      // During a rolling restart one new replica at a time, once the last one serves.
      const int need = want[prot] - fresh[prot];
      const int n = s.stale.empty() ? need : std::min(need, 1 - fresh_waiting);
      for (int i = 0; i < n; ++i) submit_replica(s, prot, now, batch);
      if (n > 0) {
        changed = true;
        fresh_waiting += n;
      }
    }
  }
  if (changed) {
    dirty_ = true;
    publish_services();
  }
}

void Controller::publish_services() {
  auto view = std::make_shared<std::map<std::string, json>>();
  for (const auto& [name, s] : services_) {
    json j = {{"name", name},
              {"owner", s.rec.owner},
              {"budget", s.rec.budget},
              {"created", s.rec.created},
              {"updated", s.rec.updated},
              {"spec", service_to_json(s.spec)},
              {"desired", s.state.desired},
              {"running", s.running},
              {"ready", s.serving},
              {"restarting", s.stale.size()}};
    json replicas = json::array();
    for (const auto& [id, prot] : s.replicas) {
      // One that ended since the last reconcile is left out (it is replaced at the next).
      auto it = active_.find(id);
      if (it == active_.end()) continue;
      const auto& a = it->second;
      json r = {{"job", id},
                {"tier", prot ? "protected" : "elastic"},
                {"replacing", s.stale.count(id) > 0},
                {"state", a.rec.state},
                {"allocated", a.rec.allocated}};
      if (a.rec.protected_until > 0) r["protected_until"] = a.rec.protected_until;
      // Readiness: whether it counts as serving; with a check, since when and the last failure.
      const bool checked = a.spec_json && has_ready_check(*a.spec_json);
      r["ready"] = serving(a);
      r["ready_check"] = checked;
      if (checked && a.ready_run == a.rec.runs) {
        r["ready_since"] = a.ready_since;
        if (!a.ready_reason.empty()) r["ready_reason"] = a.ready_reason;
      } else if (checked && a.rec.state == "running") {
        r["ready_reason"] = "no check reported yet";
      }
      if (a.nodes) r["nodes"] = *a.nodes;
      replicas.push_back(std::move(r));
    }
    j["replicas"] = std::move(replicas);
    j["memory"] = s.memory ? json(*s.memory) : json();
    j["load"] = s.load ? json(*s.load) : json();
    if (s.load) j["load_at"] = s.load_at;
    j["decisions"] = state_to_json(s.state)["decisions"];
    view->emplace(name, std::move(j));
  }
  services_view_ = std::move(view);
}

void Controller::rebuild_services() {
  for (auto& rec : store_.services()) {
    auto spec = service_from_json(json::parse(rec.spec_json, nullptr, false));
    if (!spec.ok()) {
      std::fprintf(stderr, "allot: service %s: %s\n", rec.name.c_str(),
                   spec.error().message().c_str());
      continue;
    }
    ServiceRt s;
    s.spec = std::move(spec.value());
    s.state = state_from_json(json::parse(rec.state_json, nullptr, false));
    s.state.desired = std::clamp(s.state.desired, s.spec.min_replicas, s.spec.max_replicas);
    s.rec = std::move(rec);
    services_[s.spec.name] = std::move(s);
  }
  for (const auto& [id, a] : active_) {
    auto j = json::parse(a.rec.spec_json, nullptr, false);
    if (!j.is_object() || !j.contains("service")) continue;
    auto it = services_.find(j.value("service", ""));
    if (it == services_.end()) continue;
    it->second.replicas[id] = j.value("service_tier", "") == "protected";
  }
  // A rolling restart the last server did not finish goes on with the replicas it had not yet
  // replaced.
  for (auto& [name, s] : services_) {
    for (JobId id : s.state.replacing) {
      if (s.replicas.count(id)) s.stale.insert(id);
    }
  }
  publish_services();
}

core::Result<store::ServiceRecord> Controller::create_service(const ServiceSpec& spec,
                                                              const std::string& owner) {
  return call<core::Result<store::ServiceRecord>>([&]() -> core::Result<store::ServiceRecord> {
    if (services_.count(spec.name)) {
      return Error{"name", "a service named " + spec.name + " exists"};
    }
    if (services_.size() >= service_limits_.max_services) {
      return Error{"name", "at most " + std::to_string(service_limits_.max_services) +
                               " services on this server"};
    }
    const Time now = options_.clock();
    ServiceRt s;
    s.spec = spec;
    s.state.desired =
        std::clamp(std::max(1, spec.min_replicas), spec.min_replicas, spec.max_replicas);
    s.rec = {
        spec.name, owner, spec.budget, service_to_json(spec).dump(), state_to_json(s.state).dump(),
        now,       now,   false};
    write({op::PutService{s.rec}});
    auto out = s.rec;
    services_[spec.name] = std::move(s);
    dirty_ = true;
    publish_services();
    publish();
    return out;
  });
}

core::Result<store::ServiceRecord> Controller::scale_service(const std::string& name,
                                                             std::optional<int> min_replicas,
                                                             std::optional<int> max_replicas,
                                                             const std::string& by) {
  return call<core::Result<store::ServiceRecord>>([&]() -> core::Result<store::ServiceRecord> {
    auto it = services_.find(name);
    if (it == services_.end()) return Error{"name", "no service " + name};
    auto& s = it->second;
    const int mn = min_replicas.value_or(s.spec.min_replicas);
    const int mx = max_replicas.value_or(s.spec.max_replicas);
    if (auto st = check_replicas(mn, mx, service_limits_); !st.ok()) return st.error();
    const Time now = options_.clock();
    s.spec.min_replicas = mn;
    s.spec.max_replicas = mx;
    const int desired = std::clamp(s.state.desired, mn, mx);
    ScaleDecision d{
        now,
        s.state.desired,
        desired,
        "set by " + by + ": " + std::to_string(mn) + " to " + std::to_string(mx) + " replicas",
        std::nullopt,
        std::nullopt};
    s.rec.spec_json = service_to_json(s.spec).dump();
    note_decision(std::move(d), s.state, s.rec, service_limits_);
    write({op::PutService{s.rec}});
    dirty_ = true;
    publish_services();
    publish();
    return s.rec;
  });
}

core::Result<store::ServiceRecord> Controller::delete_service(const std::string& name,
                                                              const std::string& by) {
  return call<core::Result<store::ServiceRecord>>([&]() -> core::Result<store::ServiceRecord> {
    auto it = services_.find(name);
    if (it == services_.end()) return Error{"name", "no service " + name};
    const Time now = options_.clock();
    WriteBatch batch;
    for (const auto& [id, prot] : it->second.replicas) {
      if (auto a = active_.find(id); a != active_.end()) {
        cancel_in_loop(a->second, "service " + name + " deleted by " + by, now, batch);
      }
    }
    auto rec = it->second.rec;
    rec.removed = true;
    rec.updated = now;
    batch.push_back(op::PutService{rec});
    write(std::move(batch));
    services_.erase(it);
    dirty_ = true;
    publish_services();
    publish();
    return rec;
  });
}

core::Result<store::ServiceRecord> Controller::restart_service(const std::string& name,
                                                               const std::string& by) {
  return call<core::Result<store::ServiceRecord>>([&]() -> core::Result<store::ServiceRecord> {
    auto it = services_.find(name);
    if (it == services_.end()) return Error{"name", "no service " + name};
    auto& s = it->second;
    const Time now = options_.clock();
    for (const auto& [id, prot] : s.replicas) s.stale.insert(id);
    s.state.replacing.assign(s.stale.begin(), s.stale.end());
    note_decision({now, s.state.desired, s.state.desired,
                   "rolling restart by " + by + ": " + std::to_string(s.stale.size()) +
                       " replicas replaced one at a time, each stopped once its replacement "
                       "serves",
                   std::nullopt, std::nullopt},
                  s.state, s.rec, service_limits_);
    write({op::PutService{s.rec}});
    dirty_ = true;
    publish_services();
    publish();
    return s.rec;
  });
}

Status Controller::service_load(const std::string& name, double load) {
  return call<Status>([&]() -> Status {
    auto it = services_.find(name);
    if (it == services_.end()) return Error{"name", "no service " + name};
    it->second.load = load;
    it->second.load_at = options_.clock();
    return core::ok_status();
  });
}

}  // namespace allot::server
