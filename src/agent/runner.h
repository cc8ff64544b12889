// Runs jobs as real process trees, isolated from each other, and stops them.
//
// Each run is started through a small shim (`allot agent-shim`, a fresh single-threaded process)
// that puts itself in the run's own session / process group and, where the machine allows, its
// own cgroup v2 (memory.max and cpu.max from the job's limits; a cgroup v1 devices rule set where
// that controller is mounted, so the job can open only its GPUs' /dev/nvidiaN); without cgroup v2
// controllers it falls back to rlimits and says so. The shim redirects the job's stdout/stderr to
// per-run log files, waits for it and writes its exit status to the run's state directory. So a
// run survives a restart of the agent, and the restarted agent recovers it from the state
// directory (recover()), exit code included. The directory layout is in run_state.h; what each
// isolation mechanism does and needs is in docs/agent.md, "Running jobs".
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/accounts.h"
#include "core/status.h"
#include "core/types.h"

namespace allot::agent {

struct RunKey {
  core::JobId job = 0;
  int run = 0;
  auto operator<=>(const RunKey&) const = default;
};

struct LaunchSpec {
  RunKey key;
  std::vector<std::string> command;        // argv; command[0] looked up in PATH
  std::map<std::string, std::string> env;  // the job's; added to the allowlisted part of the
                                           // agent's environment (job_base_environment)
  // Empty: the owner's home when it runs as its owner, else the run's directory under state_dir.
  std::string workdir;
  std::string owner;            // the job's owner (its token's subject): whose account it runs as
  std::int64_t memory_mib = 0;  // 0: no limit
  double cpus = 0;              // 0: no limit
  std::vector<std::string> allowed_devices;  // e.g. /dev/nvidia3 (others of the GPU kind denied)
  std::vector<std::string> denied_devices;   // every GPU device node of this machine not allowed
  std::vector<std::string> gpu_uuids;  // its GPUs or MIG instances (a container's CDI devices)
  // Optional (see container_command.h):
  //   "podman run --rm --device={devices} --env={env} -w {workdir} {image} {command}"
  std::string container_template;
  std::string container_image;
};

enum class RunPhase : std::uint8_t {
  Running,
  Stopping,  // SIGTERM sent; SIGKILL at kill_at
  Exited,    // the exit status is known
};

struct RunStatus {
  RunKey key;
  RunPhase phase = RunPhase::Running;
  pid_t pid = 0;  // the job's process (its process group id)
  std::chrono::system_clock::time_point started;
  bool stop_requested = false;   // stop() was called: an exit now counts as "preempted"
  std::optional<int> exit_code;  // 128 + signal when killed by one; none: Exited, status unknown
  std::optional<int> signal;
  std::string error;  // why it could not start (exit 127), or why its exit status is unknown
  std::string stdout_path, stderr_path;
};

// What this machine lets the runner do (found once, when the Runner is made).
struct Isolation {
  std::string cgroup;          // cgroup v2 directory the runs are made under; "" = none
  bool memory_limit = false;   // by cgroup v2 memory.max
  bool memory_rlimit = false;  // by RLIMIT_AS instead (no memory controller)
  bool cpu_limit = false;      // by cgroup v2 cpu.max
  // Where device rules apply: the cgroup v1 devices directory, or the cgroup v2 one whose runs
  // get a device program; "" = GPU devices not isolated.
  std::string devices_cgroup;
  std::string description;     // what isolation() says
  bool jobs_as_owner = false;  // each job runs as its owner's account (RunnerOptions)
  // Why jobs do not get both cgroup v2 limits (memory and cpu); "" when they do.
  std::string cgroup_why_not;
};

struct RunnerOptions {
  std::string state_dir;    // one directory per run: <state_dir>/runs/<job>.<run>/
  std::string shim_binary;  // the allot binary (argv: agent-shim ...); default /proc/self/exe
  std::string cgroup_root;  // "" = autodetect a writable cgroup v2 directory; "none" = don't
  // The same for the cgroup v1 devices hierarchy; "bpf" = a device program (eBPF) on each
  // run's cgroup v2 directory instead (what "" chooses where there is no v1 devices controller).
  std::string devices_cgroup_root;
  // Without a cgroup v2 memory controller, memory is limited by RLIMIT_AS, which counts address
  // space: CUDA reserves far more of it than it uses, so a GPU job under RLIMIT_AS fails to
  // start. Jobs with GPUs therefore get no RLIMIT_AS unless this is set.
  bool rlimit_gpu_jobs = false;
  std::chrono::milliseconds default_grace{30000};
  // Start each job as its owner's Unix account (setgroups/setgid/setuid in the shim); the agent
  // must be root for it. Off: jobs run as the agent's own user.
  bool run_as_owner = false;
  AccountMap accounts;  // owner -> account (default: the same name)
  // Names of the agent's environment variables a job gets besides the allowlist (PATH, LANG,
  // LANGUAGE, LC_*, TZ; and HOME, USER, LOGNAME when jobs run as the agent's user).
  std::vector<std::string> pass_env;
  // Bytes of each of a run's stdout and stderr kept on the node (log_cap.h); <= 0: no cap.
  std::int64_t log_cap_bytes = 64LL << 20;
};

// Makes `dir` (which exists) 0700. Refused for a directory shared with others — sticky (/tmp) or
// another user's — which must not be closed to them: give the agent a directory of its own.
core::Status make_private_dir(const std::string& dir);

// The part of the agent's environment (`environ`-style "NAME=value" entries) a job gets: the
// allowlist above, never anything else (the agent's token, its configuration, a proxy's password).
std::vector<std::string> job_base_environment(char** agent_env, const RunnerOptions& options);

// The signal a job names in ALLOT_STOP_SIGNAL to be warned with before a stop with notice: USR1,
// USR2, INT or HUP (with or without SIG); 0 for anything else (the notice file only).
int stop_signal(const std::string& name);

class Runner {
 public:
  explicit Runner(RunnerOptions options);
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // What isolation this machine allows, in words ("cgroup v2 at /sys/fs/cgroup/allot (memory,
  // cpu), devices: cgroup v1" or "process group + rlimits: no cgroup v2 memory controller").
  std::string isolation() const;
  const Isolation& capabilities() const;

