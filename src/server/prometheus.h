// Prometheus metrics of `allot server` (GET /metrics; docs/metrics.md lists every series).
// Counters and histograms are kept here as the scheduling loop reports what it persists
// (server/observer.h) and as the API answers requests; gauges are read at scrape time from the
// loop's latest snapshot, the store's nodes and the agents' latest GPU samples. Per-GPU series
// use the DCGM exporter's names so that existing GPU dashboards work unchanged.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "server/controller.h"
#include "server/observer.h"
#include "server/prom_text.h"
#include "store/store.h"

namespace allot::server {

// The content type of the text exposition format.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// What a scrape reads besides the counters: the loop's snapshot, the nodes as stored, and each
// node's latest GPU sample (a JSON object {"time": ..., "gpus": [...]}, "" if none).
struct ScrapeInput {
  std::shared_ptr<const Snapshot> snapshot;
  std::vector<store::NodeRecord> nodes;
  std::function<std::string(const std::string&)> node_telemetry;
  core::Time now = 0;
};

class ServerMetrics : public ControllerObserver {
 public:
  ServerMetrics();

  void rebuilt(const store::Store& store) override;
  void queued(const std::vector<std::pair<store::JobRecord, core::JobSpec>>& jobs) override;
  void committing(const store::WriteBatch& batch) override;
  void committed(double seconds) override;
  void cycled(double seconds) override;

  // An API request answered: its route in OpenAPI form (not the path, so that job ids do not
  // make a series each), its status, and how long it took.
  void request(const std::string& method, const std::string& route, int status, double seconds);

  // A gauge read at each scrape from what holds the count (the API's change feed for
  // allot_event_streams, the agents' watch hub for allot_agent_assignment_watches); a gauge no
  // one registered is left out. Registering a name again replaces its reader.
  void count_open(const std::string& name, const std::string& help,
                  std::function<std::size_t()> open);

  // The exposition text.
  std::string render(const ScrapeInput& in);

 private:
  // What the metrics need of each job not yet ended.
  struct Job {
    std::string budget, kind, state, cluster;
    bool allocated = false;
    std::int64_t milli = 0;        // held while starting, running or preempting
    std::int64_t asked_milli = 0;  // nodes x GPUs per node x fraction
    core::Time queued_since = 0;
  };
  void track(const store::JobRecord& rec);
  // Parts of render(), under mu_.
  void render_cluster(prom::TextWriter& w, const ScrapeInput& in);
  void render_jobs(prom::TextWriter& w, const Snapshot& snap);
  void render_loop(prom::TextWriter& w, const Snapshot& snap);
  void render_nodes(prom::TextWriter& w, const ScrapeInput& in);

  std::mutex mu_;
  std::unordered_map<core::JobId, Job> jobs_;
  // budget -> class (allocated, unallocated) -> GPU-seconds
  std::map<std::string, std::map<std::string, double>> delivered_;
  std::map<std::string, double> owed_;  // budget -> owed GPU-seconds, integrated at scrapes
  core::Time owed_at_ = 0;              // the last scrape's time
  std::map<std::pair<std::string, std::string>, double> submissions_;  // (budget, kind)
  std::map<std::pair<std::string, std::string>, double> transitions_;  // (from, to)
  std::map<std::string, double> preemptions_;                          // reason
  std::map<std::string, double> drains_;                               // reason
  std::map<std::string, double> budget_changes_;                       // field
  std::map<std::string, double> health_changes_;                       // health
  std::map<std::string, prom::Histogram> queue_wait_;                  // kind
  prom::Histogram cycle_;
  prom::Histogram commit_;
  // Apart from mu_: every API request takes it, and they should not wait for a scrape's
  // gauges or the loop's batches. (method, route) -> latency; (method, route, code) -> count.
  std::mutex api_mu_;
  std::map<std::pair<std::string, std::string>, prom::Histogram> api_latency_;
  std::map<std::tuple<std::string, std::string, std::string>, double> api_requests_;
  struct OpenGauge {
    std::string help;
    std::function<std::size_t()> read;
  };
  std::map<std::string, OpenGauge> open_gauges_;  // by name; guarded by api_mu_
};

// The scrape as GET /metrics answers it, read from the store and the loop now.
std::string scrape(ServerMetrics& metrics, const store::Store& store, const Controller& ctl);

double seconds_since(std::chrono::steady_clock::time_point t);

// /metrics with no token, alone on an address of its own (`allot server --metrics-listen`):
// for a Prometheus that reaches the cluster's private network and holds no secret.
class MetricsListener {
 public:
  MetricsListener(std::shared_ptr<ServerMetrics> metrics, const store::Store& store,
                  const Controller& ctl);
  ~MetricsListener();
  MetricsListener(const MetricsListener&) = delete;
  MetricsListener& operator=(const MetricsListener&) = delete;
  // Binds host:port (0: any free port) and serves on a thread; returns the bound port. The error
  // names the field "metrics_listen".
  core::Result<int> start(const std::string& host, int port);
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Why a job was stopped, from the reason the loop recorded with its move to preempting: for
// preemptions "unallocated" or "over_allocation"; for drains "draining", "node_down" or "lost".
// `drain` says which of the two it is.
std::string stop_reason(const std::string& reason, bool& drain);

}  // namespace allot::server
