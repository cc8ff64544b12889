// Inference services on the scheduling loop (server/service.h, docs/policy.md §15): creating,
// scaling and deleting them, and the reconciler that keeps each one's replicas as wanted.

#include <algorithm>
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
      s.state.decisions.push_back(d);
      while (s.state.decisions.size() > service_limits_.max_decisions) {
        s.state.decisions.pop_front();
      }
      s.rec.state_json = state_to_json(s.state).dump();
      s.rec.updated = now;
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
  for (auto& [name, s] : services_) {
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
      if (quick) s.replace_after = now + replace_delay(s.quick_ends);
      it = s.replicas.erase(it);
      changed = true;
    }
    int protected_n = 0, elastic_n = 0, running = 0;
    double mem_sum = 0;
    int mem_n = 0;
    for (const auto& [id, prot] : s.replicas) {
      (prot ? protected_n : elastic_n) += 1;
      const auto& a = active_.at(id);
      if (a.rec.state != "running") continue;
      ++running;
      if (!measure) continue;
      if (auto m = replica_memory(a, now)) {
        mem_sum += m->first * m->second;
        mem_n += m->second;
      }
    }
    if (running != s.running) changed = true;
    s.running = running;
    if (measure) {
      s.memory = mem_n > 0 ? std::optional<double>(mem_sum / mem_n) : std::nullopt;
      ScaleSignals sig;
      sig.running = running;
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
    const int want_protected = s.spec.min_replicas;
    const int want_elastic = std::max(0, s.state.desired - s.spec.min_replicas);
    // Over what is wanted: the newest go first, waiting ones before running ones.
    auto trim = [&](bool prot, int over, const std::string& why) {
      std::vector<JobId> order;
      for (auto it = s.replicas.rbegin(); it != s.replicas.rend(); ++it) {
        if (it->second == prot && active_.at(it->first).rec.state != "running") {
          order.push_back(it->first);
        }
      }
      for (auto it = s.replicas.rbegin(); it != s.replicas.rend(); ++it) {
        if (it->second == prot && active_.at(it->first).rec.state == "running") {
          order.push_back(it->first);
        }
      }
      for (int i = 0; i < over && i < static_cast<int>(order.size()); ++i) {
        cancel_in_loop(active_.at(order[static_cast<std::size_t>(i)]), why, now, batch);
        s.replicas.erase(order[static_cast<std::size_t>(i)]);
        changed = true;
      }
    };
    if (protected_n > want_protected) {
      trim(true, protected_n - want_protected,
           "service " + name + ": more protected replicas than its minimum (" +
               std::to_string(want_protected) + ")");
    }
    if (elastic_n > want_elastic) {
      trim(false, elastic_n - want_elastic,
           "service " + name + " scaled in to " + std::to_string(s.state.desired) + " replicas");
    }
    if (now < s.replace_after) continue;
    for (int i = protected_n; i < want_protected; ++i) submit_replica(s, true, now, batch);
    for (int i = elastic_n; i < want_elastic; ++i) submit_replica(s, false, now, batch);
    if (protected_n < want_protected || elastic_n < want_elastic) changed = true;
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
              {"running", s.running}};
    json replicas = json::array();
    for (const auto& [id, prot] : s.replicas) {
      // One that ended since the last reconcile is left out (it is replaced at the next).
      auto it = active_.find(id);
      if (it == active_.end()) continue;
      const auto& a = it->second;
      json r = {{"job", id},
                {"tier", prot ? "protected" : "elastic"},
                {"state", a.rec.state},
                {"allocated", a.rec.allocated}};
      if (a.rec.protected_until > 0) r["protected_until"] = a.rec.protected_until;
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
    // Not a decision of the autoscaler: the cool-down does not start again.
    const Time last = s.state.last_scale;
    record_decision(s.state, std::move(d), service_limits_);
    s.state.last_scale = last;
    s.rec.spec_json = service_to_json(s.spec).dump();
    s.rec.state_json = state_to_json(s.state).dump();
    s.rec.updated = now;
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
