// The runner: starts each run through the shim (shim.cpp) with posix_spawn, follows it through
// the records the shim writes in the run's directory (run_state.h), signals its whole tree to
// stop it, and finds the runs again after the agent restarts.
#include "agent/runner.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "agent/cgroup.h"
#include "agent/container_command.h"
#include "agent/proc.h"
#include "agent/run_state.h"
#include "agent/spawn.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it to us

namespace allot::agent {
namespace {

namespace fs = std::filesystem;

// How long launch() waits for the shim to say the job runs (or could not start).
constexpr auto kLaunchTimeout = std::chrono::seconds(10);

std::string run_name(const RunKey& k) {
  return std::to_string(k.job) + "." + std::to_string(k.run);
}

std::optional<RunKey> parse_run_name(const std::string& name) {
  const std::size_t dot = name.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == name.size()) return std::nullopt;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (i != dot && (name[i] < '0' || name[i] > '9')) return std::nullopt;
  }
  RunKey k;
  k.job = std::stoull(name.substr(0, dot));
  k.run = std::stoi(name.substr(dot + 1));
  return k;
}

// Names this agent's cgroups apart from another agent's on the same machine (tests run many).
std::string instance_of(const std::string& state_dir) {
  std::error_code ec;
  const std::string path = fs::absolute(state_dir, ec).lexically_normal().string();
  std::uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : path) h = (h ^ c) * 16777619u;
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", h);
  return std::string("agent-") + buf;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "/proc/self/exe";
}

std::string tail_of(const std::string& path, std::size_t bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  const off_t size = lseek(fd, 0, SEEK_END);
  const off_t from = size > static_cast<off_t>(bytes) ? size - static_cast<off_t>(bytes) : 0;
  std::string out(static_cast<std::size_t>(size - from), '\0');
  const ssize_t n = pread(fd, out.data(), out.size(), from);
  close(fd);
  out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool has_gpus(const LaunchSpec& spec) {
  auto cuda = spec.env.find("CUDA_VISIBLE_DEVICES");
  return !spec.allowed_devices.empty() || !spec.gpu_uuids.empty() ||
         (cuda != spec.env.end() && !cuda->second.empty());
}

std::string describe(const CgroupPlan& p, const Isolation& iso, bool rlimit_gpu_jobs) {
  const std::string rlimit =
      std::string("memory by RLIMIT_AS") + (rlimit_gpu_jobs ? "" : " for jobs without GPUs");
  std::string d;
  if (!p.v2_parent.empty()) {
    d = "cgroup v2 at " + p.v2_parent;
    if (iso.memory_limit && iso.cpu_limit) {
      d += " (memory, cpu)";
    } else if (iso.cpu_limit) {
      d += " (cpu; " + rlimit + ")";
    } else if (iso.memory_limit) {
      d += " (memory; no CPU limit)";
    } else {
      d += " (no memory or cpu controller: " + rlimit + ", no CPU limit)";
    }
  } else {
    d = "process group + rlimits: " + p.v2_note + " (" + rlimit + ", no CPU limit)";
  }
  if (!p.devices_parent.empty()) {
    d += ", devices: cgroup v1 at " + p.devices_parent;
  } else if (p.devices_bpf) {
    d += ", devices: cgroup v2 device program (eBPF) at " + p.v2_parent;
  } else {
    d += ", devices: not isolated (" + p.devices_note + ")";
  }
  return d;
}

}  // namespace

int stop_signal(const std::string& name) {
  const std::string n = name.rfind("SIG", 0) == 0 ? name.substr(3) : name;
  if (n == "USR1") return SIGUSR1;
  if (n == "USR2") return SIGUSR2;
  if (n == "INT") return SIGINT;
  if (n == "HUP") return SIGHUP;
  return 0;
}

core::Status make_private_dir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return core::Error{"state_dir", dir + ": " + std::strerror(errno)};
  }
  if ((st.st_mode & S_ISVTX) != 0 || st.st_uid != ::geteuid()) {
    return core::Error{"state_dir", dir + " is shared with other users (" +
                                        ((st.st_mode & S_ISVTX) ? "sticky" : "another user's") +
                                        "): give the agent a directory of its own"};
  }
  if ((st.st_mode & 07777) != 0700 && ::chmod(dir.c_str(), 0700) != 0) {
    return core::Error{"state_dir", "cannot make " + dir + " private: " + std::strerror(errno)};
  }
  return core::ok_status();
}

