// Inference services (docs/policy.md §15): a named, long-running, replicated job the server keeps
// alive. Each replica is an ordinary job the controller submits from the service's job template:
// the first min_replicas are *protected* (they ask the service's contract as their minimum
// runtime, so a funded budget runs them allocated and nothing preempts them inside it), the rest
// are *elastic* (minimum runtime 0: unallocated, preemptible). The autoscaler moves the number of
// replicas wanted between min and max on GPU memory pressure and on a load figure the service
// reports, with hysteresis (two watermarks) and a cool-down; each decision is kept with its reason.
//
// This file holds the request's validation and canonical form, and the scale decision, which is
// a pure function of the figures it is given.
#pragma once

#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/autoscale.h"
#include "core/status.h"
#include "core/types.h"
#include "server/job_spec.h"

namespace allot::server {

struct ServiceLimits {
  int max_replicas = 64;  // per service
  std::size_t max_services = 256;
  std::size_t max_decisions = 20;  // kept per service, newest last
  std::size_t max_ready = 1024;    // readiness path or command, characters
};

using core::Autoscale;
using core::ScaleDecision;
using core::ScaleSignals;

struct ServiceSpec {  // NOLINT(bugprone-exception-escape): misreads nlohmann::json's noexcept move
  std::string name;
  std::string budget;
  int min_replicas = 1;
  int max_replicas = 1;
  core::Duration contract = 0;  // protected replicas' minimum runtime
  // The readiness check (docs/policy.md §15), at most one: an HTTP path the replica answers 2xx
  // on when ready, on 127.0.0.1:ready_port (also in its ALLOT_SERVICE_PORT), or a command the
  // node's agent runs as the replica's own account, in its sandbox, exit 0 meaning ready.
  std::string ready_path;
  int ready_port = 0;
  std::vector<std::string> ready_command;
  // A replica with a check that has not once been ready this long after its placement is
  // restarted.
  core::Duration ready_timeout = 600;
  Autoscale autoscale;
  // The replicas' canonical job spec (server/job_spec.h), with "min_runtime" left to the tier.
  nlohmann::json job;
};

// A service's request: {"name", "budget", "job": {a job body without name or budget},
// "min_replicas", "max_replicas", "ready_path" and "ready_port" | "ready_command",
// "ready_timeout", "autoscale": {...}}. Unknown
// fields are refused; every error names its field ("job.command", "autoscale.memory_high").
// The job's "min_runtime" is the protected replicas' contract (default: the policy's maximum).
core::Result<ServiceSpec> parse_service_request(
    const nlohmann::json& body, const core::GpuCatalog& catalog,
    const std::map<std::string, core::ClusterId>& clusters, const core::BudgetTree& budgets,
    const core::PolicyConfig& policy, const std::vector<NodeShape>& nodes,
    const ServiceLimits& limits = {});

nlohmann::json service_to_json(const ServiceSpec& s);
// The canonical JSON back (as the store keeps it).
core::Result<ServiceSpec> service_from_json(const nlohmann::json& j);

// Checks new min/max replicas against a spec; the error names the field.
core::Status check_replicas(int min_replicas, int max_replicas, const ServiceLimits& limits = {});

// The canonical job spec of one replica: the template with the tier's minimum runtime and the
// service's name ("service") and the replica's tier ("service_tier": protected or elastic), also
// in its environment (ALLOT_SERVICE, ALLOT_SERVICE_TIER), and its readiness check ("ready":
// {"command"} or {"path", "port"}; the port also in ALLOT_SERVICE_PORT), which the node's agent
// is given with the replica's assignment.
nlohmann::json replica_job(const ServiceSpec& s, bool protected_tier);

// The readiness check a replica's canonical spec carries (its "ready" object), if any.
bool has_ready_check(const nlohmann::json& replica_spec);

// One scale decision (core/autoscale.h), as `allot serve show` lists it.
nlohmann::json decision_to_json(const ScaleDecision& d);

// What the server decided for a service since its creation: kept with the service (state_json).
struct ServiceState {
  int desired = 0;  // replicas wanted, between min and max
  core::Time last_scale = 0;
  std::deque<ScaleDecision> decisions;  // newest last
  // A rolling restart in progress: the replicas it set out to replace (those that have ended
  // since are left in: job ids are never reused). Kept so that a restarted server finishes it.
  std::vector<core::JobId> replacing;
};
nlohmann::json state_to_json(const ServiceState& s);
ServiceState state_from_json(const nlohmann::json& j);
// Appends a decision (dropping the oldest beyond limits.max_decisions) and applies it.
void record_decision(ServiceState& s, ScaleDecision d, const ServiceLimits& limits = {});

// The next decision for the service (core::scale_decision with its bounds and state).
std::optional<ScaleDecision> scale_decision(const ServiceSpec& spec, const ServiceState& state,
                                            const ScaleSignals& sig, core::Time now);

}  // namespace allot::server