  // Starts a run; fails if the key is already running here.
  core::Result<RunStatus> launch(const LaunchSpec& spec);
  // SIGTERM to the run's whole tree now, SIGKILL once `grace` has passed (see poll()). With a
  // `notice` (an interactive job's stop, docs/agent.md, step 3), a warning first: the file
  // $ALLOT_STOP_NOTICE is written with the deadlines and the job's ALLOT_STOP_SIGNAL, if it set
  // one, is sent; SIGTERM follows once the notice has passed, SIGKILL `grace` after that.
  void stop(const RunKey& key, std::chrono::milliseconds grace,
            std::chrono::milliseconds notice = std::chrono::milliseconds(0));
  // SIGKILL now (fencing: the server no longer believes in this run). Counts as a stop.
  void kill(const RunKey& key);
  // Reaps exits, sends due SIGKILLs; returns every run it knows, in key order.
  std::vector<RunStatus> poll();
  // After a restart of the agent: runs found in state_dir (running ones keep running).
  std::vector<RunStatus> recover();
  // The exit was reported and acknowledged: drop the run's state (its logs stay).
  void forget(const RunKey& key);
  // Removes the directories (logs included) of forgotten runs untouched for longer than `keep`;
  // returns how many. Runs the runner still knows are never touched.
  int prune(std::chrono::seconds keep);

  // Process ids of a running run's tree (for CPU / I/O telemetry).
  std::vector<pid_t> processes(const RunKey& key) const;
  // The same for every running run at once (one scan of /proc where there is no cgroup).
  std::map<RunKey, std::vector<pid_t>> processes() const;
  // A running run's cgroup v2 directory ("" where it has none: no cgroup v2 on this machine).
  std::string cgroup_dir(const RunKey& key) const;

  // A readiness check of a run (a service replica's ready_command, docs/agent.md): spec.command
  // started as the run itself is, through the shim (as the same account, in the same workdir,
  // with the same environment, limits and device rules, in a cgroup of its own beside the
  // run's), its output capped at 4 KiB in the run's directory (ready/). At most one per run;
  // refused while one runs. No container: a containerised replica's check runs on the node.
  core::Status start_check(const LaunchSpec& spec);
  struct CheckOutcome {
    bool ok = false;     // exited 0
    std::string reason;  // why not (bounded): its exit and the tail of its stderr
  };
  // The check's outcome once it has ended (nullopt while it runs, and when none was started);
  // a check running longer than `timeout` is killed and fails.
  std::optional<CheckOutcome> check_outcome(const RunKey& key, std::chrono::milliseconds timeout);
  // Kills a run's check in flight, if any (its run stopped, or the check is no longer wanted).
  void cancel_check(const RunKey& key);

 private:
  struct Impl;
  Impl* impl_;
};

// The shim's entry point: argv as given to `allot agent-shim`. Never returns on success paths.
int shim_main(int argc, char** argv);

}  // namespace allot::agent