std::vector<std::string> job_base_environment(char** agent_env, const RunnerOptions& options) {
  std::vector<std::string> out;
  for (char** e = agent_env; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (!eq) continue;
    const std::string name(*e, static_cast<std::size_t>(eq - *e));
    // Whose home and name a job sees follows whose account it runs as (the shim sets them then).
    const bool identity = name == "HOME" || name == "USER" || name == "LOGNAME";
    const bool allowed =
        name == "PATH" || name == "LANG" || name == "LANGUAGE" || name == "TZ" ||
        name.rfind("LC_", 0) == 0 || (identity && !options.run_as_owner) ||
        std::find(options.pass_env.begin(), options.pass_env.end(), name) != options.pass_env.end();
    if (allowed) out.emplace_back(*e);
  }
  return out;
}

struct Runner::Impl {
  struct Run {
    RunStatus status;
    RunFiles files;
    std::uint64_t job_start = 0;
    pid_t shim_pid = 0;
    std::uint64_t shim_start = 0;
    bool our_child = false;  // spawned by this Runner, so waitpid() reaps it
    std::string cgroup, devices_cgroup;
    std::int64_t kill_at_ms = 0;  // when SIGKILL is due; 0 = not stopping
    std::int64_t term_at_ms = 0;  // when SIGTERM is due after a warning; 0 = none due
    int notice_signal = 0;        // the job's ALLOT_STOP_SIGNAL (0: the notice file only)
    bool killed = false;
  };

  // A readiness check in flight (start_check).
  struct Check {
    RunFiles files;
    pid_t shim_pid = 0;
    std::chrono::steady_clock::time_point started;
    bool killed = false;
  };

  RunnerOptions options;
  std::string shim;
  CgroupPlan plan;
  Isolation iso;
  mutable std::mutex mu;
  std::map<RunKey, Run> runs;
  std::map<RunKey, Check> checks;

