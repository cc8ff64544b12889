// The scheduling core's one entry point. State comes in through events (nodes, budgets, jobs,
// usage, time); decisions come out of cycle(). No I/O, no threads, no clock: the same events give
// the same decisions bit for bit. The server and the simulator both drive this class.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/budget_tree.h"
#include "core/decisions.h"
#include "core/explanation.h"
#include "core/fit_index.h"
#include "core/fragmentation_placement.h"
#include "core/gpu_catalog.h"
#include "core/gpu_pool.h"
#include "core/job.h"
#include "core/node.h"
#include "core/policy_config.h"
#include "core/sorted_queue.h"
#include "core/usage_window.h"

namespace allot::core {

enum class JobState : std::uint8_t {
  Pending,
  Running,
  Stopping,  // a stop was decided; its GPUs are released; waiting for job_stopped()
};
const char* to_string(JobState s);

struct RunInfo {
  ClusterId cluster = 0;
  Placement placement;
  Time started = 0;        // this run's start (a requeued job starts a new run)
  bool allocated = false;  // charged to its budget, protected until protected_until
  Time allocated_since = 0;
  Time protected_until = 0;
  // > 0: the run started inside its owner's interactive allowance (docs/policy.md §6) and is
  // neither demoted nor a victim before this time; until then it counts against the allowance.
  Time allowance_until = 0;
  bool on_reserved = false;  // backfilled unallocated onto nodes reserved for another job
  bool requeue_on_stop = false;
};

// Until when a running job is neither demoted nor a preemption victim: its contract, or its
// interactive allowance's protection if that lasts longer (docs/policy.md §6, §8). Drains look at
// the contract only (drain.h).
inline Time shielded_until(const RunInfo& r) {
  return std::max(r.protected_until, r.allowance_until);
}

struct JobEntry {
  JobSpec spec;
  JobState state = JobState::Pending;
  RunInfo run;  // meaningful while Running or Stopping
  Time queued_since = 0;
  int runs = 0;  // how many times it started, counting JobSpec::earlier_starts
};

struct CycleStats {
  std::size_t considered = 0;
  std::size_t placement_searches = 0;
  std::size_t preemption_attempts = 0;
};

// Capacity left idle by the end of a cycle, per cluster. Fragmentation: whole GPUs free on
// schedulable nodes that the largest waiting per-node request cannot use (a node with 3 free GPUs
// while the largest waiting job needs 4 per node holds 3 fragmented GPUs).
struct ClusterState {
  ClusterId cluster = 0;
  int free_gpus = 0;
  int largest_waiting_per_node = 0;  // 0 when nothing waits
  int fragmented_gpus = 0;
};

struct CycleOptions {
  // true: every pending job gets an explanation (what `allot why` shows). false: no explanations
  // (CycleResult::waiting stays empty), and the walk stops once provably nothing further can
  // start, so a cycle costs what changed rather than the length of the queue (the simulator); the
  // decisions are the same either way.
  bool explain_all = true;
  // true: once nothing more can start, reserve or preempt in a pass, the rest of the queue is only
  // explained, without the searches that could no longer succeed. false: every job goes through
  // every step. The decisions and explanations are the same (the property tests compare them);
  // only CycleStats::placement_searches differs. For tests.
  bool shortcut_settled = true;
};

struct CycleResult {
  Time now = 0;
  std::vector<StopDecision> stops;
  std::vector<ClassChange> class_changes;
  std::vector<StartDecision> starts;
  std::vector<Reservation> reservations;
  std::vector<MigRepartition> repartitions;  // dynamic MIG (PolicyConfig::mig_dynamic)
  std::vector<Explanation> waiting;          // every pending job left waiting, in fair-share order
  std::vector<ClusterState> clusters;
  CycleStats stats;
};

namespace detail {
// Everything a Scheduler knows, kept apart so that copying can be member-wise and then the
// pointers into jobs_ re-pointed (see Scheduler's copy constructor).
struct SchedulerState {
  SchedulerState(PolicyConfig config, GpuCatalog catalog)
      : config_(config), catalog_(std::move(catalog)) {}

