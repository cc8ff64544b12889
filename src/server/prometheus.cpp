#include "server/prometheus.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "server/lifecycle.h"

namespace allot::server {

using json = nlohmann::json;
using prom::Labels;

namespace {

std::string kind_of(const std::string& spec_json) {
  auto j = json::parse(spec_json, nullptr, false);
  if (!j.is_object()) return "batch";
  return j.value("kind", std::string("batch"));
}

std::int64_t asked_milli(const std::string& spec_json) {
  auto j = json::parse(spec_json, nullptr, false);
  if (!j.is_object()) return 0;
  return j.value("nodes", std::int64_t{1}) * j.value("gpus_per_node", std::int64_t{1}) *
         j.value("gpu_milli", std::int64_t{core::kWholeGpu});
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

std::string stop_reason(const std::string& reason, bool& drain) {
  drain = false;
  if (starts_with(reason, "preempted for job")) {
    return reason.find("it ran unallocated") != std::string::npos ? "unallocated"
                                                                  : "over_allocation";
  }
  drain = true;
  if (reason.find("is draining") != std::string::npos) return "draining";
  if (reason.find("went down") != std::string::npos) return "node_down";
  if (starts_with(reason, "lost")) return "lost";
  return "other";
}

ServerMetrics::ServerMetrics()
    : cycle_(prom::latency_buckets()), commit_(prom::latency_buckets()) {}

void ServerMetrics::track(const store::JobRecord& rec) {
  auto st = parse_job_status(rec.state);
  if (!st || is_terminal(*st)) {
    jobs_.erase(rec.id);
    return;
  }
  auto [it, fresh] = jobs_.try_emplace(rec.id);
  auto& j = it->second;
  if (fresh) {
    j.kind = kind_of(rec.spec_json);
    j.asked_milli = asked_milli(rec.spec_json);
    j.queued_since = rec.submit_time;
  }
  j.budget = rec.budget;
  j.state = rec.state;
  j.cluster = rec.cluster;
  j.allocated = rec.allocated;
  j.milli = holds_gpus(*st) ? rec.milli : 0;
}

void ServerMetrics::rebuilt(const store::Store& store) {
  std::lock_guard lk(mu_);
  for (const auto& rec : store.active_jobs()) {
    track(rec);
    // A job requeued before the restart has waited since then, not since it was submitted.
    if (rec.state == "requeued") jobs_[rec.id].queued_since = rec.updated_at;
  }
}

void ServerMetrics::queued(const std::vector<std::pair<store::JobRecord, core::JobSpec>>& jobs) {
  std::lock_guard lk(mu_);
  for (const auto& [rec, spec] : jobs) {
    // From the parsed spec: no JSON parse per submission on the loop's thread.
    auto& j = jobs_[rec.id];
    j.kind = core::to_string(spec.kind);
    j.asked_milli = spec.shape.total_milli();
    j.queued_since = rec.submit_time;
    j.budget = rec.budget;
    j.state = rec.state;
    submissions_[{rec.budget, j.kind}] += 1;
  }
}

void ServerMetrics::committing(const store::WriteBatch& batch) {
  std::lock_guard lk(mu_);
  for (const auto& op : batch) {
    if (const auto* e = std::get_if<store::op::AddEvent>(&op)) {
      const auto& ev = e->event;
      transitions_[{ev.from.empty() ? "none" : ev.from, ev.to}] += 1;
      auto it = jobs_.find(ev.job);
      if (ev.to == "starting" && ev.from != "starting" && it != jobs_.end()) {
        auto [h, fresh] = queue_wait_.try_emplace(it->second.kind, prom::wait_buckets());
        h->second.observe(
            static_cast<double>(std::max<core::Time>(0, ev.time - it->second.queued_since)));
      } else if (ev.to == "requeued" && it != jobs_.end()) {
        it->second.queued_since = ev.time;
      } else if (ev.to == "preempting") {
        bool drain = false;
        auto why = stop_reason(ev.reason, drain);
        (drain ? drains_ : preemptions_)[why] += 1;
      }
    } else if (const auto* u = std::get_if<store::op::UpdateJob>(&op)) {
      track(u->job);
    } else if (const auto* i = std::get_if<store::op::InsertJob>(&op)) {
      track(i->job);
    } else if (const auto* l = std::get_if<store::op::AddLedger>(&op)) {
      const auto& e = l->entry;
      delivered_[e.budget][e.allocated ? "allocated" : "unallocated"] +=
          static_cast<double>(e.milli_seconds()) / core::kWholeGpu;
    } else if (const auto* a = std::get_if<store::op::AddAudit>(&op)) {
      budget_changes_[a->entry.field] += 1;
    } else if (const auto* h = std::get_if<store::op::AddNodeHealth>(&op)) {
      health_changes_[h->event.health] += 1;
    }
  }
}

void ServerMetrics::committed(double seconds) {
  std::lock_guard lk(mu_);
  commit_.observe(seconds);
}

void ServerMetrics::cycled(double seconds) {
  std::lock_guard lk(mu_);
  cycle_.observe(seconds);
}

void ServerMetrics::request(const std::string& method, const std::string& route, int status,
                            double seconds) {
  std::lock_guard lk(api_mu_);
  auto [h, fresh] = api_latency_.try_emplace({method, route}, prom::latency_buckets());
  h->second.observe(seconds);
  api_requests_[{method, route, std::to_string(status)}] += 1;
}

namespace {

// The budgets of the tree, not removed, by path.
std::vector<std::pair<std::string, core::BudgetId>> live_budgets(const core::BudgetTree& tree) {
  std::vector<std::pair<std::string, core::BudgetId>> out;
  for (core::BudgetId id = 0; id < tree.size(); ++id) {
    const auto& n = tree.node(id);
    if (!n.removed && n.path != "/") out.emplace_back(n.path, id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void ServerMetrics::count_open(const std::string& name, const std::string& help,
                               std::function<std::size_t()> open) {
  std::lock_guard lk(api_mu_);
  open_gauges_[name] = {help, std::move(open)};
}

std::string ServerMetrics::render(const ScrapeInput& in) {
  const Snapshot& snap = *in.snapshot;
  prom::TextWriter w;
  std::lock_guard lk(mu_);

  // ---- budgets ----
  std::vector<std::pair<std::string, core::BudgetId>> budgets;
  if (snap.budgets) budgets = live_budgets(*snap.budgets);
  struct Held {
    double allocated = 0, unallocated = 0, demand = 0;
    std::uint32_t rank = 0;  // best queue rank of a waiting job (0: none waiting)
  };
  std::map<std::string, Held> held;
  for (const auto& [id, j] : jobs_) {
    auto& h = held[j.budget];
    const double gpus = static_cast<double>(j.milli) / core::kWholeGpu;
    (j.allocated ? h.allocated : h.unallocated) += gpus;
    h.demand += static_cast<double>(j.asked_milli) / core::kWholeGpu;
  }
  if (snap.why) {
    for (const auto& [id, why] : *snap.why) {
      auto it = jobs_.find(id);
      if (it == jobs_.end()) continue;
      // The core counts from 0 (first in its cluster's order); the series from 1.
      const std::uint32_t rank = why.rank + 1;
      auto& h = held[it->second.budget];
      if (h.rank == 0 || rank < h.rank) h.rank = rank;
    }
  }
  std::map<std::string, double> entitled;
  for (const auto& [path, id] : budgets) {
    double e = 0;
    for (const auto& c : snap.clusters) {
      auto cid = snap.cluster_ids.find(c.name);
      if (cid == snap.cluster_ids.end()) continue;
      e += snap.budgets->allocated_fraction(id, cid->second) * static_cast<double>(c.capacity) /
           core::kWholeGpu;
    }
    entitled[path] = e;
  }
  // Owed, as the report defines it per second: the entitlement, capped at what is asked for.
  // Integrated from one scrape to the next at the rate seen now.
  const double since = owed_at_ > 0 && in.now > owed_at_ ? double(in.now - owed_at_) : 0.0;
  owed_at_ = std::max(owed_at_, in.now);

  w.family("allot_budget_gpus", "gauge",
           "GPUs held by running jobs submitted to exactly this budget, by class (allocated: "
           "within its share; unallocated: beyond it, preemptible).");
  for (const auto& [path, id] : budgets) {
    const auto h = held.count(path) ? held[path] : Held{};
    w.sample("allot_budget_gpus", {{"budget", path}, {"class", "allocated"}}, h.allocated);
    w.sample("allot_budget_gpus", {{"budget", path}, {"class", "unallocated"}}, h.unallocated);
  }
  w.family("allot_budget_delivered_gpu_seconds_total", "counter",
           "GPU-seconds delivered to jobs of this budget, by class, counted when each run "
           "segment closes (since the server started).");
  for (const auto& [path, by_class] : delivered_) {
    for (const auto& [cls, v] : by_class) {
      w.sample("allot_budget_delivered_gpu_seconds_total", {{"budget", path}, {"class", cls}}, v);
    }
  }
  w.family("allot_budget_entitled_gpus", "gauge",
           "GPUs this budget's share of every cluster's capacity comes to now.");
  for (const auto& [path, e] : entitled)
    w.sample("allot_budget_entitled_gpus", {{"budget", path}}, e);
  w.family("allot_budget_demand_gpus", "gauge",
           "GPUs asked for by jobs of exactly this budget that are waiting or running.");
  for (const auto& [path, id] : budgets) {
    w.sample("allot_budget_demand_gpus", {{"budget", path}},
             held.count(path) ? held[path].demand : 0);
  }
  std::map<std::string, double> owed;
  for (const auto& [path, e] : entitled) {
    owed[path] = std::min(e, held.count(path) ? held[path].demand : 0.0);
    owed_[path] += owed[path] * since;
  }
  w.family("allot_budget_owed_gpus", "gauge",
           "GPUs owed to this budget now: its entitlement capped at its demand.");
  for (const auto& [path, v] : owed) w.sample("allot_budget_owed_gpus", {{"budget", path}}, v);
  w.family("allot_budget_owed_gpu_seconds_total", "counter",
           "GPU-seconds owed to this budget, integrated between scrapes at the owed rate seen "
           "at each scrape (since the server started).");
  for (const auto& [path, v] : owed) {
    w.sample("allot_budget_owed_gpu_seconds_total", {{"budget", path}}, owed_[path]);
  }
  w.family("allot_budget_queue_rank", "gauge",
           "Rank in the fair-share order of this budget's first waiting job (1: next to start); "
           "absent while none waits.");
  for (const auto& [path, h] : held) {
    if (h.rank > 0) w.sample("allot_budget_queue_rank", {{"budget", path}}, h.rank);
  }
  w.family("allot_budget_share", "gauge", "The budget's share among its siblings.");
  for (const auto& [path, share] : snap.shares) {
    w.sample("allot_budget_share", {{"budget", path}}, share);
  }
  w.family("allot_budget_changes_total", "counter",
           "Audited changes to budgets and tokens, by field changed.");
  for (const auto& [field, v] : budget_changes_) {
    w.sample("allot_budget_changes_total", {{"field", field}}, v);
  }
  render_cluster(w, in);
  render_jobs(w, snap);
  render_loop(w, snap);
  render_nodes(w, in);
  return w.text();
}

}  // namespace allot::server

namespace allot::server {

void ServerMetrics::render_cluster(prom::TextWriter& w, const ScrapeInput& in) {
  const Snapshot& snap = *in.snapshot;
  static const char* const kStates[] = {"allocated", "unallocated", "idle",    "draining",
                                        "unhealthy", "down",        "cordoned"};
  // (cluster, model) -> state -> GPUs
  std::map<std::pair<std::string, std::string>, std::map<std::string, double>> gpus;
  for (const auto& n : in.nodes) {
    auto& by_state = gpus[{n.cluster, n.model}];
    for (const char* s : kStates) by_state[s] += 0;
    double held = 0;
    if (auto a = snap.assignments.find(n.name); a != snap.assignments.end()) {
      for (const auto& run : a->second.run) {
        const double g =
            static_cast<double>(run.gpus.size()) * static_cast<double>(run.milli) / core::kWholeGpu;
        auto j = jobs_.find(run.job);
        const bool allocated = j != jobs_.end() && j->second.allocated;
        by_state[allocated ? "allocated" : "unallocated"] += g;
        held += g;
      }
    }
    // GPUs nobody holds, by why they take no work (or idle when they would).
    const double free = std::max(0.0, static_cast<double>(n.gpus) - held);
    std::string state = n.health == "healthy" ? (n.cordoned ? "cordoned" : "idle") : n.health;
    if (!by_state.count(state)) state = "unhealthy";
    by_state[state] += free;
  }
  w.family("allot_cluster_gpus", "gauge",
           "GPUs by cluster, model and state: allocated or unallocated (held by jobs of that "
           "class) or, for GPUs nobody holds, idle, draining, unhealthy, down or cordoned.");
  for (const auto& [key, by_state] : gpus) {
    for (const auto& [state, v] : by_state) {
      w.sample("allot_cluster_gpus",
               {{"cluster", key.first}, {"model", key.second}, {"state", state}}, v);
    }
  }
  w.family("allot_cluster_capacity_gpus", "gauge",
           "GPUs of healthy, uncordoned nodes per cluster: what budgets' shares divide.");
  for (const auto& c : snap.clusters) {
    w.sample("allot_cluster_capacity_gpus", {{"cluster", c.name}},
             static_cast<double>(c.capacity) / core::kWholeGpu);
  }
}

void ServerMetrics::render_jobs(prom::TextWriter& w, const Snapshot& snap) {
  std::map<std::string, double> by_state;
  for (const char* s : {"pending", "starting", "running", "preempting", "requeued"})
    by_state[s] = 0;
  std::map<std::pair<std::string, std::string>, double> pending;  // (reason, kind)
  for (const auto& [id, j] : jobs_) {
    by_state[j.state] += 1;
    if (j.state != "pending" && j.state != "requeued") continue;
    std::string reason = "unexplained";  // queued since the last cycle that explained the queue
    if (snap.why) {
      if (auto it = snap.why->find(id); it != snap.why->end()) reason = it->second.code;
    }
    pending[{reason, j.kind}] += 1;
  }
  w.family("allot_jobs", "gauge", "Jobs not yet ended, by state.");
  for (const auto& [s, v] : by_state) w.sample("allot_jobs", {{"state", s}}, v);
  w.family("allot_jobs_pending", "gauge",
           "Jobs waiting (pending or requeued) by the reason the last explaining cycle gave "
           "(docs/api.md, why codes; 'unexplained' if queued since) and kind.");
  for (const auto& [k, v] : pending) {
    w.sample("allot_jobs_pending", {{"reason", k.first}, {"kind", k.second}}, v);
  }
  w.family("allot_queue_wait_seconds", "histogram",
           "Seconds from joining the queue (submission or requeue) to being placed, by kind.");
  for (const auto& [kind, h] : queue_wait_)
    w.histogram("allot_queue_wait_seconds", {{"kind", kind}}, h);
  w.family("allot_submissions_total", "counter", "Jobs submitted, by budget and kind.");
  for (const auto& [k, v] : submissions_) {
    w.sample("allot_submissions_total", {{"budget", k.first}, {"kind", k.second}}, v);
  }
  w.family("allot_job_transitions_total", "counter",
           "Job state changes, by the state left and the state entered.");
  for (const auto& [k, v] : transitions_) {
    w.sample("allot_job_transitions_total", {{"from", k.first}, {"to", k.second}}, v);
  }
  w.family("allot_preemptions_total", "counter",
           "Running jobs stopped for another job, by why they were chosen: unallocated (ran "
           "beyond their budget) or over_allocation (their branch stood worse).");
  for (const char* r : {"unallocated", "over_allocation"}) preemptions_[r] += 0;
  for (const auto& [r, v] : preemptions_) w.sample("allot_preemptions_total", {{"reason", r}}, v);
  w.family("allot_drains_total", "counter",
           "Running jobs stopped because of their node: draining (node drained or unhealthy), "
           "node_down, or lost (its agent no longer runs it).");
  for (const char* r : {"draining", "node_down", "lost"}) drains_[r] += 0;
  for (const auto& [r, v] : drains_) w.sample("allot_drains_total", {{"reason", r}}, v);
}

void ServerMetrics::render_loop(prom::TextWriter& w, const Snapshot& snap) {
  w.family("allot_scheduling_cycles_total", "counter", "Scheduling cycles run.");
  w.sample("allot_scheduling_cycles_total", {}, static_cast<double>(snap.cycles));
  w.family("allot_scheduling_cycle_duration_seconds", "histogram",
           "Seconds a scheduling cycle took: decisions, their store writes and the snapshot.");
  w.histogram("allot_scheduling_cycle_duration_seconds", {}, cycle_);
  w.family("allot_store_commit_duration_seconds", "histogram",
           "Seconds the scheduling loop waited for a batch to be durable in the store.");
  w.histogram("allot_store_commit_duration_seconds", {}, commit_);
  std::lock_guard api_lk(api_mu_);
  w.family("allot_api_request_duration_seconds", "histogram",
           "Seconds to answer an API request, by method and route.");
  for (const auto& [k, h] : api_latency_) {
    w.histogram("allot_api_request_duration_seconds", {{"method", k.first}, {"route", k.second}},
                h);
  }
  w.family("allot_api_requests_total", "counter",
           "API requests answered, by method, route and status code.");
  for (const auto& [k, v] : api_requests_) {
    w.sample("allot_api_requests_total",
             {{"method", std::get<0>(k)}, {"route", std::get<1>(k)}, {"code", std::get<2>(k)}}, v);
  }
  for (const auto& [name, g] : open_gauges_) {
    w.family(name, "gauge", g.help);
    w.sample(name, {}, static_cast<double>(g.read()));
  }
}

void ServerMetrics::render_nodes(prom::TextWriter& w, const ScrapeInput& in) {
  w.family("allot_node_health", "gauge",
           "1 for the node's health (healthy, unhealthy, draining, down), 0 for the others.");
  for (const auto& n : in.nodes) {
    for (const char* h : {"healthy", "unhealthy", "draining", "down"}) {
      w.sample("allot_node_health", {{"node", n.name}, {"cluster", n.cluster}, {"state", h}},
               n.health == h ? 1 : 0);
    }
  }
  w.family("allot_node_cordoned", "gauge", "1 if the node takes no new work.");
  for (const auto& n : in.nodes) w.sample("allot_node_cordoned", {{"node", n.name}}, n.cordoned);
  w.family("allot_node_gpus", "gauge", "GPUs the node has.");
  for (const auto& n : in.nodes) {
    w.sample("allot_node_gpus", {{"node", n.name}, {"cluster", n.cluster}, {"model", n.model}},
             n.gpus);
  }
  w.family("allot_node_heartbeat_age_seconds", "gauge",
           "Seconds since the node's agent last reached the server (simulated nodes: absent).");
  for (const auto& n : in.nodes) {
    if (n.simulated || n.last_heartbeat <= 0) continue;
    w.sample("allot_node_heartbeat_age_seconds", {{"node", n.name}},
             static_cast<double>(std::max<core::Time>(0, in.now - n.last_heartbeat)));
  }
  w.family("allot_node_health_changes_total", "counter",
           "Node health or cordon changes, by the health entered.");
  for (const auto& [h, v] : health_changes_)
    w.sample("allot_node_health_changes_total", {{"health", h}}, v);

  // Per GPU, from each agent's latest sample, under the DCGM exporter's names and labels.
  struct Family {
    const char* name;
    const char* field;
    const char* help;
  };
  static const Family kGpu[] = {
      {"DCGM_FI_DEV_GPU_UTIL", "util_pct", "GPU utilization (in %)."},
      {"DCGM_FI_DEV_FB_USED", "mem_used_mib", "Framebuffer memory used (in MiB)."},
      {"DCGM_FI_DEV_FB_FREE", "", "Framebuffer memory free (in MiB)."},
      {"DCGM_FI_DEV_GPU_TEMP", "temp_c", "GPU temperature (in C)."},
      {"DCGM_FI_DEV_POWER_USAGE", "power_w", "Power draw (in W)."},
      {"allot_gpu_ecc_uncorrected_errors", "ecc_uncorrected",
       "Uncorrected ECC errors the agent counted on the GPU."},
      {"allot_gpu_healthy", "healthy", "1 if the agent found the GPU healthy."},
  };
  struct Gpu {
    Labels labels;
    json sample;
  };
  std::vector<Gpu> gpus;
  for (const auto& n : in.nodes) {
    if (!in.node_telemetry) break;
    const auto t = in.node_telemetry(n.name);
    if (t.empty()) continue;
    auto tj = json::parse(t, nullptr, false);
    if (!tj.is_object() || !tj.contains("gpus") || !tj["gpus"].is_array()) continue;
    auto devices = json::parse(n.devices_json, nullptr, false);
    for (const auto& g : tj["gpus"]) {
      const int index = g.value("index", 0);
      std::string uuid;
      if (devices.is_array()) {
        for (const auto& d : devices) {
          if (d.is_object() && d.value("index", -1) == index) uuid = d.value("uuid", "");
        }
      }
      gpus.push_back({{{"gpu", std::to_string(index)},
                       {"UUID", uuid},
                       {"device", "nvidia" + std::to_string(index)},
                       {"model", n.model},
                       {"Hostname", n.name},
                       {"cluster", n.cluster}},
                      g});
    }
  }
  for (const auto& f : kGpu) {
    w.family(f.name, "gauge", f.help);
    for (const auto& g : gpus) {
      const auto& s = g.sample;
      if (std::string(f.field).empty()) {  // free = total - used
        if (s.contains("mem_total_mib") && s.contains("mem_used_mib")) {
          w.sample(f.name, g.labels,
                   s["mem_total_mib"].get<double>() - s["mem_used_mib"].get<double>());
        }
      } else if (auto v = s.find(f.field); v != s.end()) {
        w.sample(f.name, g.labels,
                 v->is_boolean() ? (v->get<bool>() ? 1.0 : 0.0) : v->get<double>());
      }
    }
  }
}

}  // namespace allot::server

#include <httplib.h>

#include <thread>

namespace allot::server {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string scrape(ServerMetrics& metrics, const store::Store& store, const Controller& ctl) {
  ScrapeInput in;
  in.snapshot = ctl.snapshot();
  in.nodes = store.nodes();
  in.node_telemetry = [&ctl](const std::string& node) { return ctl.node_telemetry(node); };
  in.now = ctl.now();
  return metrics.render(in);
}

struct MetricsListener::Impl {
  std::shared_ptr<ServerMetrics> metrics;
  const store::Store* store;
  const Controller* ctl;
  httplib::Server svr;
  std::thread thread;
};

MetricsListener::MetricsListener(std::shared_ptr<ServerMetrics> metrics, const store::Store& store,
                                 const Controller& ctl)
    : impl_(std::make_unique<Impl>()) {
  impl_->metrics = std::move(metrics);
  impl_->store = &store;
  impl_->ctl = &ctl;
}

MetricsListener::~MetricsListener() {
  stop();
}

core::Result<int> MetricsListener::start(const std::string& host, int port) {
  auto* m = impl_.get();
  m->svr.Get("/metrics", [m](const httplib::Request&, httplib::Response& res) {
    const auto began = std::chrono::steady_clock::now();
    try {
      res.set_content(scrape(*m->metrics, *m->store, *m->ctl), kPrometheusContentType);
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(std::string("scrape failed: ") + e.what() + "\n", "text/plain");
    }
    m->metrics->request("GET", "/metrics (listener)", res.status, seconds_since(began));
  });
  const int bound =
      port == 0 ? m->svr.bind_to_any_port(host) : (m->svr.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return core::Error{"metrics_listen", "cannot listen on " + host + ":" + std::to_string(port)};
  }
  m->thread = std::thread([m] { m->svr.listen_after_bind(); });
  // A stop() before the thread reached accept() would be lost: return once it listens.
  while (!m->svr.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return bound;
}

void MetricsListener::stop() {
  if (!impl_) return;
  impl_->svr.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace allot::server