  // SIGKILL to a check's processes (its session, its cgroup).
  static void kill_check(const Check& c) {
    if (auto p = read_pid_record(c.files)) {
      if (process_alive(p->job_pid, p->job_start)) ::kill(-p->job_pid, SIGKILL);
      if (!p->cgroup.empty()) kill_cgroup(p->cgroup);
      if (!p->devices_cgroup.empty()) kill_cgroup(p->devices_cgroup);
    }
  }
  // Kills a check and reaps its shim: given a moment to record the end and remove the check's
  // cgroups, then killed too.
  static void end_check(const Check& c) {
    kill_check(c);
    for (int i = 0; i < 300; ++i) {
      if (waitpid(c.shim_pid, nullptr, WNOHANG) == c.shim_pid) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(c.shim_pid, SIGKILL);
    waitpid(c.shim_pid, nullptr, 0);
  }

  std::string runs_dir() const { return options.state_dir + "/runs"; }

  // A run's tree: its cgroup's members where it has one, else its session's.
  std::vector<pid_t> members(const Run& r) const {
    if (!r.cgroup.empty()) return cgroup_members(r.cgroup);
    if (!r.devices_cgroup.empty()) return cgroup_members(r.devices_cgroup);
    if (r.status.pid <= 0) return {};
    return session_members({r.status.pid})[r.status.pid];
  }

  void signal_tree(const Run& r, int sig) const {
    // The process group first, while its leader is known to be this run's process; then each
    // member that left the group. A process gets the signal once: a TERM handler's own children
    // (a checkpoint writer, say) are not hit by a second TERM sent a moment later.
    const bool group = process_alive(r.status.pid, r.job_start);
    if (group) ::kill(-r.status.pid, sig);
    if (sig == SIGKILL && !r.cgroup.empty()) {
      kill_cgroup(r.cgroup);
    } else if (sig == SIGKILL && !r.devices_cgroup.empty()) {
      kill_cgroup(r.devices_cgroup);
    } else {
      for (pid_t pid : members(r)) {
        if (!group || getpgid(pid) != r.status.pid) ::kill(pid, sig);
      }
    }
  }

  void set_exit(Run& r, const ExitRecord& e) {
    r.status.phase = RunPhase::Exited;
    r.status.exit_code = e.exit_code;
    if (e.signal > 0) r.status.signal = e.signal;
    r.status.error = e.error;
  }

  // Brings one run's status up to date: its exit, a due SIGKILL.
  void refresh(Run& r) {
    if (r.status.phase == RunPhase::Exited) return;
    if (r.our_child) {
      int st = 0;
      if (waitpid(r.shim_pid, &st, WNOHANG) == r.shim_pid) r.our_child = false;
    }
    if (auto e = read_exit_record(r.files)) return set_exit(r, *e);
    const bool job_alive = process_alive(r.status.pid, r.job_start);
    const bool shim_alive = r.shim_pid > 0 && process_alive(r.shim_pid, r.shim_start);
    if (!job_alive && !shim_alive) {
      if (auto e = read_exit_record(r.files)) return set_exit(r, *e);  // written as it ended
      signal_tree(r, SIGKILL);  // whatever of the tree the shim could not clean up
      r.status.phase = RunPhase::Exited;
      r.status.error = "the shim ended without recording the exit status";
      return;
    }
    if (r.term_at_ms > 0 && epoch_ms() >= r.term_at_ms) {
      r.term_at_ms = 0;  // the warning's time is up
      write_stop_record(r.files, {r.kill_at_ms, 0});
      signal_tree(r, SIGTERM);
    }
    if (r.kill_at_ms > 0 && !r.killed && epoch_ms() >= r.kill_at_ms) {
      signal_tree(r, SIGKILL);
      r.killed = true;
    }
  }

  // `name`: of the run's cgroups (a readiness check's get their own); `log_cap`: bytes kept of
  // each output stream (<= 0: no cap).
  std::vector<std::string> shim_argv(const LaunchSpec& spec, const std::string& dir,
                                     const std::vector<std::string>& command,
                                     const std::string& name, std::int64_t log_cap) const {
    std::vector<std::string> a = {shim, "agent-shim", "--dir", dir};
    if (!spec.workdir.empty()) a.insert(a.end(), {"--workdir", spec.workdir});
    if (options.run_as_owner) {
      a.insert(a.end(),
               {"--user", options.accounts.account_for(spec.owner), "--owner", spec.owner});
    }
    if (log_cap > 0) a.insert(a.end(), {"--log-cap-bytes", std::to_string(log_cap)});
    if (!plan.v2_parent.empty()) a.insert(a.end(), {"--cgroup", plan.v2_parent + "/" + name});
    if (spec.memory_mib > 0) {
      if (iso.memory_limit) {
        a.insert(a.end(), {"--memory-mib", std::to_string(spec.memory_mib)});
      } else if (!has_gpus(spec) || options.rlimit_gpu_jobs) {
        a.insert(a.end(), {"--rlimit-as-mib", std::to_string(spec.memory_mib)});
      }
    }
    if (spec.cpus > 0 && iso.cpu_limit) a.insert(a.end(), {"--cpus", std::to_string(spec.cpus)});
    if (!plan.devices_parent.empty()) {
      a.insert(a.end(), {"--devices-cgroup", plan.devices_parent + "/" + name});
      for (const std::string& d : spec.denied_devices) a.insert(a.end(), {"--deny", d});
    } else if (plan.devices_bpf && !plan.v2_parent.empty()) {
      a.insert(a.end(), {"--device-filter", "bpf"});
      for (const std::string& d : spec.denied_devices) a.insert(a.end(), {"--deny", d});
    }
    a.emplace_back("--");
    a.insert(a.end(), command.begin(), command.end());
    return a;
  }

  // The job's environment: the allowlisted part of the agent's, with the spec's variables
  // replacing any of the same name.
  std::vector<std::string> environment(const std::map<std::string, std::string>& env) const {
    std::vector<std::string> out;
    for (std::string& e : job_base_environment(environ, options)) {
      if (env.count(e.substr(0, e.find('=')))) continue;
      out.push_back(std::move(e));
    }
    for (const auto& [name, value] : env) out.push_back(name + "=" + value);
    return out;
  }

  // What the shim recorded once the job ran.
  static void take(Run& r, const PidRecord& p) {
    r.status.pid = p.job_pid;
    r.job_start = p.job_start;
    r.shim_pid = p.shim_pid;
    r.shim_start = p.shim_start;
    r.cgroup = p.cgroup;
    r.devices_cgroup = p.devices_cgroup;
    r.status.started =
        std::chrono::system_clock::time_point(std::chrono::milliseconds(p.started_ms));
  }

  // Waits until the shim has recorded the job's start (or why it could not start).
  core::Status await_start(Run& r) {
    const auto deadline = std::chrono::steady_clock::now() + kLaunchTimeout;
    auto pause = std::chrono::microseconds(200);
    while (true) {
      if (auto p = read_pid_record(r.files)) {
        take(r, *p);
        refresh(r);
        return core::ok_status();
      }
      if (auto e = read_exit_record(r.files)) {
        set_exit(r, *e);
        return core::ok_status();
      }
      int st = 0;
      if (r.our_child && waitpid(r.shim_pid, &st, WNOHANG) == r.shim_pid) {
        r.our_child = false;
        if (read_pid_record(r.files) || read_exit_record(r.files)) continue;
        return core::Error{"shim", "the shim ended before starting the job: " +
                                       tail_of(r.files.path("shim.log"), 400)};
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(r.shim_pid, SIGKILL);
        return core::Error{"shim", "the shim did not start the job within 10 s"};
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(10000));
    }
  }

  Run load(const RunKey& key, const RunFiles& files) {
    Run r;
    r.files = files;
    r.status.key = key;
    r.status.stdout_path = files.path("stdout");
    r.status.stderr_path = files.path("stderr");
    if (auto p = read_pid_record(files)) take(r, *p);
    r.notice_signal = read_notice_signal(files);
    if (auto s = read_stop_record(files)) {
      r.status.stop_requested = true;
      r.status.phase = RunPhase::Stopping;
      r.kill_at_ms = s->kill_at_ms;
      r.term_at_ms = s->term_at_ms;
    }
    refresh(r);
    return r;
  }
};

Runner::Runner(RunnerOptions options) : impl_(new Impl) {
  impl_->options = std::move(options);
  if (impl_->options.state_dir.empty()) impl_->options.state_dir = ".";
  impl_->shim = impl_->options.shim_binary.empty() ? self_exe() : impl_->options.shim_binary;
  std::error_code ec;
  fs::create_directories(impl_->runs_dir(), ec);
  // Runs' records and logs are the agent's alone (docs/agent.md, "Files and their modes").
  for (const std::string& d : {impl_->options.state_dir, impl_->runs_dir()}) {
    (void)make_private_dir(d);  // a shared state_dir stays as it is; runs/ is always ours
  }
  const std::string instance = instance_of(impl_->options.state_dir);
  impl_->plan =
      plan_cgroups(impl_->options.cgroup_root, impl_->options.devices_cgroup_root, instance);
  Isolation& iso = impl_->iso;
  iso.cgroup = impl_->plan.v2_parent;
  iso.memory_limit = impl_->plan.memory;
  iso.memory_rlimit = !impl_->plan.memory;
  iso.cpu_limit = impl_->plan.cpu;
  iso.devices_cgroup = impl_->plan.devices_bpf ? impl_->plan.v2_parent : impl_->plan.devices_parent;
  iso.description = describe(impl_->plan, iso, impl_->options.rlimit_gpu_jobs);
  iso.jobs_as_owner = impl_->options.run_as_owner;
  if (iso.cgroup.empty()) {
    iso.cgroup_why_not = impl_->plan.v2_note.empty() ? "no cgroup v2" : impl_->plan.v2_note;
  } else if (!iso.memory_limit || !iso.cpu_limit) {
    iso.cgroup_why_not = std::string("cgroup v2 at ") + iso.cgroup + " without the " +
                         (!iso.memory_limit && !iso.cpu_limit ? "memory and cpu controllers"
                          : !iso.memory_limit                 ? "memory controller"
                                                              : "cpu controller");
  }
}

Runner::~Runner() {
  // Readiness checks end with it (a new agent starts its own).
  for (auto& [key, c] : impl_->checks) Impl::end_check(c);
  // The runs go on: a new Runner on the same state_dir recovers them. This agent's cgroup
  // directories go only if no run is left in them (rmdir fails otherwise).
  for (const std::string& dir : {impl_->plan.v2_parent, impl_->plan.devices_parent}) {
    if (!dir.empty()) rmdir(dir.c_str());
  }
  delete impl_;
}

std::string Runner::isolation() const {
  return impl_->iso.description;
}

const Isolation& Runner::capabilities() const {
  return impl_->iso;
}

core::Result<RunStatus> Runner::launch(const LaunchSpec& spec) {
  if (spec.command.empty()) return core::Error{"command", "empty"};
  if (spec.key.job == 0 || spec.key.run <= 0) {
    return core::Error{"run", "a run needs a job id and a run number from 1"};
  }
  const std::string what =
      "job " + std::to_string(spec.key.job) + " run " + std::to_string(spec.key.run);
  std::vector<std::string> command = spec.command;
  if (!spec.container_template.empty()) {
    ContainerJob c{spec.container_image, spec.gpu_uuids, spec.env,    spec.workdir,
                   spec.memory_mib,      spec.cpus,      spec.command};
    auto expanded = container_command(spec.container_template, c);
    if (!expanded.ok()) return expanded.error();
    command = std::move(expanded.value());
  }
  std::lock_guard lock(impl_->mu);
  if (auto it = impl_->runs.find(spec.key); it != impl_->runs.end()) {
    return core::Error{"run", what + (it->second.status.phase == RunPhase::Exited
                                          ? " has run here already and is not forgotten"
                                          : " is already running here")};
  }
  if (impl_->options.run_as_owner && spec.owner.empty()) {
    return core::Error{"owner", what + " has no owner to run as"};
  }
  const RunFiles files{impl_->runs_dir() + "/" + run_name(spec.key)};
  std::error_code ec;
  fs::create_directories(files.dir, ec);
  if (!ec) fs::permissions(files.dir, fs::perms::owner_all, ec);
  if (ec) return core::Error{"state_dir", "cannot create " + files.dir + ": " + ec.message()};
  if (auto p = read_pid_record(files);
      p && (process_alive(p->job_pid, p->job_start) || process_alive(p->shim_pid, p->shim_start))) {
    return core::Error{"run", what + " is already running here (found in " + files.dir + ")"};
  }
  remove_run_records(files);  // stale ones of an earlier attempt

  Impl::Run r;
  r.files = files;
  r.status.key = spec.key;
  r.status.stdout_path = files.path("stdout");
  r.status.stderr_path = files.path("stderr");
  r.status.started = std::chrono::system_clock::now();
  std::map<std::string, std::string> env = spec.env;
  env["ALLOT_STOP_NOTICE"] = files.path("stop_notice");
  if (auto s = env.find("ALLOT_STOP_SIGNAL"); s != env.end())
    r.notice_signal = stop_signal(s->second);
  // Kept beside the run: an agent restarted before the stop still warns with it.
  if (r.notice_signal > 0 && !write_notice_signal(files, r.notice_signal)) {
    return core::Error{"state_dir", "cannot write " + files.path("notice_signal")};
  }
  auto pid = spawn_process(
      {impl_->shim,
       impl_->shim_argv(spec, files.dir, command, run_name(spec.key), impl_->options.log_cap_bytes),
       impl_->environment(env), -1, files.path("shim.log")});
  if (!pid.ok()) return pid.error();
  r.shim_pid = pid.value();
  r.our_child = true;
  if (auto st = impl_->await_start(r); !st.ok()) {
    if (r.our_child) waitpid(r.shim_pid, nullptr, WNOHANG);
    return st.error();
  }
  RunStatus status = r.status;
  impl_->runs.emplace(spec.key, std::move(r));
  return status;
}

void Runner::stop(const RunKey& key, std::chrono::milliseconds grace,
                  std::chrono::milliseconds notice) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->runs.find(key);
  if (it == impl_->runs.end()) return;
  Impl::Run& r = it->second;
  impl_->refresh(r);
  if (r.status.phase == RunPhase::Exited) return;
  // A warning only for the first stop: a later one (a fence) never postpones the SIGTERM.
  const bool warn = notice.count() > 0 && !r.status.stop_requested;
  const std::int64_t term_at = epoch_ms() + (warn ? notice.count() : 0);
  const std::int64_t kill_at = term_at + std::max<std::int64_t>(0, grace.count());
  r.status.stop_requested = true;
  if (r.kill_at_ms == 0 || kill_at < r.kill_at_ms) r.kill_at_ms = kill_at;
  r.status.phase = RunPhase::Stopping;
  if (warn) {
    r.term_at_ms = term_at;
    write_stop_record(r.files, {r.kill_at_ms, r.term_at_ms});
    write_stop_notice(r.files, {r.kill_at_ms, r.term_at_ms});
    if (r.notice_signal > 0) impl_->signal_tree(r, r.notice_signal);
    return;
  }
  r.term_at_ms = 0;
  write_stop_record(r.files, {r.kill_at_ms, 0});
  impl_->signal_tree(r, SIGTERM);
  if (grace.count() <= 0) {
    impl_->signal_tree(r, SIGKILL);
    r.killed = true;
  }
}

