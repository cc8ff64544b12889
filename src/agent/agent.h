// The node agent: one per GPU node. It discovers the node's GPUs, registers them with the server,
// and then, on one loop thread, keeps the node's processes equal to the server's assignments
// (reconcile.h), reports what started, exited and stopped, ships logs, sends health verdicts and
// telemetry, and fences itself: when it cannot reach the server for longer than the lease, it
// stops every job, so that a job the server moves elsewhere never runs twice
// (docs/agent-protocol.md).
//
// The agent's own state (what it reported, log offsets, the last contact) lives in its state
// directory beside the runner's, so an agent killed and restarted picks up its runs where they
// are.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/gpu_backend.h"
#include "agent/health.h"
#include "agent/job_env.h"
#include "agent/protocol.h"
#include "agent/runner.h"
#include "agent/server_client.h"
#include "agent/telemetry.h"
#include "agent/watcher.h"

namespace allot::agent {

struct AgentOptions {
  ServerAddress server;
  std::string node;  // the node's name; the token's scope
  std::string cluster = "default";
  std::string block;
  std::string address;  // where gang peers reach this node (default: the node name)
  std::map<std::string, std::string> labels;
  std::string state_dir;  // required
  std::string dev_dir = "/dev";
  std::chrono::milliseconds poll{500};  // assignments (unless watched) and reports
  // How long each watch on the assignments asks the server to hold it (agent/watcher.h);
  // 0: no watch, the loop polls.
  std::chrono::seconds watch{25};
  std::chrono::milliseconds sample{1000};  // GPU telemetry samples
  std::chrono::milliseconds heartbeat{5000};
  std::chrono::milliseconds telemetry{10000};
  std::chrono::milliseconds health_script_every{60000};
  std::chrono::milliseconds lease_expiry_grace{5000};  // SIGTERM..SIGKILL when the lease runs out
  HealthThresholds health;
  // Forgotten runs' directories (their local logs: the server has a copy) go after this long.
  std::chrono::hours keep_run_logs{72};
  std::string container_template;
  RunnerOptions runner;                         // state_dir defaults to state_dir
  std::function<void(const std::string&)> log;  // default: stderr, one line per event
};

class Agent {
 public:
  Agent(AgentOptions options, std::unique_ptr<GpuBackend> backend);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Discovers the GPUs, recovers runs from the state directory and starts the loop thread. It
  // registers with the server (retrying) from the loop, so it starts while the server is away.
  core::Status start();
  // Ends the loop. kill_runs: stop every job first (SIGTERM, grace, SIGKILL), as `allot up` does
  // on exit; otherwise they keep running and a restarted agent recovers them.
  void stop(bool kill_runs = false);
  // The same without waiting: the loop ends on its own (stop() then waits for it).
  void request_stop(bool kill_runs = false);

  const std::vector<GpuDevice>& devices() const { return devices_; }
  std::string isolation() const;
  bool registered() const { return registered_; }

 private:
  struct RunRecord {
    RunKey key;
    std::vector<int> gpus;
    int gpu_milli = 1000;            // its part of each GPU (below 1000: a fraction)
    std::vector<std::string> uuids;  // GPU or MIG devices it was given
    bool started_reported = false;
    bool fenced = false;      // killed because the server no longer lists it: nothing to report
    bool lease_lost = false;  // stopped because the lease ran out: reported lost
    bool launch_failed = false;
    bool error_logged = false;  // the runner's reason for an odd exit is in the stderr log
    std::string launch_error;
    std::map<std::string, std::int64_t> shipped;  // stream -> bytes the server has
  };