  PolicyConfig config_;
  GpuCatalog catalog_;
  BudgetTree budgets_;
  std::vector<Cluster> clusters_;
  std::vector<Node> nodes_;
  std::vector<std::vector<NodeId>> cluster_nodes_;
  std::map<std::string, BlockId> blocks_;
  GpuPool pool_;
  std::vector<Milli> capacity_;                // per cluster, all nodes
  std::vector<UsageWindow> usage_;             // per cluster
  std::vector<std::vector<Milli>> rate_;       // [cluster][budget] allocated milli-GPUs running
  std::vector<std::vector<double>> fraction_;  // [cluster][budget] allocated fraction
  std::uint64_t fractions_version_ = 0;

  std::map<JobId, JobEntry> jobs_;
  // Pending jobs that name a MIG profile, in id order: what the MIG layout planner serves (§7.5).
  std::set<JobId> pending_named_;
  // Pending jobs per budget, in the order they are served within it: priority, submit time, id.
  // (The first field holds a duration under QueueOrder::ShortestFirst, hence Time.)
  using PendingKey = std::tuple<Time, Time, JobId>;
  using Queue = SortedQueue<PendingKey, JobEntry>;  // contiguous: a walk reads it in order
  // [0]: debug jobs, served first (with debug_jobs_first); [1]: the rest. Per budget, in the order
  // served within it. flat_ holds the same jobs in the FIFO or strict-priority order when one of
  // those is the policy (key: (inverted priority or 0, submit time, id)).
  std::vector<Queue> pending_[2];
  Queue flat_[2];
  // Per pass and budget, what its pending jobs ask for: a cycle without explain_all passes over a
  // budget none of whose jobs can be funded, placed or backfilled (Scheduler::budget_inert).
  struct PendingSizes {
    std::multiset<MilliGpuSeconds> contracts;  // milli x minimum runtime, of jobs with one
    std::multiset<int> per_node;               // whole-GPU requests: GPUs per node
    std::multiset<Milli> fraction;             // fractional requests: milli of one GPU
    std::size_t debug = 0;                     // debug jobs (funded by their own rule)
    // Speed only (walk_pruning.cpp, next_may_act): its queue's keys by what a node must give, and
    // those of the jobs that could be funded under Funding::Lookback (a contract) by total milli.
    FitIndex<PendingKey> fit;
    SizeIndex<PendingKey> contracts_by_milli;
    SizeIndex<PendingKey> all_by_milli;    // every job, by total milli (share claims)
    std::set<PendingKey> debug_contracts;  // debug jobs with a contract (their own funding rule)
    // Interactive jobs with a contract: the interactive allowance funds them past the burst limit.
    std::set<PendingKey> interactive_contracts;
  };
  std::vector<PendingSizes> pending_sizes_[2];
  FitIndex<PendingKey> flat_fit_[2];  // flat_'s keys by what a node must give (walk_pruning.cpp)
  // Sizes of the pending requests, so that a cycle knows when nothing left can fit.
  std::multiset<int> pending_per_node_;    // whole-GPU requests: GPUs per node
  std::multiset<Milli> pending_fraction_;  // fractional requests: milli of one GPU
  std::multiset<Milli> pending_total_;     // every request: total milli
  std::size_t pending_with_end_ = 0;       // pending jobs that declared an expected duration
  std::size_t pending_count_ = 0;
  // Entries of jobs_ (re-pointed when a Scheduler is copied, like the pending queues).
  std::vector<std::map<JobId, JobEntry*>> running_;     // per cluster: Running jobs, by id
  std::vector<std::vector<JobEntry*>> jobs_on_node_;    // Running jobs touching each node
  std::vector<std::vector<Reservation>> reservations_;  // per cluster, from the last cycle
  // Dynamic MIG (mig_layouts.cpp): GPUs being re-partitioned, by (node, GPU), with the layout
  // decided (their capacity is held out of pool_ until the node reports); and when each GPU's
  // layout was last changed by a decision (PolicyConfig::mig_hold).
  std::map<std::pair<NodeId, int>, std::vector<MigInstance>> mig_plans_;
  std::map<std::pair<NodeId, int>, Time> mig_changed_at_;
  // PlacementRule::LeastFragmenting (§14): per cluster, the recent single-node requests it
  // accepted, and that mix as the target workload (rebuilt when stale).
  std::vector<RecentRequests> recent_requests_;
  std::vector<std::vector<WorkloadShare>> recent_workload_;
  std::vector<char> recent_stale_;
  Time now_ = 0;
};
}  // namespace detail

class Scheduler : private detail::SchedulerState {
 public:
  explicit Scheduler(PolicyConfig config = {}, GpuCatalog catalog = GpuCatalog::standard());
  // A copy is a fully independent scheduler: deciding on it never touches the original.
  Scheduler(const Scheduler& other);
  Scheduler& operator=(const Scheduler& other);
  Scheduler(Scheduler&&) = default;  // std::map keeps its elements where they are when moved
  Scheduler& operator=(Scheduler&&) = default;