void Runner::kill(const RunKey& key) {
  stop(key, std::chrono::milliseconds(0));
}

std::vector<RunStatus> Runner::poll() {
  std::lock_guard lock(impl_->mu);
  std::vector<RunStatus> out;
  for (auto& [key, r] : impl_->runs) {
    impl_->refresh(r);
    out.push_back(r.status);
  }
  return out;
}

std::vector<RunStatus> Runner::recover() {
  std::lock_guard lock(impl_->mu);
  if (DIR* dir = opendir(impl_->runs_dir().c_str())) {
    while (const dirent* e = readdir(dir)) {
      auto key = parse_run_name(e->d_name);
      if (!key || impl_->runs.count(*key)) continue;
      const RunFiles files{impl_->runs_dir() + "/" + e->d_name};
      // A run that never recorded a start or an end was forgotten (or never started).
      if (!has_run_records(files)) continue;
      impl_->runs.emplace(*key, impl_->load(*key, files));
    }
    closedir(dir);
  }
  std::vector<RunStatus> out;
  for (auto& [key, r] : impl_->runs) {
    impl_->refresh(r);
    out.push_back(r.status);
  }
  return out;
}

core::Status Runner::start_check(const LaunchSpec& spec) {
  if (spec.command.empty()) return core::Error{"ready_command", "empty"};
  std::lock_guard lock(impl_->mu);
  auto run = impl_->runs.find(spec.key);
  if (run == impl_->runs.end() || run->second.status.phase == RunPhase::Exited) {
    return core::Error{"run", "not running here"};
  }
  if (impl_->checks.count(spec.key)) return core::Error{"ready_command", "a check is running"};
  if (impl_->options.run_as_owner && spec.owner.empty()) {
    return core::Error{"owner", "the run has no owner to run its check as"};
  }
  Impl::Check c;
  c.files = RunFiles{run->second.files.dir + "/ready"};
  std::error_code ec;
  fs::create_directories(c.files.dir, ec);
  if (ec) return core::Error{"state_dir", "cannot create " + c.files.dir + ": " + ec.message()};
  remove_run_records(c.files);
  for (const char* f : {"stdout", "stderr", "shim.log"}) fs::remove(c.files.path(f), ec);
  auto pid = spawn_process(
      {impl_->shim,
       impl_->shim_argv(spec, c.files.dir, spec.command, run_name(spec.key) + ".ready", 4096),
       impl_->environment(spec.env), -1, c.files.path("shim.log")});
  if (!pid.ok()) return pid.error();
  c.shim_pid = pid.value();
  c.started = std::chrono::steady_clock::now();
  impl_->checks.emplace(spec.key, std::move(c));
  return core::ok_status();
}

