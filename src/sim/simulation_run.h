// The simulator's run, internal to src/sim: its state and the event loop's handlers
// (simulation.cpp), and the figures it sums up at the end (simulation_figures.cpp).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "core/scheduler.h"
#include "sim/hourly_series.h"
#include "sim/simulation.h"

namespace allot::sim::run_detail {

using core::Milli;
using core::Time;

inline constexpr double kMilliGpuSecondsPerGpuHour = 1000.0 * 3600.0;

// Arrival: a job a JobSource made (a closed loop's next job), submitted after the other events
// of its time, like the workload's own arrivals.
// MigReady: a GPU's re-partition is done (a: node, b: GPU).
// ReplicaReady: a replica's model is loaded and it serves (a: core job id, b: run serial).
// ServiceReport: a service reports its load and the autoscaler decides (a: service), after the
// replicas that serve from the same time.
enum class EventKind : std::uint8_t {
  JobEnd = 0,
  Fault = 1,
  Scripted = 2,
  Arrival = 3,
  MigReady = 4,
  ReplicaReady = 5,
  ServiceReport = 6
};

struct Event {
  Time time = 0;
  EventKind kind = EventKind::JobEnd;
  std::uint64_t seq = 0;  // insertion order: the last tie-break, for determinism
  std::uint64_t a = 0;    // job id, or node
  std::uint64_t b = 0;    // run serial, or the health to set
  bool operator>(const Event& o) const {
    if (time != o.time) return time > o.time;
    if (kind != o.kind) return kind > o.kind;
    return seq > o.seq;
  }
};

// kMig: jobs that name a MIG profile (reported only when there are some). kInference: services'
// replicas, reported apart (not in "all": the other figures are the training tier's).
enum Category : std::uint8_t { kDebug, kBatch, kLarge, kMig, kInference, kCategories };
const char* const kCategoryNames[] = {"debug", "batch", "large", "mig", "inference"};

struct LogicalJob {
  std::uint64_t run_id = 0;  // the core's id of its current incarnation
  core::Duration remaining = 0;
  Time first_start = -1;
  int starts = 0;
  bool ended = false;
  int end_count = 0;
  bool arrived = true;  // false for a JobSource's job until its submit time
  Category category = kBatch;
  Milli milli = 0;  // total milli-GPUs
  core::BudgetId leaf = core::kNoBudget;
  // A service's replica: its service (index into Scenario::services; -1: a workload's job), its
  // tier, and since when the service has wanted it serving (a scale-out's time; -1: not timed).
  int service = -1;
  bool protected_tier = false;
  Time wanted_since = -1;
};

// A service's state in one run (simulation_services.cpp) and what it measured.
struct ServiceRun {
  int desired = 0;
  Time last_scale = 0;
  std::vector<std::size_t> replicas;  // logical jobs not ended, oldest first
  int serving = 0;
  double load = 0;  // its latest report
  // Integrals over time, from the run's start to `since`: replicas wanted, serving ones up to
  // those wanted, time with at least min_replicas serving, load, and load within capacity.
  Time since = 0;
  double desired_s = 0, serving_s = 0, floor_s = 0, load_s = 0, served_s = 0;
  std::vector<double> scale_up;  // from a scale-out to its replica serving
  std::size_t scale_up_censored = 0;
  std::size_t outs = 0, ins = 0, preemptions = 0, stops = 0;
};

struct RunSlot {
  std::size_t logical = 0;
  bool running = false;
  bool allocated = false;
  std::uint64_t serial = 0;
  Time started = 0;
  core::Duration overhead = 0;  // restart delay paid at the start of this run
  core::Placement placement;
  bool serving = false;  // a replica past its start delay
};

class Run {
 public:
  Run(const Scenario& sc, const SimOptions& o)
      : sc_(sc), o_(o), sched_(o.policy, catalog_for(sc.cluster)) {}

  RunResult go();

