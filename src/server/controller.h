// The scheduling loop: one thread that alone owns a core::Scheduler. Everything that changes job,
// node or budget state is an event applied on that thread (submit, cancel, agent reports, node
// and budget changes) and persisted through the store before it is acknowledged. A tick (and any
// event) leads to a cycle whose decisions are applied to the store; after each cycle the loop
// publishes an immutable Snapshot (explanations, agent assignments, budget tree) that API reads
// use without ever waiting for a cycle.
//
// On start the core is rebuilt from the store: budgets, nodes, lookback usage from the ledger,
// running jobs on their nodes, then the queue.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/scheduler.h"
#include "server/feasibility.h"
#include "server/lifecycle.h"
#include "server/observer.h"
#include "server/service.h"
#include "server/standing.h"
#include "store/store.h"

namespace allot::server {

using core::JobId;
using core::Status;
using core::Time;

struct ControllerOptions {
  core::PolicyConfig policy;
  std::function<Time()> clock;                       // seconds; default: the system clock
  std::chrono::milliseconds tick{1000};              // a cycle at least this often
  std::chrono::milliseconds min_cycle_interval{50};  // at most one cycle per interval under load
  // Waiting jobs are explained by the cycle at least `tick` after the last explained one (and
  // ten times as long as that one took; and on sync()); cycles on events in between only decide,
  // which costs what changed, not the length of the queue. Under a storm of events, cycles on
  // events come at most every four times their own cost.
  core::Duration sim_default_duration = 300;  // simulated nodes: run time without expected_duration
  // The agent protocol (docs/agent-protocol.md): how long an agent keeps its jobs without
  // reaching the server, how long the server waits before it marks a silent node down (must be
  // greater than lease_seconds + 5), and how long a stopped job has between SIGTERM and SIGKILL.
  int lease_seconds = 30;
  int node_timeout_seconds = 45;
  int stop_grace_seconds = 30;
  // Told every persisted batch, submission and cycle (server/observer.h), on the loop's thread.
  Observers observers;
};
// Checks the agent protocol options; the error names the option at fault.
Status validate(const ControllerOptions& o);

struct WhyInfo {
  std::string code;
  std::string text;
  std::uint32_t rank = 0;
  bool funded = false;
  Time expected_start = core::kNever;
};

// One job's part on one node, as the agent gets it.
struct AssignedRun {
  JobId job = 0;
  int run = 0;  // the job record's runs
  std::string state;
  std::vector<int> gpus;  // GPU indices on the node
  std::int64_t milli = core::kWholeGpu;
  std::string mig_profile;  // the MIG instance's profile, when the GPU is in MIG mode
  std::shared_ptr<const nlohmann::json> spec;  // the canonical spec
  std::string owner, budget, name;
  int rank = 0;
  std::shared_ptr<const std::vector<std::string>> nodes;  // rank order
  std::string rendezvous;
  // A service replica with a readiness check: whether the server knows this run ready (none:
  // not reported since the run began or since the server started; the agent says it again).
  std::optional<bool> ready;
};
struct StopRun {
  JobId job = 0;
  int run = 0;
  int notice_seconds = 0;  // > 0: warn first, SIGTERM this long after (an interactive job)
};
// A GPU the scheduler re-partitioned (docs/policy.md section 7.5): the agent makes it hold exactly
// these MIG instances (none: whole, MIG mode off), then registers again with what it achieved.
struct MigLayoutOrder {
  int gpu = 0;
  std::vector<std::string> profiles;
};

struct NodeAssignments {
  std::vector<AssignedRun> run;             // should be running on the node
  std::vector<StopRun> stop;                // to stop, then report preempted
  std::vector<MigLayoutOrder> mig_layouts;  // before any run
};

// What an agent report did: the job's state after it, or why it was not applied.
struct ReportOutcome {
  std::string state;  // empty when error is set
  std::string error;
};

struct ClusterInfo {
  std::string name;
  core::Milli capacity = 0;
  // What the last explaining cycle left idle (core::ClusterState): whole free GPUs on
  // schedulable nodes, the largest per-node request still waiting, and the free GPUs it cannot
  // use (fragmentation).
  int free_gpus = 0;
  int largest_waiting_per_node = 0;
  int fragmented_gpus = 0;
};

struct Snapshot {
  Time now = 0;
  std::uint64_t cycles = 0;
  // Every job left waiting by the last cycle that explained the whole queue (one a second at
  // most; cycles on events in between only decide). Shared between snapshots.
  std::shared_ptr<const std::map<JobId, WhyInfo>> why;
  Time explained_at = 0;  // the time of that cycle
  std::map<std::string, NodeAssignments> assignments;
  std::shared_ptr<const core::BudgetTree> budgets;
  std::map<std::string, std::vector<std::string>> members;  // budget path -> members
  std::map<std::string, std::vector<std::string>> owners;   // budget path -> owners
  std::map<std::string, std::string> submit_limits;  // budget path -> its limits' JSON, if set
  // budget path -> the minimum runtime its jobs get when they ask none, where one is set
  std::map<std::string, std::int64_t> default_min_runtime;
  std::map<std::string, std::string> user_limits;  // user -> their own limits' JSON, if set
  std::map<std::string, std::vector<std::string>> owned_by;  // user -> budgets they own
  std::map<std::string, double> shares;                      // budget path -> share
  std::vector<ClusterInfo> clusters;                         // by ClusterId
  std::map<std::string, core::ClusterId> cluster_ids;
  std::vector<NodeShape> node_shapes;  // what each node offers: requests no node fits are refused
  std::shared_ptr<const core::GpuCatalog> catalog;
  core::PolicyConfig policy;
  std::size_t pending = 0;
  std::size_t running = 0;
  // Jobs waiting (pending or requeued) per owner, for the submission quota (quota.h); and per
  // owner within each budget that has limits of its own ("OWNER /path": that budget and below).
  std::map<std::string, std::int64_t> waiting_by_owner;
  std::map<std::string, std::int64_t> waiting_by_owner_in;
  // Each budget's standing, computed with the explanations (server/standing.h). Shared.
  std::shared_ptr<const StandingTable> standing;
  // Every service (server/service.h) as `allot serve show` gives it, by name: its request, its
  // replicas and the scale decisions. Rebuilt with the explanations and on each service change.
  std::shared_ptr<const std::map<std::string, nlohmann::json>> services =
      std::make_shared<const std::map<std::string, nlohmann::json>>();
  std::uint64_t version = 0;  // one more for each snapshot published
  // How many submissions (Controller::submitted()) the loop had taken in: those numbered up to
  // this are in the counts above (or have left the queue already).
  std::uint64_t submits_taken = 0;
};

// Owns the scheduling loop and the in-memory mirror of the store's jobs, nodes and budgets.
// Thread-safe: every public call may come from any thread (the API's workers and event loops);
// changes run on the loop thread and return once durable, reads use the published snapshot.
//
// Submissions do not go through the loop as an event: the API writes the job (pending) to the
// store itself, from its event loop, and answers as soon as the write is durable; then it hands
// the job over with submitted(). This keeps a submit storm off the loop thread (no wait for a
// loop turn, no closure per job: the loop takes them in a batch just before its next cycle), and
// the store's unique (owner, idempotency key) index, not the loop, refuses a repeated submit.
// Everything else that changes state (cancel, reports, node and budget changes) is an event.
class Controller {
 public:
  Controller(store::Store& store, ControllerOptions options);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Rebuilds the core from the store and starts the loop.
  Status start();
  void stop();