std::optional<Runner::CheckOutcome> Runner::check_outcome(const RunKey& key,
                                                          std::chrono::milliseconds timeout) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->checks.find(key);
  if (it == impl_->checks.end()) return std::nullopt;
  Impl::Check& c = it->second;
  const auto ran = std::chrono::steady_clock::now() - c.started;
  int st = 0;
  if (waitpid(c.shim_pid, &st, WNOHANG) != c.shim_pid) {
    if (ran < timeout) return std::nullopt;
    if (!c.killed) {
      Impl::kill_check(c);
      c.killed = true;
      return std::nullopt;  // the shim records the end and leaves
    }
    if (ran < timeout + std::chrono::seconds(5)) return std::nullopt;
    ::kill(c.shim_pid, SIGKILL);
    waitpid(c.shim_pid, &st, 0);
  }
  CheckOutcome out;
  const auto e = read_exit_record(c.files);
  const std::string secs =
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count());
  if (c.killed) {
    out.reason = "ready_command ran longer than " + secs + " s";
  } else if (!e) {
    out.reason =
        "ready_command: its end was not recorded (" + tail_of(c.files.path("shim.log"), 160) + ")";
  } else if (e->exit_code == 0 && e->signal == 0) {
    out.ok = true;
  } else {
    out.reason =
        "ready_command " + (e->signal > 0 ? "killed by signal " + std::to_string(e->signal)
                                          : "exited with code " + std::to_string(e->exit_code));
    std::string tail = e->error.empty() ? tail_of(c.files.path("stderr"), 160) : e->error;
    for (char& ch : tail) {
      if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
    }
    if (!tail.empty()) out.reason += ": " + tail.substr(0, 160);
  }
  impl_->checks.erase(it);
  return out;
}

