// Inference services in a run (docs/simulator.md, "Inference services"): each service reports its
// load every report_every, the core's autoscaler (core/autoscale.h) decides, and its replicas are
// kept as the server keeps them (docs/policy.md §15): min_replicas protected ones (the contract
// as minimum runtime, renewed), the rest elastic (minimum runtime 0), a stopped one replaced at
// once, scale-in cancelling elastic ones (waiting before serving, newest first). Replicas are
// logical jobs of the run like the workload's, kept out of its training figures.
#include <algorithm>
#include <string>

#include "sim/simulation_run.h"

namespace allot::sim::run_detail {

void Run::setup_services() {
  services_.assign(sc_.services.size(), ServiceRun{});
  for (std::size_t k = 0; k < sc_.services.size(); ++k) {
    ServiceRun& s = services_[k];
    s.desired = sc_.services[k].spec.min_replicas;
    s.since = origin_;
    push(origin_, EventKind::ServiceReport, k, 0);
  }
}

std::size_t Run::live_replicas() const {
  std::size_t n = 0;
  for (const ServiceRun& s : services_) n += s.replicas.size();
  return n;
}

void Run::service_advance(std::size_t k, Time t) {
  ServiceRun& s = services_[k];
  if (t <= s.since) return;
  const SimService& spec = sc_.services[k].spec;
  const double dt = static_cast<double>(t - s.since);
  s.desired_s += dt * s.desired;
  s.serving_s += dt * std::min(s.serving, s.desired);
  if (s.serving >= spec.min_replicas) s.floor_s += dt;
  s.load_s += dt * s.load;
  s.served_s += dt * std::min(s.load, s.serving * spec.capacity);
  s.since = t;
}

void Run::on_service_report(std::size_t k, Time t) {
  const SimService& spec = sc_.services[k].spec;
  ServiceRun& s = services_[k];
  service_advance(k, t);
  s.load = service_load(spec, k, sc_.service_seed, t);
  core::ScaleSignals sig;
  sig.running = s.serving;
  sig.load = s.load;
  sig.memory = service_memory(spec, s.load, s.serving);
  const auto d = core::scale_decision(
      spec.autoscale,
      core::ScaleState{spec.min_replicas, spec.max_replicas, s.desired, s.last_scale}, sig, t);
  bool out = false;
  if (d) {
    out = d->to > d->from;
    ++(out ? s.outs : s.ins);
    s.desired = d->to;
    s.last_scale = t;
    record(t, "scale", 0, 0, 0,
           spec.name + " " + std::to_string(d->from) + " -> " + std::to_string(d->to) + ": " +
               d->reason);
  }
  reconcile_service(k, t, out);
  push(t + spec.report_every, EventKind::ServiceReport, k, 0);
}

void Run::reconcile_service(std::size_t k, Time t, bool scale_out) {
  ServiceRun& s = services_[k];
  const SimService& spec = sc_.services[k].spec;
  const int want[2] = {std::max(0, s.desired - spec.min_replicas), spec.min_replicas};
  int have[2] = {0, 0};
  for (std::size_t i : s.replicas) ++have[jobs_[i].protected_tier ? 1 : 0];
  for (const int tier : {1, 0}) {
    // Over: waiting (or loading) replicas before serving ones, the newest first.
    for (const bool waiting : {true, false}) {
      for (std::size_t r = s.replicas.size(); r-- > 0 && have[tier] > want[tier];) {
        const std::size_t i = s.replicas[r];
        if (jobs_[i].protected_tier != (tier == 1)) continue;
        if (slot(jobs_[i].run_id).serving == waiting) continue;
        cancel_replica(i, t);
        --have[tier];
      }
    }
  }
  for (const int tier : {1, 0}) {
    for (; have[tier] < want[tier]; ++have[tier]) new_replica(k, tier == 1, t, scale_out);
  }
}

void Run::new_replica(std::size_t k, bool protected_tier, Time t, bool scale_out) {
  const std::size_t i = sc_.jobs.size() + made_.size();
  AdmittedJob a = sc_.services[k].replica;
  a.job.id = i + 1;
  a.job.submit = t;
  made_.push_back(std::move(a));
  add_logical(i);
  LogicalJob& j = jobs_.back();
  j.category = kInference;
  j.service = static_cast<int>(k);
  j.protected_tier = protected_tier;
  j.wanted_since = scale_out ? t : -1;
  services_[k].replicas.push_back(i);
  submit(i, t, false);
  if (jobs_[i].ended) std::erase(services_[k].replicas, i);  // refused by the core
}

void Run::cancel_replica(std::size_t i, Time t) {
  LogicalJob& j = jobs_[i];
  const std::size_t k = static_cast<std::size_t>(j.service);
  ServiceRun& sr = services_[k];
  service_advance(k, t);
  const RunSlot& s = slot(j.run_id);
  if (s.running) {
    if (s.serving) --sr.serving;
    end_run(i, t);
  }
  demand_[j.leaf].add(t, -j.milli);
  j.ended = true;
  ++j.end_count;
  record(t, "cancel", job(i).job.id, j.run_id, j.milli,
         "service " + sc_.services[k].spec.name + " scaled in");
  (void)sched_.job_finished(j.run_id, t);
  sr.replicas.erase(std::find(sr.replicas.begin(), sr.replicas.end(), i));
}

void Run::on_replica_ready(std::uint64_t run_id, std::uint64_t serial, Time t) {
  RunSlot& s = slot(run_id);
  if (!s.running || s.serial != serial) return;  // stopped or cancelled while loading
  LogicalJob& j = jobs_[s.logical];
  const std::size_t k = static_cast<std::size_t>(j.service);
  ServiceRun& sr = services_[k];
  service_advance(k, t);
  s.serving = true;
  ++sr.serving;
  if (j.wanted_since >= 0) {
    sr.scale_up.push_back(static_cast<double>(t - j.wanted_since));
    j.wanted_since = -1;
  }
}

// A replica stopped by the core (preempted, drained, its node lost): it served until now, so it
// loses no work; the service replaces it at once, the same logical replica under a new job id.
void Run::stop_replica(const core::StopDecision& d, Time t) {
  const RunSlot& s = slot(d.job);
  const std::size_t i = s.logical;
  const LogicalJob& j = jobs_[i];
  const std::size_t k = static_cast<std::size_t>(j.service);
  ServiceRun& sr = services_[k];
  service_advance(k, t);
  if (s.serving) --sr.serving;
  end_run(i, t);
  ++sr.stops;
  sr.preemptions += d.reason == core::StopReason::Preempted;
  record(
      t, "stop", job(i).job.id, d.job, j.milli,
      std::string(core::to_string(d.reason)) + " (replica of " + sc_.services[k].spec.name + ")");
  (void)sched_.job_stopped(d.job, t);
  submit(i, t, true);
  if (jobs_[i].ended) std::erase(sr.replicas, i);  // refused by the core
}

void Run::finish_services(Time end) {
  for (std::size_t k = 0; k < services_.size(); ++k) {
    ServiceRun& sr = services_[k];
    const SimService& spec = sc_.services[k].spec;
    service_advance(k, end);
    for (std::size_t i : sr.replicas) {
      if (jobs_[i].wanted_since >= 0) {
        sr.scale_up.push_back(static_cast<double>(end - jobs_[i].wanted_since));
        ++sr.scale_up_censored;
      }
    }
    ServiceResult out;
    out.name = spec.name;
    out.budget = spec.budget;
    out.min_replicas = spec.min_replicas;
    out.max_replicas = spec.max_replicas;
    const double span = static_cast<double>(end - origin_);
    out.mean_desired = span > 0 ? sr.desired_s / span : 0;
    out.mean_serving = span > 0 ? sr.serving_s / span : 0;
    out.mean_load = span > 0 ? sr.load_s / span : 0;
    out.availability = sr.desired_s > 0 ? sr.serving_s / sr.desired_s : 1;
    out.floor_held = span > 0 ? sr.floor_s / span : 1;
    out.served = spec.capacity <= 0 ? -1 : sr.load_s > 0 ? sr.served_s / sr.load_s : 1;
    out.scale_up_delay = summarize(sr.scale_up, sr.scale_up_censored);
    out.scale_outs = sr.outs;
    out.scale_ins = sr.ins;
    out.preemptions = sr.preemptions;
    out.stops = sr.stops;
    r_.services.push_back(std::move(out));
  }
  if (services_.empty()) return;
  // The training tier: every budget that funds no service, as the impact figures count them.
  double sum = 0;
  std::size_t n = 0;
  r_.training_impact_min = 1;
  for (const BudgetResult& br : r_.budgets) {
    const bool serves =
        std::any_of(sc_.services.begin(), sc_.services.end(),
                    [&](const ScenarioService& s) { return s.spec.budget == br.path; });
    if (serves || br.owed_gpu_hours <= 0) continue;
    sum += br.impact;
    ++n;
    if (!br.owed_little) r_.training_impact_min = std::min(r_.training_impact_min, br.impact);
  }
  r_.training_impact_mean = n > 0 ? sum / static_cast<double>(n) : 1;
}

}  // namespace allot::sim::run_detail
