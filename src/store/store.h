// The server's durable state behind one interface: jobs with their lifecycle history, budgets and
// their audit log, nodes, API tokens, the accounting ledger and idempotency keys. The SQLite
// implementation (sqlite_store.h) is the default; PostgreSQL (postgres_store.h) is the production
// one, with the same guarantees. open_store.h picks one from `--store`.
//
// Writes are batches applied atomically: write() returns only once the batch is durable (on disk),
// so an acknowledged write survives kill -9 and power loss; write_async() says so through a
// callback instead, for callers that must not hold a thread while the commit runs. Reads may run on
// any thread at any time.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/status.h"
#include "core/types.h"

namespace allot::store {

using core::JobId;
using core::Time;

struct JobRecord {
  JobId id = 0;
  std::string owner;
  std::string idempotency_key;  // unique per owner
  std::string name;
  std::string budget;     // budget path, e.g. "/lab/nlp/olmo"
  std::string spec_json;  // the validated request (shape, runtime, priority, ...)
  std::string state;      // see server/lifecycle.h
  std::string reason;     // of the last transition
  Time submit_time = 0;
  Time updated_at = 0;
  // The current or last run.
  std::string cluster;
  std::string placement_json;  // [{"node": "n01", "gpu": 0, "milli": 1000}, ...]
  bool allocated = false;
  Time protected_until = 0;
  Time run_start = 0;      // when the current run started (0: never ran)
  Time seg_start = 0;      // start of the current unbilled ledger segment
  std::int64_t milli = 0;  // milli-GPUs the job holds while running
  int runs = 0;
  std::optional<int> exit_code;
  // Kept out of scheduling by the controller (server/gate.h) until released or its dependencies
  // are met; the core never sees it meanwhile.
  std::string held_by;           // who holds it ("" = not held)
  std::vector<JobId> after;      // jobs that must have succeeded before it may start
  std::vector<JobId> after_any;  // jobs that must have ended (in any way) before it starts
  JobId array_job = 0;           // a job array's task: the array's first job (0 = none)
  int array_index = -1;          // its index in the array
  int array_limit = 0;           // at most this many of the array's tasks queued or running
};

// A list of user names as stored in one text column ("ann,bob"; names are validated, so a comma
// never occurs in one), for both backends.
inline std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ',';
    out += n;
  }
  return out;
}
inline std::vector<std::string> parse_name_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// A list of job ids as stored in one text column ("3,12,40"; "" for none), for both backends.
inline std::string id_list(const std::vector<JobId>& ids) {
  std::string out;
  for (JobId id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}
inline std::vector<JobId> parse_id_list(const std::string& text) {
  std::vector<JobId> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    out.push_back(static_cast<JobId>(std::strtoull(text.c_str() + start, nullptr, 10)));
    start = comma + 1;
  }
  return out;
}

struct JobEvent {
  JobId job = 0;
  Time time = 0;
  std::string from;  // "" for creation
  std::string to;
  std::string reason;
};

struct BudgetRecord {
  std::string path;  // "/org/program/project"
  double share = 1.0;
  std::vector<std::string> members;  // users who may submit here and below
  bool removed = false;
  std::vector<std::string> owners;  // users who manage it (as a manager token scoped here would)
  // Submission limits for its users' jobs here and below, set by an administrator, as JSON
  // ({"rate": .., "burst": .., "max_waiting": ..}); "" = the server-wide limits.
  std::string submit_limits;
  // The minimum runtime, in seconds, a job submitted here or below without one gets, unless a
  // budget nearer to it sets its own (docs/policy.md §2, "Default minimum runtime"); -1: none set.
  std::int64_t default_min_runtime = -1;
};

// Submission limits an administrator set for one user, replacing the server-wide ones for them
// (server/quota.h), as JSON ({"rate": .., "burst": .., "max_waiting": ..}); "" = none.
struct UserLimitsRecord {
  std::string user;
  std::string limits;
};

struct AuditEntry {
  std::int64_t id = 0;  // assigned by the store
  Time time = 0;
  std::string actor;
  std::string path;
  std::string field;
  std::string old_value;
  std::string new_value;
  std::int64_t actor_token = 0;  // the id of the token that acted (0: before tokens were kept)
};