  // --- the model ---
  ClusterId add_cluster(std::string name);
  Result<NodeId> add_node(NodeSpec spec);
  // The node's GPUs were split into other MIG instances (NodeSpec::mig; docs/policy.md
  // section 7.3): what its running jobs hold stays theirs.
  // A GPU being re-partitioned (MigRepartition) whose new layout this reports is done.
  Status set_node_mig(NodeId node, std::vector<std::vector<MigInstance>> layout);
  // The same for one GPU: its instances now `instances` (empty: whole), the others unchanged.
  Status set_gpu_mig(NodeId node, int gpu, std::vector<MigInstance> instances);
  // The node's agent reported what it achieved: re-partitions it did not make are dropped, and
  // their GPUs take work again as they are.
  void cancel_mig_plans(NodeId node);
  // Whether some GPU of the node is being re-partitioned.
  bool mig_reconfiguring(NodeId node) const;
  // Down stops every job on the node at the next cycle; Unhealthy / Draining stop each job as it
  // reaches its minimum runtime; Healthy takes work again.
  Status set_node_health(NodeId node, NodeHealth health, std::string reason, Time now);
  Status set_cordoned(NodeId node, bool cordoned);
  BudgetTree& budgets() { return budgets_; }
  const BudgetTree& budgets() const { return budgets_; }
  GpuCatalog& catalog() { return catalog_; }
  const GpuCatalog& catalog() const { return catalog_; }
  const PolicyConfig& config() const { return config_; }

  // --- jobs ---
  Status submit(JobSpec spec, Time now);
  // Puts back a job that was running before a restart, on the GPUs it holds, with its class and
  // contract as they were (from the caller's durable record). Refused if the GPUs are not free.
  Status restore_running(JobSpec spec, ClusterId cluster, const Placement& placement, Time started,
                         bool allocated, Time allocated_since, Time now);
  // Removes a job in any state (cancelled, or it ended on its own); its GPUs are free at once.
  Status job_finished(JobId id, Time now);
  // A decided stop was carried out: resumable preempted/drained jobs go back to the queue.
  Status job_stopped(JobId id, Time now);
  // The job's processes run from `now` (its node confirmed the start, which may come well after
  // the placement: a poll, a container pull). An allocated job's contract is counted from here,
  // so a slow start never eats into its minimum runtime; charging still runs from the placement.
  Status job_running(JobId id, Time now);
  // Replays past charges (e.g. from the server's ledger after a restart) into the lookback window.
  void record_usage(ClusterId cluster, BudgetId leaf, Time from, Time to, Milli rate);