void Runner::cancel_check(const RunKey& key) {
  std::lock_guard lock(impl_->mu);
  if (auto c = impl_->checks.find(key); c != impl_->checks.end()) {
    Impl::end_check(c->second);
    impl_->checks.erase(c);
  }
}

void Runner::forget(const RunKey& key) {
  cancel_check(key);
  std::lock_guard lock(impl_->mu);
  auto it = impl_->runs.find(key);
  if (it == impl_->runs.end()) return;
  impl_->refresh(it->second);
  if (it->second.status.phase != RunPhase::Exited) return;  // only an ended run is forgotten
  remove_run_records(it->second.files);
  impl_->runs.erase(it);
}

int Runner::prune(std::chrono::seconds keep) {
  std::lock_guard lock(impl_->mu);
  const auto cutoff = fs::file_time_type::clock::now() - keep;
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(impl_->runs_dir(), ec)) {
    auto key = parse_run_name(e.path().filename().string());
    if (!key || impl_->runs.count(*key)) continue;
    const RunFiles files{e.path().string()};
    // Not forgotten (a record of its start or end is there): a later recover() wants it.
    if (has_run_records(files)) continue;
    auto newest = fs::last_write_time(e.path(), ec);
    for (const auto& f : fs::directory_iterator(e.path(), ec)) {
      newest = std::max(newest, fs::last_write_time(f.path(), ec));
    }
    if (newest > cutoff) continue;
    if (fs::remove_all(e.path(), ec) > 0 && !ec) ++removed;
  }
  return removed;
}