  void loop();
  void step();
  void say(const std::string& line);
  bool try_register();
  void sample_gpus();
  void fetch_and_reconcile();
  void restate_started(const Assignments& a);
  // Dynamic MIG (agent_mig.cpp; docs/agent-protocol.md, "mig_layouts"): re-partitions each GPU of
  // the answer's layouts that no run here holds, then discovers and registers again, so that the
  // server learns the instances made; before any run of the same answer starts.
  void apply_mig_layouts(const Assignments& a);
  // Discovers the GPUs again (after a re-partition); false, to be retried, when the backend fails.
  bool rediscover();
  void reconcile_with(const Assignments& a);
  void launch(const Assignment& a);
  // What the runner starts for an assignment: the run itself, or (with another command) its
  // readiness check, which runs as the run does.
  LaunchSpec launch_spec(const Assignment& a, const DeviceChoice& d) const;
  // Service replicas' readiness (docs/agent.md): starts each due check (one in flight per run),
  // takes the results; restate_ready forgets what the server no longer knows.
  void check_readiness();
  void restate_ready(const Assignments& a);
  void ship_logs();
  void send_reports();
  void send_heartbeat();
  void send_telemetry();
  void enforce_lease();
  void contact();  // a successful exchange with the server
  void fail_contact(const Reply& r, const std::string& what);

  void load_state();
  void save_record(const RunRecord& r) const;
  std::filesystem::path record_path(const RunKey& k) const;
  void drop_record(const RunKey& k);
  void forget_run(const RunKey& k);
  void add_done(const RunKey& k);
  void take_lease(const nlohmann::json& reply);
  std::string logs_url(const RunKey& k, const std::string& stream, std::int64_t offset,
                       bool final) const;

  AgentOptions o_;
  std::unique_ptr<GpuBackend> backend_;
  std::unique_ptr<Runner> runner_;
  std::unique_ptr<ServerClient> client_;
  std::unique_ptr<AssignmentWatcher> watcher_;
  std::optional<Assignments> assigned_;  // the last assignments read (a watch reuses them)
  std::mutex wake_mu_;
  std::condition_variable wake_;  // the watcher has news: the loop steps now
  bool news_ = false;             // guarded by wake_mu_
  std::vector<GpuDevice> devices_;
  std::chrono::steady_clock::time_point started_;

  struct ReadyProbe {
    std::optional<std::future<Runner::CheckOutcome>> http;  // an HTTP check in flight
    bool command = false;  // a ready_command in flight (the runner holds it)
    std::chrono::steady_clock::time_point next_at{};
    std::optional<bool> result;  // the latest check's
    std::string reason;          // its failure
    std::optional<bool> sent;    // what the server was told and answered
  };
  std::map<RunKey, ReadyProbe> probes_;
  // HTTP checks of runs that ended meanwhile: awaited without blocking the loop.
  std::vector<std::future<Runner::CheckOutcome>> orphans_;

  // The last answer's MIG layouts, acted on at mig_orders_at_: the same again within a while are
  // not acted on again (the server repeats them until it has the layout achieved).
  std::vector<MigLayoutOrder> mig_orders_;
  std::chrono::steady_clock::time_point mig_orders_at_{};
  bool rediscover_ = false;  // the GPUs were re-partitioned: discover before registering

  std::set<RunKey> waiting_;  // launches held back while their GPUs are still held (said once)
  std::map<RunKey, RunRecord> records_;
  std::map<RunKey, RunStatus> status_;  // from the last runner poll
  std::set<RunKey> done_;               // finished and acknowledged: never launched again
  std::vector<Report> lost_;            // to report
  core::Result<std::vector<GpuSample>> last_sample_{core::Error{"gpus", "not sampled yet"}};
  TelemetryAggregator telemetry_;
  std::unique_ptr<HealthMonitor> health_;  // sees every sample (XIDs come once)
  HealthVerdict script_verdict_;
  std::chrono::steady_clock::time_point next_sample_{}, next_heartbeat_{}, next_telemetry_{},
      next_script_{}, next_prune_{};

  std::atomic<bool> registered_{false};
  bool reachable_ = true;  // for logging transitions only
  std::string last_said_;
  int lease_seconds_ = 30;
  std::int64_t last_contact_ = 0;  // system clock seconds; persisted
  std::int64_t last_contact_saved_ = 0;

  std::atomic<bool> stopping_{false};
  std::atomic<bool> kill_on_stop_{false};
  std::thread thread_;
};

// What `--backend` names: "auto" (NVML if it loads and finds a GPU, else an error saying so),
// "nvml", or "fake:PATH" (a YAML node description; `node` names the fake GPUs' UUIDs).
core::Result<std::unique_ptr<GpuBackend>> make_backend(const std::string& spec,
                                                       const std::string& node);

}  // namespace allot::agent