struct NodeRecord {
  std::string name;
  std::string cluster;
  std::string model;
  int gpus = 8;
  std::string block;
  std::string labels_json = "{}";
  std::string health = "healthy";  // healthy, unhealthy, draining, down
  std::string health_reason;
  bool cordoned = false;
  bool simulated = false;
  Time registered_at = 0;
  Time last_heartbeat = 0;
  // What the node's agent registered (docs/agent-protocol.md).
  std::string address;              // host or host:port its peers reach it at; "" if none
  std::string devices_json = "[]";  // one object per GPU
  std::string agent_json = "{}";    // version, backend, isolation
  bool timed_out = false;           // marked down by the server for silence (not by an operator)
};

// A change of a node's health or cordon, with its time: the history behind availability.
struct NodeHealthEvent {
  std::string node;
  Time time = 0;
  std::string health;  // healthy, unhealthy, draining, down; "removed" when the node goes away
  bool cordoned = false;
  int gpus = 0;
  std::string reason;
};

// An inference service (server/service.h): replicated jobs the server keeps alive. `spec_json`
// is the validated request (the replicas' job template, min/max replicas, readiness, autoscaling);
// `state_json` what the server decided since (the replicas it wants, recent scale decisions).
// A deleted service's row stays, removed, until a service of the same name replaces it.
struct ServiceRecord {
  std::string name;
  std::string owner;
  std::string budget;
  std::string spec_json = "{}";
  std::string state_json = "{}";
  Time created = 0;
  Time updated = 0;
  bool removed = false;
};

// A job's measured use, summed from its agents' telemetry posts. One row per run and one with
// run 0 for the whole job. Means are kept as sums weighted by samples (or GPU-seconds).
struct TelemetryRecord {
  JobId job = 0;
  int run = 0;  // 0: every run of the job
  std::string budget;
  std::int64_t samples = 0;
  double seconds = 0;           // wall-clock seconds measured (a gang's nodes averaged)
  double gpu_seconds = 0;       // GPU-seconds measured: seconds x GPUs held on the node
  double used_gpu_seconds = 0;  // GPU-seconds x measured use (0..1)
  double util_sum = 0;          // sum of (mean use % x samples)
  double util_peak = 0;         // percent
  std::int64_t mem_peak_mib = 0;
  std::int64_t mem_total_mib = 0;
  double cpu_sum = 0;          // sum of (mean CPU % x samples)
  double io_sum = 0;           // sum of (mean I/O wait % x samples)
  double idle_seconds = 0;     // of `seconds`, those in intervals its GPUs were idle
  double starved_seconds = 0;  // ... those in which its input pipeline starved them
  Time first_time = 0;
  Time last_time = 0;
  double util_mean() const { return samples > 0 ? util_sum / static_cast<double>(samples) : 0; }
  double cpu_mean() const { return samples > 0 ? cpu_sum / static_cast<double>(samples) : 0; }
  double io_mean() const { return samples > 0 ? io_sum / static_cast<double>(samples) : 0; }
};

struct TokenRecord {
  std::int64_t id = 0;  // assigned by the store
  std::string hash;     // hex SHA-256 of the secret; the secret itself is never stored
  std::string name;
  std::string role;     // admin, manager, user, agent
  std::string subject;  // the user name the token acts as
  std::string scope;    // manager: budget path; agent: node name
  Time created = 0;
  Time revoked = 0;  // 0: valid
};

struct LedgerEntry {
  std::int64_t id = 0;  // assigned by the store
  JobId job = 0;
  std::string owner;
  std::string budget;
  std::string cluster;
  Time start = 0;
  Time end = 0;
  std::int64_t milli = 0;  // milli-GPUs held over [start, end)
  bool allocated = false;
  std::int64_t milli_seconds() const { return milli * (end - start); }
};

namespace op {
// A new job, with its creation event: job_events lists ("" -> job.state, job.reason, at
// job.submit_time) first. Fails with field "idempotency_key" if (owner, key) exists.
struct InsertJob {
  JobRecord job;
};
struct UpdateJob {
  JobRecord job;
};
struct AddEvent {
  JobEvent event;
};
struct PutBudget {
  BudgetRecord budget;
};
struct AddAudit {
  AuditEntry entry;
};
struct PutNode {
  NodeRecord node;
};
struct TouchNode {
  std::string name;
  Time at = 0;
};
struct PutToken {
  TokenRecord token;
};
struct RevokeToken {
  std::int64_t id = 0;
  Time at = 0;
};
struct AddLedger {
  LedgerEntry entry;
};
struct AddNodeHealth {
  NodeHealthEvent event;
};
// Adds a telemetry interval to the job's run row and to its whole-job row (run 0): counts and
// sums add up, peaks take the maximum, first_time the minimum and last_time the maximum.
struct AddTelemetry {
  TelemetryRecord delta;  // run: the run it is about
};
// Sets a user's own submission limits; empty `limits` removes them.
struct PutUserLimits {
  UserLimitsRecord record;
};
// Creates or replaces a service (by name).
struct PutService {
  ServiceRecord service;
};
}  // namespace op