 private:
  static core::GpuCatalog catalog_for(const ClusterConfig& c) {
    core::GpuCatalog cat = core::GpuCatalog::standard();
    intern_models(c, cat);
    return cat;
  }
  void setup();
  void record(Time t, const char* what, std::uint64_t job, std::uint64_t run_id, Milli milli,
              std::string reason) {
    if (!o_.record_events) return;
    r_.events.push_back(
        EventRecord{t, what, job, run_id, static_cast<double>(milli) / 1000.0, std::move(reason)});
  }
  // Logical job i: the scenario's jobs first, then those the JobSource made, in the order made.
  const AdmittedJob& job(std::size_t i) const {
    return i < sc_.jobs.size() ? sc_.jobs[i] : made_[i - sc_.jobs.size()];
  }
  void add_logical(std::size_t i);
  void source_answers(std::size_t ended, Time t);
  core::JobSpec spec_for(std::size_t i, std::uint64_t run_id, Time t) const;
  void submit(std::size_t i, Time t, bool resubmission);
  void place(const core::Placement& p, bool allocated, int sign, Time t);
  void on_start(const core::StartDecision& d, Time t);
  bool on_stop(const core::StopDecision& d, Time t);
  void on_class_change(const core::ClassChange& c, Time t);
  void on_end(std::uint64_t run_id, std::uint64_t serial, Time t);
  void end_run(std::size_t i, Time t);
  void on_fault(core::NodeId node, core::NodeHealth health, Time t, bool scripted);
  void cycles(Time t);
  void on_repartition(const core::MigRepartition& r, Time t);
  void on_mig_ready(core::NodeId node, int gpu);
  // Inference services (simulation_services.cpp).
  void setup_services();
  std::size_t live_replicas() const;
  void service_advance(std::size_t k, Time t);
  void on_service_report(std::size_t k, Time t);
  void reconcile_service(std::size_t k, Time t, bool scale_out);
  void new_replica(std::size_t k, bool protected_tier, Time t, bool scale_out);
  void cancel_replica(std::size_t i, Time t);
  void on_replica_ready(std::uint64_t run_id, std::uint64_t serial, Time t);
  void stop_replica(const core::StopDecision& d, Time t);
  void finish_services(Time end);
  void charge_backlog(std::size_t backlog, double seconds);  // RunResult::core_by_backlog
  void measure_fragmentation(Time t);
  Time expected_end(Time stop_at) const;
  void finish(Time end);
  void push(Time t, EventKind k, std::uint64_t a, std::uint64_t b) {
    events_.push(Event{t, k, seq_++, a, b});
  }
  RunSlot& slot(std::uint64_t run_id) {
    if (slots_.size() <= run_id) slots_.resize(run_id + 1);
    return slots_[run_id];
  }

  const Scenario& sc_;
  const SimOptions& o_;
  core::Scheduler sched_;
  core::ClusterId cluster_ = 0;
  RunResult r_;
  Time origin_ = 0;

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::uint64_t seq_ = 0;
  std::vector<LogicalJob> jobs_;
  std::vector<RunSlot> slots_;  // by the core's job id
  std::uint64_t next_run_id_ = 0;
  std::unique_ptr<FaultSchedule> faults_;
  // Dynamic MIG: the layouts being made, by (node, GPU), until their MigReady.
  std::map<std::pair<core::NodeId, int>, std::vector<core::MigInstance>> mig_making_;
  std::unique_ptr<JobSource> source_;  // a closed loop, or nothing
  std::deque<AdmittedJob> made_;       // its jobs and replicas (a deque: references stay)
  std::size_t arrivals_due_ = 0;       // its jobs made but not yet submitted
  std::vector<ServiceRun> services_;   // by Scenario::services

  // Per node: capacity, health, and the milli-GPUs assigned to allocated / unallocated work.
  std::vector<Milli> node_milli_, node_alloc_, node_unalloc_;
  std::vector<char> healthy_;
  Milli capacity_ = 0;
  // Rates integrated over time (milli-GPUs): on healthy nodes, and everywhere.
  BucketSeries available_, allocated_, unallocated_, occupied_, assigned_all_, fragmented_;
  std::vector<BucketSeries> demand_, delivered_, delivered_allocated_;  // by budget id
  std::vector<std::size_t> budget_jobs_;
  std::vector<std::vector<double>> budget_waits_;  // by budget id
  std::vector<std::size_t> budget_censored_, budget_preemptions_;
  std::vector<double> budget_lost_ms_;
  bool utilization_known_ = false;

  double assigned_ms_ = 0, used_ms_ = 0;  // milli-GPU-seconds of finished runs, for utilization
  double lost_ms_ = 0;
  std::size_t overfull_ = 0;  // placements that over-filled a node (a bug if ever > 0)
  std::vector<double> waits_[kCategories];
  std::size_t censored_[kCategories] = {};
  std::vector<double> completion_;
  std::vector<double> interactive_waits_;
  std::size_t interactive_censored_ = 0;
  double interactive_lost_ms_ = 0;
  // Requesters whose GPUs are still held by an interactive victim saving its state (the
  // interactive stop grace): their next start spends it on top of any restart delay.
  std::map<std::uint64_t, core::Duration> grace_for_;
  Time last_completion_ = 0;
};

}  // namespace allot::sim::run_detail