  std::shared_ptr<const Snapshot> snapshot() const;
  // Called on the loop's thread with each snapshot it publishes, once readers see it (the
  // agents' assignment watches, server/assignment_watch.h). Replaces the one before; empty: none.
  void on_publish(std::function<void(std::shared_ptr<const Snapshot>)> fn);
  Time now() const { return options_.clock(); }
  JobId next_job_id() { return ++last_job_id_; }

  // A job already persisted as pending (the API writes it durably first): queue it. Returns its
  // submission number: the snapshots with a submits_taken of at least that count it.
  std::uint64_t submitted(store::JobRecord rec, core::JobSpec spec);

  // Each of these runs on the loop thread, persists its effect, and returns once durable.
  core::Result<store::JobRecord> cancel(JobId id, const std::string& reason);
  // Keeps a waiting job out of scheduling until release() (like Slurm's scontrol hold): refused
  // (field "state") for a job that is not waiting. `by` is who holds it. Holding a held job
  // changes nothing. (controller_gate.cpp)
  core::Result<store::JobRecord> hold(JobId id, const std::string& by);
  // Lets a held job be scheduled again once its dependencies allow; refused if it is not held.
  core::Result<store::JobRecord> release(JobId id, const std::string& by);
  // An agent's report about run `run` of job `id` on `node`. event: "started", "exited" (with
  // exit_code, and signal when killed by one), "preempted", "lost". Never applied for another run
  // than the job's current one ("stale run"); repeating a report changes nothing. A job not
  // placed on `node` (or none at all) is "not a job on node N": its state is not told.
  ReportOutcome agent_report(const std::string& node, JobId id, int run, const std::string& event,
                             std::optional<int> exit_code, std::optional<int> signal);
  // An agent's readiness report ("readiness" event) for a service replica's current run: ready or
  // not, and the last check's failure (bounded). Kept in memory only: after a restart the agents
  // say it again (the assignment tells them the server does not know). (controller_services.cpp)
  ReportOutcome agent_readiness(const std::string& node, JobId id, int run, bool ready,
                                const std::string& reason);
  // Registers a node, or (same name and shape) updates what its agent tells about it. The bool
  // is true when the node is new.
  core::Result<std::pair<store::NodeRecord, bool>> register_node(store::NodeRecord node);
  // health: healthy, unhealthy, draining, down (empty: unchanged); cordon: unchanged if nullopt.
  core::Result<store::NodeRecord> set_node(const std::string& name, const std::string& health,
                                           const std::string& reason, std::optional<bool> cordon);
  Status heartbeat(const std::string& name);
  // Any call from a node's agent: the node is alive. A node the server marked down for silence
  // comes back healthy (one an operator marked down stays down). False for an unknown node.
  bool contact(const std::string& name);
  // The latest per-GPU sample a node's agent posted (a JSON array), "" if none.
  void set_node_telemetry(const std::string& name, std::string gpus_json);
  std::string node_telemetry(const std::string& name) const;
  const ControllerOptions& options() const { return options_; }
  core::Result<store::BudgetRecord> set_budget(
      const std::string& path, std::optional<double> share,
      std::optional<std::vector<std::string>> members, const std::string& actor,
      std::optional<std::vector<std::string>> owners = std::nullopt, std::int64_t actor_token = 0,
      std::optional<std::string> submit_limits = std::nullopt,
      std::optional<std::int64_t> default_min_runtime = std::nullopt);  // -1: none (inherit)
  // Sets (limits JSON) or removes ("") a user's own submission limits, audited (path "/", field
  // "user_limits USER").
  store::UserLimitsRecord set_user_limits(const std::string& user, const std::string& limits,
                                          const std::string& actor, std::int64_t actor_token);
  // Removes the budget and everything below it, refused (field "path") while any job is queued
  // or running there. Returns the removed paths, deepest first; each is audited.
  // `actor` is the acting token's subject, `actor_token` its id: both go into the audit log.
  core::Result<std::vector<std::string>> remove_budget(const std::string& path,
                                                       const std::string& actor,
                                                       std::int64_t actor_token = 0);
  // Runs a cycle now and returns once its snapshot is published.
  void sync();

