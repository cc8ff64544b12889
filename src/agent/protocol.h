// The agent's side of docs/agent-protocol.md: what the server's answers mean (parsed and checked:
// an agent trusts nothing it is sent blindly) and the bodies the agent sends.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/gpu_backend.h"
#include "agent/runner.h"
#include "agent/telemetry.h"
#include "core/status.h"

namespace allot::agent {

// A service replica's readiness check (docs/agent-protocol.md): a command run like the replica
// (exit 0: ready), or an HTTP GET of 127.0.0.1:port/path (2xx: ready); every interval, each
// check given at most timeout.
struct ReadyCheck {
  std::vector<std::string> command;
  std::string path;
  int port = 0;
  int interval_seconds = 3;
  int timeout_seconds = 5;
};

// One entry of `run`: what should run on this node.
struct Assignment {
  RunKey key;
  std::string state;  // starting, running
  std::vector<int> gpus;
  int gpu_milli = 1000;
  // The profile of the MIG instance the scheduler counted the run on ("" none: a whole or shared
  // GPU, or a server older than profiles): the agent gives it a free instance of that profile.
  std::string mig_profile;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string workdir;
  std::int64_t memory_mib = 0;
  double cpus = 0;
  std::string container;
  std::string owner, budget, name, kind;
  bool resumable = false;
  int grace_seconds = 30;
  int rank = 0;
  std::vector<std::string> nodes;
  std::string rendezvous;  // host:port
  std::optional<ReadyCheck> ready_check;
  std::optional<bool> ready;  // what the server knows of the run's readiness (none: nothing)
};

struct StopOrder {
  RunKey key;
  int grace_seconds = 30;
  // > 0: warn the job first and send SIGTERM only this long after (an interactive job's stop;
  // docs/agent-protocol.md).
  int notice_seconds = 0;
};

// One entry of `mig_layouts`: the MIG instances the scheduler wants GPU `gpu` split into
// (docs/agent-protocol.md). The agent applies it through its backend when no run of its own holds
// the GPU, then registers again so that the server learns the instances actually made.
struct MigLayoutOrder {
  int gpu = 0;
  // GPU-instance profiles ("1g.18gb", "3g.71gb"), one compute instance spanning each; empty: the
  // GPU whole, MIG mode off.
  std::vector<std::string> profiles;
  bool operator==(const MigLayoutOrder&) const = default;
};

struct Assignments {
  std::vector<Assignment> run;
  std::vector<StopOrder> stop;
  std::vector<MigLayoutOrder> mig_layouts;  // none from a server older than dynamic MIG
  int lease_seconds = 30;
  std::int64_t server_time = 0;
};

core::Result<Assignments> parse_assignments(const nlohmann::json& body);

// What the agent tells the server about a run.
struct Report {
  Report() = default;
  Report(RunKey k, std::string ev, std::optional<int> code = {}, std::optional<int> sig = {})
      : key(k), event(std::move(ev)), exit_code(code), signal(sig) {}
  RunKey key;
  std::string event;  // started, exited, preempted, lost
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::optional<bool> ready;  // event "readiness": the latest check's result
  std::string reason;         // with ready false: why
};

struct Registration {
  std::string name, cluster, block, address;
  std::map<std::string, std::string> labels;
  std::vector<GpuDevice> devices;  // all of one model
  std::string backend, isolation, version;
  // What isolation the node achieved, reported apart from the description so that operators
  // (GET /nodes, `allot nodes`) can tell nodes apart without parsing prose.
  bool jobs_as_owner = false;
  bool cgroup_limits = false;        // memory and cpu limits by cgroup v2
  std::string cgroup_why_not;        // when not
  std::string gpu_devices = "none";  // none | cgroup
};

// The body of POST /nodes. Fails when the node has no GPU or GPUs of several models.
core::Result<nlohmann::json> registration_body(const Registration& r);
nlohmann::json reports_body(const std::vector<Report>& reports);
nlohmann::json telemetry_body(std::int64_t time, const std::vector<GpuSample>& gpus,
                              const std::vector<JobTelemetry>& jobs);

}  // namespace allot::agent