  // --- time and decisions ---
  void advance(Time now);  // charges running allocated jobs up to `now`
  CycleResult cycle(Time now, const CycleOptions& options = {});
  // The earliest time after now() at which a cycle may decide something new without any event
  // (a contract ends, a drain deadline, a usage bucket expires). kNever if none.
  Time next_wakeup() const;
  Time now() const { return now_; }

  // --- reading ---
  const JobEntry* job(JobId id) const;
  const std::map<JobId, JobEntry>& jobs() const { return jobs_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Cluster>& clusters() const { return clusters_; }
  const GpuPool& pool() const { return pool_; }
  const std::vector<Reservation>& reservations(ClusterId c) const { return reservations_.at(c); }
  std::size_t pending_count() const { return pending_count_; }
  // The smallest pending request, in milli-GPUs in all (0 when nothing is pending).
  Milli smallest_pending() const { return pending_total_.empty() ? 0 : *pending_total_.begin(); }
  MilliGpuSeconds usage(ClusterId cluster, BudgetId budget) const;
  // Usage / allocation over the lookback for `budget` on `cluster` (1.0 = exactly its allocation).
  double standing(ClusterId cluster, BudgetId budget) const;
  // Milli-GPU-seconds the budget is owed over one lookback window on `cluster`.
  double allocation(ClusterId cluster, BudgetId budget) const;
  Milli capacity(ClusterId cluster) const { return capacity_.at(cluster); }
  Milli allocated_rate(ClusterId cluster, BudgetId budget) const;

  // A sentence a person can read.
  std::string describe(const Explanation& e) const;
  std::string describe(const StopDecision& s) const;

 private:
  struct ClusterScratch;  // per-cycle working state of one cluster pass (cluster_scratch.h)
  class Selector;         // fair-share order (fair_share_walk.h)
  struct ScratchDeleter {
    void operator()(ClusterScratch* s) const;
  };
  // The working state of a cluster pass, kept between cycles so that its buffers are not
  // allocated again each time. Decided nothing: a copy of the Scheduler starts without one.
  struct ScratchBox {
    std::unique_ptr<ClusterScratch, ScratchDeleter> p;
    ScratchBox() = default;
    ScratchBox(const ScratchBox&) {}
    ScratchBox& operator=(const ScratchBox&) { return *this; }
    ScratchBox(ScratchBox&&) noexcept = default;
    ScratchBox& operator=(ScratchBox&&) noexcept = default;
  };
  ScratchBox scratch_;

  // The private members by seam, each group defined in the file it names (README's tour). Like the
  // whole class, none is thread-safe: one thread at a time drives a Scheduler.

  // scheduler.cpp: the model and job events.
  void refresh_fractions();
  void charge_rate(const JobEntry& j, Milli sign);
  // Ends j's run: its charge, its GPUs (unless a kept PoolTrial already handed them back, as
  // preemption's what-if does), its place among the running jobs.
  void release(JobEntry& j, bool gpus_already_free = false);
  // The policy's placement of `shape` in cluster `c` (§7.3, §14), off the nodes set in `mask`.
  std::optional<Placement> place(ClusterId c, const Shape& shape,
                                 const std::vector<GpuModelId>& models, const NodeMask* mask);
  void note_request(const JobSpec& spec);  // for LeastFragmenting's target workload

  // pending_queues.cpp: the queues (docs/policy.md §7.1).
  int pass_of(const JobSpec& spec) const;
  static PendingKey pending_key(const JobEntry& j);
  PendingKey flat_key(const JobEntry& j) const;  // its place in flat_ under the policy's order
  void remove_pending(JobEntry& j);
  void add_pending(JobEntry& j);
  void repoint_pending();

  // funding.cpp: standing, funding and class changes (§5, §6); standing_of is inline in
  // cluster_scratch.h.
  void compute_projected(ClusterId c, ClusterScratch& s) const;
  // Whether `j` would run allocated; if not, the highest budget that stops it is *limiting, and
  // *at_burst_limit (if given) says whether the burst cap did, its contract being affordable.
  bool funded(const ClusterScratch& s, const JobEntry& j, BudgetId* limiting,
              bool* at_burst_limit = nullptr) const;
  Time protection_end(const JobEntry& j) const;  // for a job made allocated now
  bool allowance_on() const;
  bool inside_interactive_allowance(const ClusterScratch& s, const JobEntry& j,
                                    BudgetId* limiting) const;
  void enter_allowance(ClusterScratch& s, JobEntry& j) const;
  double standing_of(const ClusterScratch& s, BudgetId b, MilliGpuSeconds extra = 0) const;
  bool within_allocation(const ClusterScratch& s, BudgetId leaf, MilliGpuSeconds cost,
                         BudgetId* limiting) const;
  bool within_burst(const ClusterScratch& s, BudgetId leaf, Milli milli, BudgetId* limiting) const;
  bool within_held_cap(const ClusterScratch& s, BudgetId leaf, Milli milli, double factor,
                       bool empty_exempt, BudgetId* limiting) const;
  void change_classes(ClusterId c, ClusterScratch& s, CycleResult& out);
  bool renew_contract(ClusterScratch& s, JobEntry& j, CycleResult& out);
  bool within_inference_share(const ClusterScratch& s, const JobEntry& j, Milli extra) const;

  // scheduler_cycle.cpp: the cycle and each cluster's walk (§7, §9).
  void stop_failed_and_drained(CycleResult& out);
  void schedule_cluster(ClusterId c, const CycleOptions& options, CycleResult& out,
                        std::set<JobId>& started);
  void stop(JobEntry& j, StopDecision d, CycleResult& out, bool gpus_already_free = false);

  // consider.cpp: one job's turn (§7.2), its start and its explanation (§10).
  struct ShapeMemo;  // what a pass learnt about one request shape
  void consider(ClusterId c, ClusterScratch& s, JobEntry& j, std::uint32_t rank,
                std::uint32_t ahead, CycleResult& out, std::set<JobId>& started);
  void start(ClusterScratch& s, JobEntry& j, Placement p, bool allocated, StartMode mode,
             std::vector<JobId> victims, CycleResult& out);
  void waits(ClusterScratch& s, const Explanation& e, CycleResult& out) const;
  Explanation explanation_of(ClusterId c, const ClusterScratch& s, const JobEntry& j,
                             std::uint32_t rank, std::uint32_t ahead) const;
  bool open_reserved_mig_nodes(const ClusterScratch& s, NodeMask& mask) const;
  void explain_wait(ClusterId c, ClusterScratch& s, const JobEntry& j, Explanation& e,
                    ShapeMemo& memo, CycleResult& out);
  void wait_behind_head(ClusterId c, ClusterScratch& s, const JobEntry& j, std::uint32_t rank,
                        std::uint32_t ahead, CycleResult& out);

  // preemption.cpp: each §8 rule, and the victim search.
  bool try_preempt(ClusterId c, ClusterScratch& s, JobEntry& j, const NodeMask& mask,
                   CycleResult& out);
  bool preemptible_by(const ClusterScratch& s, const JobEntry& victim, const JobEntry& requester,
                      VictimReason* why) const;
  bool may_take(ClusterScratch& s, const JobEntry& victim, const JobEntry& requester) const;
  bool preempted_enough(const JobEntry& v) const;
  bool within_share(const ClusterScratch& s, const JobEntry& v) const;
  bool claims_on() const;
  bool claims_share(const ClusterScratch& s, const JobEntry& j) const;
  bool over_share(const ClusterScratch& s, const JobEntry& v) const;
  Milli share_room(const ClusterScratch& s, BudgetId b) const;
  double work_at_risk(const JobEntry& j) const;
  bool unallocated_loss_limited(const JobEntry& victim) const;
  static double contract_gpu_seconds(const JobEntry& requester);
  bool unallocated_loss_ok(const JobEntry& victim, const JobEntry& requester) const;
  bool patience_over(const JobEntry& requester) const;
  bool losses_within_limits(const std::vector<JobId>& victims, const JobEntry& requester) const;

  // mig_layouts.cpp: §7.5, dynamic MIG.
  void plan_mig_layouts(ClusterId c, const std::set<JobId>& started, CycleResult& out);
  bool mig_layout_may_change(NodeId n, int gpu) const;
  template <class Offered, class Add>
  void fill_mig_layout(int memory, const Offered& offered, const Add& add) const;
  void rebuild_node_capacity(NodeId n);
  int mig_mode_gpus(ClusterId c, const std::set<std::pair<NodeId, int>>& merged) const;
  int mig_tier_share(ClusterId c) const;
  // §7.5 "Split over unallocated work": GPU (node, gpu) may be taken for a split by preempting
  // what runs on it; the GPU-seconds that would be lost (GPUs x run time of its holders) if so.
  std::optional<double> split_victims_cost(NodeId node, int gpu) const;
  bool mig_victim(const JobEntry& j) const;  // may yield a GPU (§7.5)
  // Preempts every run on GPU `gpu` of `node` for `for_job` (yield, split over unallocated work).
  void preempt_gpu_holders(NodeId node, int gpu, JobId for_job, CycleResult& out);
  void yield_mig_gpus(ClusterId c, const std::vector<int>& reserved,
                      const std::vector<int>& whole_need,
                      const std::vector<const JobEntry*>& needed_by,
                      std::set<std::pair<NodeId, int>>& merged, CycleResult& out);
  void settle_mig_plans(NodeId n);
  Time next_mig_wakeup() const;

  // reservations.cpp: §7.4.
  Reservation plan_reservation(ClusterId c, ClusterScratch& s, const JobEntry& j,
                               const NodeMask& mask) const;

  // walk_pruning.cpp: speed only, decisions unchanged.
  bool only_events_decide() const;  // no wake-up can change a decision (next_wakeup)
  bool anything_can_start(ClusterId c, const ClusterScratch& s) const;
  bool budget_inert(ClusterId c, const ClusterScratch& s, int pass, BudgetId b) const;
  bool job_inert(ClusterId c, const ClusterScratch& s, const JobEntry& j) const;
  bool funded_may_act(const ClusterScratch& s) const;
  bool claim_may_act(const ClusterScratch& s) const;
  int backfill_whole_free(ClusterId c, const ClusterScratch& s) const;
  int usable_whole_free(ClusterId c, const ClusterScratch& s) const;
  // Inert jobs a walk steps over in a row before it looks up where to jump (next_may_act), and
  // the length a queue must have for jumps to pay (a jump costs about as much as 20 steps).
  static constexpr int kInertStepsBeforeJump = 4;
  // A jump that lands on the very next job saved nothing: the walk then steps this many more.
  static constexpr std::size_t kQueueWorthJumping = 512;
  static constexpr int kInertStepsAfterVainJump = 64;
  bool next_may_act(ClusterId c, const ClusterScratch& s, int pass, BudgetId b,
                    const PendingKey& after, std::optional<PendingKey>* next) const;
  const JobEntry* next_holder(const ClusterScratch& s, int pass, BudgetId b,
                              const JobEntry& from) const;
  bool needs_consider(const ClusterScratch& s, const JobEntry& j) const;
  void explain_rest(ClusterId c, ClusterScratch& s, const JobEntry& j, std::uint32_t rank,
                    std::uint32_t ahead, CycleResult& out);
};

// "2h05m", "3d04h", "45s".
std::string format_duration(Duration d);

// The pure form: decisions for `state` at `now`, leaving the caller's state untouched.
CycleResult plan_cycle(Scheduler state, Time now);

}  // namespace allot::core