  // Inference services (controller_services.cpp): each change is persisted and shown in the
  // snapshot published before the call returns. create refuses a name in use (field "name");
  // the others refuse an unknown name (field "name"). delete cancels the service's replicas.
  core::Result<store::ServiceRecord> create_service(const ServiceSpec& spec,
                                                    const std::string& owner);
  core::Result<store::ServiceRecord> scale_service(const std::string& name,
                                                   std::optional<int> min_replicas,
                                                   std::optional<int> max_replicas,
                                                   const std::string& by);
  core::Result<store::ServiceRecord> delete_service(const std::string& name, const std::string& by);
  // A rolling restart: each replica running now is replaced by a new one, one at a time, each
  // old one stopped only once its replacement runs (make before break).
  core::Result<store::ServiceRecord> restart_service(const std::string& name,
                                                     const std::string& by);
  // The load a service reports (POST /services/NAME/load): its total, in its own unit.
  Status service_load(const std::string& name, double load);

 private:
  struct Active {
    store::JobRecord rec;
    core::JobSpec spec;
    Time sim_end = core::kNever;                      // simulated run: when it exits 0
    std::shared_ptr<const nlohmann::json> spec_json;  // rec.spec_json parsed once
    // The current run's placement, parsed: nodes in rank order, and per node its GPUs and milli.
    std::shared_ptr<const std::vector<std::string>> nodes;
    std::vector<std::pair<std::vector<int>, std::int64_t>> per_node;  // same order as nodes
    std::vector<std::string> mig_per_node;  // the MIG profile a node's slot holds ("" none)
    std::set<std::string> exited_ok;        // nodes of a gang that reported exit 0 (this run)
    // Nodes of a gang that have not yet said this run started (every node, at placement and
    // after a restart: set_placement): their assignment says "starting" even once another node
    // made the job running, so that a node that sees the run late launches it rather than
    // report it lost.
    std::set<std::string> unstarted;
    std::set<std::string> stopped;  // nodes that confirmed the stop (this run, preempting)
    // A service replica's readiness on run `ready_run` as its agent reported it (docs/policy.md
    // §15); another run than the current one's means not reported yet.
    int ready_run = 0;
    bool ready = false;
    bool ever_ready = false;   // on ready_run
    Time ready_since = 0;      // of the current value
    std::string ready_reason;  // the last failed check's, bounded
  };
  // A run that ended here (cancelled, or preempting across a restart) while its agents may still
  // run it: until each of its nodes reports it gone (or `until` passes), it is in those nodes'
  // stop lists and its GPUs count as still being vacated.
  struct Vacating {
    int run = 0;
    std::map<std::string, std::vector<int>> gpus;  // node -> its GPUs there
    Time until = 0;
  };