std::vector<pid_t> Runner::processes(const RunKey& key) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->runs.find(key);
  if (it == impl_->runs.end() || it->second.status.phase == RunPhase::Exited) return {};
  std::vector<pid_t> pids = impl_->members(it->second);
  std::sort(pids.begin(), pids.end());
  return pids;
}

std::string Runner::cgroup_dir(const RunKey& key) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->runs.find(key);
  if (it == impl_->runs.end() || it->second.status.phase == RunPhase::Exited) return "";
  return it->second.cgroup;
}

std::map<RunKey, std::vector<pid_t>> Runner::processes() const {
  std::lock_guard lock(impl_->mu);
  std::map<RunKey, std::vector<pid_t>> out;
  std::vector<pid_t> sessions;
  for (const auto& [key, r] : impl_->runs) {
    if (r.status.phase == RunPhase::Exited) continue;
    if (!r.cgroup.empty() || !r.devices_cgroup.empty()) {
      std::vector<pid_t> pids = impl_->members(r);
      std::sort(pids.begin(), pids.end());
      out[key] = std::move(pids);
    } else if (r.status.pid > 0) {
      sessions.push_back(r.status.pid);
    }
  }
  if (sessions.empty()) return out;
  auto members = session_members(sessions);
  for (const auto& [key, r] : impl_->runs) {
    if (r.status.phase == RunPhase::Exited || !r.cgroup.empty() || !r.devices_cgroup.empty()) {
      continue;
    }
    if (r.status.pid > 0) out[key] = members[r.status.pid];
  }
  return out;
}

}  // namespace allot::agent