using WriteOp =
    std::variant<op::InsertJob, op::UpdateJob, op::AddEvent, op::PutBudget, op::AddAudit,
                 op::PutNode, op::TouchNode, op::PutToken, op::RevokeToken, op::AddLedger,
                 op::AddNodeHealth, op::AddTelemetry, op::PutUserLimits, op::PutService>;
using WriteBatch = std::vector<WriteOp>;

struct JobQuery {
  std::vector<std::string> states;          // any of; empty = all
  std::string owner;                        // exact; empty = any
  std::string budget;                       // this budget and its subtree; empty = any
  bool budget_subtree = true;               // false: `budget` alone (a leaf has no subtree)
  std::vector<std::string> budgets_within;  // restrict to these subtrees (access control)
  std::string owner_or_within;              // with budgets_within: the owner's jobs are visible too
  JobId after = 0;  // paging cursor: ids after (asc) / before (desc) this one
  bool descending = false;
  int limit = 100;
};

class Store {
 public:
  virtual ~Store() = default;

  // Applies every op of the batch in one transaction, or none of them; returns once durable.
  virtual core::Status write(WriteBatch batch) = 0;
  // The same write; `done` is called once with its result when it is durable or refused, on the
  // store's own thread (or on the caller's, at once): it must not block or throw, and must not
  // write to the store. Overrides keep `done`: NOLINTNEXTLINE(performance-unnecessary-value-param)
  virtual void write_async(WriteBatch batch, std::function<void(core::Status)> done) {
    done(write(std::move(batch)));
  }

  virtual std::optional<JobRecord> job(JobId id) const = 0;
  virtual std::optional<JobRecord> job_by_key(const std::string& owner,
                                              const std::string& key) const = 0;
  virtual std::vector<JobRecord> jobs(const JobQuery& q) const = 0;
  // Jobs not in a terminal state, in id order (to rebuild the scheduler after a restart).
  virtual std::vector<JobRecord> active_jobs() const = 0;
  virtual std::vector<JobEvent> job_events(JobId id) const = 0;
  // Jobs submitted before `to` that had not ended by `from` (ended: updated_at of a terminal
  // state), in id order: the demand behind the impact metric.
  virtual std::vector<JobRecord> jobs_overlapping(Time from, Time to) const = 0;
  virtual JobId max_job_id() const = 0;
  virtual std::int64_t count_jobs() const = 0;

  virtual std::vector<BudgetRecord> budgets() const = 0;
  virtual std::vector<AuditEntry> audit(const std::string& path_prefix, int limit) const = 0;
  // The users with submission limits of their own, by name.
  virtual std::vector<UserLimitsRecord> user_limits() const = 0;
  // Every service not removed, by name.
  virtual std::vector<ServiceRecord> services() const = 0;

  virtual std::vector<NodeRecord> nodes() const = 0;
  virtual std::optional<NodeRecord> node(const std::string& name) const = 0;

  virtual std::optional<TokenRecord> token_by_hash(const std::string& hash) const = 0;
  virtual std::vector<TokenRecord> tokens() const = 0;

  // Ledger entries overlapping [from, to).
  virtual std::vector<LedgerEntry> ledger(Time from, Time to) const = 0;
  virtual std::vector<LedgerEntry> ledger_for_job(JobId id) const = 0;

  // Node health changes with time < to, in time order (the state at `from` is the last change
  // before it).
  virtual std::vector<NodeHealthEvent> node_health(Time to) const = 0;

  // The telemetry rows of one job (its runs and run 0), in run order.
  virtual std::vector<TelemetryRecord> telemetry(JobId id) const = 0;
  // The whole-job rows (run 0) of jobs measured at some time in [from, to).
  virtual std::vector<TelemetryRecord> telemetry_between(Time from, Time to) const = 0;

  // The schema version the store is at.
  virtual int schema_version() const = 0;
};

}  // namespace allot::store