  void vacate(const Active& a, Time now);
  // Runs fn on the loop thread and returns its result (here, not in a .cpp: every event file
  // uses it).
  template <typename T>
  T call(std::function<T()> fn) {
    std::promise<T> p;
    auto fut = p.get_future();
    post([&] { p.set_value(fn()); });
    return fut.get();
  }
  void post(std::function<void()> fn);
  void run();
  void rebuild();
  void cycle(bool explain);
  void publish();
  // Each budget's standing now (controller_standing.cpp), for the snapshot.
  std::shared_ptr<const StandingTable> standings() const;
  void sim_exits(Time now, store::WriteBatch& batch);
  void take_submits(std::vector<std::pair<store::JobRecord, core::JobSpec>>& jobs);
  // The gate before the core (controller_gate.cpp): held jobs, jobs whose dependencies have not
  // ended and array tasks over their array's limit stay in active_ and gated_ but out of the
  // core's queue; each cycle hands the ones that became eligible to the core, fails those whose
  // dependency failed, and explains the others (gate_why_). Without `decide` it only explains
  // (after the cycle's decisions, so that the words name the states the jobs are in now).
  static bool needs_gate(const store::JobRecord& rec);
  void gate(Time now, store::WriteBatch& batch, bool decide = true);

  // Mutations of the in-memory mirror, appending the store ops to `batch`.
  Status transition(Active& a, JobStatus to, const std::string& reason, Time now,
                    store::WriteBatch& batch);
  void close_segment(Active& a, Time now, store::WriteBatch& batch);
  void finish(Active& a, JobStatus to, const std::string& reason, Time now, std::optional<int> code,
              store::WriteBatch& batch);
  void confirm_stop(Active& a, const std::string& reason, Time now, store::WriteBatch& batch);
  // The warning before the SIGTERM of a job the core stopped: interactive_stop_grace less the
  // ordinary stop grace for an interactive job (docs/policy.md §9), else 0.
  int stop_notice_seconds(const Active& a) const;
  bool simulated(const Active& a) const;
  core::ClusterId cluster_id(const std::string& name);
  void write(store::WriteBatch batch);
  void set_placement(Active& a);
  void lose(Active& a, const std::string& reason, Time now, store::WriteBatch& batch);
  void node_stopped(Active& a, const std::string& node, const std::string& reason, Time now,
                    store::WriteBatch& batch);
  void check_timeouts(Time now, store::WriteBatch& batch);
  void record_health(const store::NodeRecord& n, Time now, store::WriteBatch& batch);
  // A job event for each job on node `n` when it starts or stops draining (was: its health
  // before).
  void tell_jobs_on_node(const store::NodeRecord& n, const std::string& was, Time now,
                         store::WriteBatch& batch);
  void revive(const std::string& name);

  // A service as the loop keeps it (controller_services.cpp).
  struct ServiceRt {
    store::ServiceRecord rec;
    ServiceSpec spec;
    ServiceState state;
    std::map<JobId, bool> replicas;  // its jobs not ended: true for a protected one
    std::set<JobId> stale;           // of those, the ones a rolling restart is replacing
    std::optional<double> load;      // its latest report
    Time load_at = 0;
    std::optional<double> memory;  // the last measured memory pressure
    int running = 0;               // replicas running at the last reconcile
    int serving = 0;               // of those, the ones ready (all of them without a check)
    Time replace_after = 0;        // replicas that ended at once are replaced no sooner
    int quick_ends = 0;            // replicas in a row that ended within a minute
  };
  // Keeps each service's replicas as wanted, before the core decides: submits the missing ones
  // (protected first), cancels those over what is wanted (elastic ones, waiting ones first) and
  // takes the autoscaler's decision (`measure`: on the explaining cycles, once a second).
  void reconcile_services(Time now, store::WriteBatch& batch, bool measure);
  // Dynamic MIG (controller_nodes.cpp): a re-partition the core decided goes to the node's agent
  // (a simulated node makes it at once); the agent's next registration settles it.
  void order_repartition(const core::MigRepartition& r, Time now, store::WriteBatch& batch);
  void submit_replica(ServiceRt& s, bool protected_tier, Time now, store::WriteBatch& batch);
  void cancel_in_loop(Active& a, const std::string& reason, Time now, store::WriteBatch& batch);
  // The mean fraction of GPU memory used on a running replica's GPUs, from its nodes' latest
  // telemetry; nullopt when none is fresh.
  std::optional<std::pair<double, int>> replica_memory(const Active& a, Time now) const;
  // A replica counts toward its service's serving ones: running and, if it has a readiness
  // check, reported ready on its current run.
  static bool serving(const Active& a);
  void rebuild_services();
  void publish_services();
  std::map<std::string, ServiceRt> services_;
  std::shared_ptr<const std::map<std::string, nlohmann::json>> services_view_ =
      std::make_shared<const std::map<std::string, nlohmann::json>>();
  ServiceLimits service_limits_;

  // Set at construction, then only read (from any thread).
  store::Store& store_;  // thread-safe itself
  ControllerOptions options_;

  // Any thread: next_job_id() hands out ids without the loop.
  std::atomic<JobId> last_job_id_{0};

  // Owned by the loop thread (and by start() before the loop runs: rebuild()). Never touched
  // from other threads: they post events (call(), post()) or read the published snapshot.
  core::Scheduler sched_;
  std::map<JobId, Active> active_;
  std::map<JobId, Vacating> vacating_;
  std::map<std::string, core::NodeId> node_ids_;
  std::vector<store::NodeRecord> nodes_;  // by NodeId
  // node name -> GPU -> the MIG profiles its agent is to make (order_repartition), until the
  // node registers again.
  std::map<std::string, std::map<int, std::vector<std::string>>> mig_orders_;
  std::map<std::string, store::BudgetRecord> budgets_;
  std::map<std::string, std::string> user_limits_;  // user -> their limits' JSON
  std::map<std::string, core::ClusterId> cluster_ids_;
  std::shared_ptr<const std::map<JobId, WhyInfo>> why_;
  Time explained_at_ = 0;
  std::vector<core::ClusterState> cluster_states_;  // the last explaining cycle's, by ClusterId
  std::shared_ptr<const StandingTable> standing_;   // computed with the explanations
  std::set<JobId> holding_;  // jobs holding GPUs (starting, running, preempting)
  std::set<JobId> gated_;    // waiting jobs kept out of the core (held, dependencies, array limit)
  std::map<JobId, WhyInfo> gate_why_;                  // why each gated job waits
  std::unordered_map<JobId, std::string> ended_deps_;  // dependencies seen ended: their state
  std::uint64_t cycles_ = 0;
  std::uint64_t published_ = 0;  // snapshots published (Snapshot::version)
  std::uint64_t taken_ = 0;      // submissions taken in (Snapshot::submits_taken)
  bool dirty_ = false;           // an event changed something since the last cycle
  std::shared_ptr<const core::BudgetTree> budgets_snap_;  // reused while the tree is unchanged
  std::uint64_t budgets_snap_version_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;  // wakes the loop: an event, a submission, stop()
  // Guarded by mu_.
  std::deque<std::function<void()>> queue_;
  std::vector<std::pair<store::JobRecord, core::JobSpec>> submits_;
  std::uint64_t handed_ = 0;  // submitted() calls so far
  bool stopping_ = false;
  // Whether a submission should wake the loop: not while an event cycle is already due, since
  // submissions wait for it anyway and are taken together just before it.
  bool wake_on_submit_ = true;

  mutable std::mutex contact_mu_;
  // Guarded by contact_mu_: written by the API threads (agent calls) without going through the
  // loop. Last contact on the controller's clock.
  std::unordered_map<std::string, Time> last_contact_;
  std::set<std::string> timed_out_;                         // nodes marked down for silence
  std::unordered_map<std::string, std::string> node_gpus_;  // latest GPU telemetry per node

  mutable std::mutex snap_mu_;
  // Guarded by snap_mu_: swapped by the loop, read by any thread.
  std::shared_ptr<const Snapshot> snap_;
  std::function<void(std::shared_ptr<const Snapshot>)> on_publish_;  // guarded by snap_mu_

  // The loop itself: started by start(), joined by stop() (the owner's thread).
  std::thread thread_;
};

// Parses and renders the placement of a job: [{"node": ..., "gpu": ..., "milli": ...}].
// A placement as the job record keeps it: [{"node", "gpu", "milli", "mig"?}] ("mig": the profile
// of the MIG instance a slot holds).
std::string placement_json(const core::Placement& p, const std::vector<store::NodeRecord>& nodes,
                           const core::GpuCatalog& catalog);
std::vector<std::string> placement_nodes(const std::string& placement_json);
// The host part of a node's registered address ("10.0.0.1:22" -> "10.0.0.1", "[::1]:22" ->
// "[::1]", a bare IPv6 address in brackets), for gang rendezvous.
std::string rendezvous_host(const std::string& address);

}  // namespace allot::server
