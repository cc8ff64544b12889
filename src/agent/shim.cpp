// `allot agent-shim`: the process between the agent and a job. The runner starts it with
// posix_spawn (so no C++ runs after fork() in the multi-threaded agent); being single-threaded,
// the shim may fork freely. It leaves the agent's session, prepares the run's cgroups, starts
// the job in a session of its own (in its workdir, with its logs, limits and environment),
// records its pid, waits for it, kills what it left behind and records how it ended.
//
//   agent-shim --dir RUN_DIR [--workdir DIR] [--cgroup DIR] [--memory-mib N] [--cpus X]
//              [--devices-cgroup DIR] [--deny DEVICE]... [--rlimit-as-mib N] -- ARGV...
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "agent/cgroup.h"
#include "agent/proc.h"
#include "agent/run_state.h"
#include "agent/runner.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it to us

namespace allot::agent {
namespace {

struct ShimArgs {
  std::string dir, workdir, cgroup, devices_cgroup;
  std::int64_t memory_mib = 0, rlimit_as_mib = 0;
  double cpus = 0;
  std::vector<std::string> deny;
  std::vector<std::string> command;
};

bool parse(int argc, char** argv, ShimArgs& a, std::string& why) {
  int i = 1;
  auto value = [&](const char* flag) -> const char* {
    if (i + 1 >= argc) {
      why = std::string(flag) + " needs a value";
      return nullptr;
    }
    return argv[++i];
  };
  for (; i < argc; ++i) {
    const std::string f = argv[i];
    const char* v = nullptr;
    if (f == "--") {
      for (++i; i < argc; ++i) a.command.emplace_back(argv[i]);
      break;
    }
    if (!(v = value(f.c_str()))) return false;
    if (f == "--dir") {
      a.dir = v;
    } else if (f == "--workdir") {
      a.workdir = v;
    } else if (f == "--cgroup") {
      a.cgroup = v;
    } else if (f == "--devices-cgroup") {
      a.devices_cgroup = v;
    } else if (f == "--deny") {
      a.deny.emplace_back(v);
    } else if (f == "--memory-mib") {
      a.memory_mib = std::atoll(v);
    } else if (f == "--rlimit-as-mib") {
      a.rlimit_as_mib = std::atoll(v);
    } else if (f == "--cpus") {
      a.cpus = std::atof(v);
    } else {
      why = "unknown option " + f;
      return false;
    }
  }
  if (a.command.empty()) why = "no command after --";
  if (a.dir.empty()) why = "--dir is required";
  return why.empty();
}

// What the job's stderr shows of the shim's own notes.
void say(int fd, const std::string& what) {
  const std::string line = "allot: " + what + "\n";
  if (write(fd, line.data(), line.size()) < 0) {
    // Nothing more can be done about a log that cannot be written.
  }
}

// command[0] as execvp() would find it, searched now so that the child only calls execve().
std::string resolve(const std::string& name, const std::string& workdir) {
  if (name.find('/') != std::string::npos) return name;
  const char* env = std::getenv("PATH");
  const std::string path = env && *env ? env : "/usr/local/bin:/usr/bin:/bin";
  std::size_t at = 0;
  while (at <= path.size()) {
    std::size_t end = path.find(':', at);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(at, end - at);
    at = end + 1;
    if (dir.empty()) dir = ".";
    if (dir.front() != '/') dir = workdir + "/" + dir;
    std::string full = dir + "/" + name;
    struct stat st {};
    if (stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(full.c_str(), X_OK) == 0) {
      return full;
    }
  }
  return "";
}

// What the child reports through the exec pipe when it cannot start the job.
struct ChildFailure {
  int stage;  // 0: workdir, 1: rlimit, 2: exec
  int error;
};

// Runs in the forked child; allocates nothing (an address-space limit may be in force).
[[noreturn]] void child(const ShimArgs& a, const char* exe, char* const* argv, int sync_fd,
                        int fail_fd, int null_fd, int out_fd, int err_fd) {
  setsid();  // the job's own session and process group: its pid is their id
  char go = 0;
  while (read(sync_fd, &go, 1) < 0 && errno == EINTR) {
  }
  dup2(null_fd, 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  auto fail = [&](int stage) {
    const ChildFailure f{stage, errno};
    if (write(fail_fd, &f, sizeof f) < 0) {
      // The parent then sees a plain exit 127.
    }
    _exit(127);
  };
  if (chdir(a.workdir.c_str()) != 0) fail(0);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (a.rlimit_as_mib > 0) {
    const rlim_t bytes = static_cast<rlim_t>(a.rlimit_as_mib) * 1024 * 1024;
    const struct rlimit r { bytes, bytes };
    if (setrlimit(RLIMIT_AS, &r) != 0) fail(1);
  }
  execve(exe, argv, environ);
  fail(2);
  _exit(127);
}

int exit_code_of(int status, int& signal) {
  if (WIFSIGNALED(status)) {
    signal = WTERMSIG(status);
    return 128 + signal;
  }
  signal = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 255;
}

bool make_directories(const std::string& dir, std::string* why) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) *why = dir + ": " + ec.message();
  return !ec;
}

// Applies the run's limits to its cgroups before the job is put in them; what cannot be done is
// said in the job's stderr and the job runs without it.
void prepare_cgroups(ShimArgs& a, int err_fd) {
  std::string why;
  if (!a.cgroup.empty()) {
    if (!make_directories(a.cgroup, &why)) {
      say(err_fd, "no cgroup for this run: " + why);
      a.cgroup.clear();
    }
  }
  if (!a.cgroup.empty() && a.memory_mib > 0) {
    if (!write_cgroup(a.cgroup, "memory.max", std::to_string(a.memory_mib * 1024 * 1024), &why)) {
      say(err_fd, "memory limit not applied: " + why);
    }
    write_cgroup(a.cgroup, "memory.swap.max", "0", &why);  // absent without swap accounting
  }
  if (!a.cgroup.empty() && a.cpus > 0) {
    const long quota = std::lround(a.cpus * 100000);
    if (!write_cgroup(a.cgroup, "cpu.max", std::to_string(quota) + " 100000", &why)) {
      say(err_fd, "CPU limit not applied: " + why);
    }
  }
  if (!a.devices_cgroup.empty()) {
    if (!make_directories(a.devices_cgroup, &why)) {
      say(err_fd, "devices not isolated: " + why);
      a.devices_cgroup.clear();
    }
  }
  for (const std::string& dev : a.deny) {
    if (a.devices_cgroup.empty()) break;
    if (access(dev.c_str(), F_OK) != 0) continue;  // no such device here: nothing to deny
    const std::string rule = device_rule(dev, &why);
    if (rule.empty() || !write_cgroup(a.devices_cgroup, "devices.deny", rule, &why)) {
      say(err_fd, "cannot deny " + dev + ": " + why);
    }
  }
}

// Puts the (waiting) job in its cgroups; a cgroup it could not join is forgotten.
void join_cgroups(ShimArgs& a, pid_t job, int err_fd) {
  std::string why;
  if (!a.cgroup.empty() && !write_cgroup(a.cgroup, "cgroup.procs", std::to_string(job), &why)) {
    say(err_fd, "not in a cgroup v2: " + why);
    remove_cgroup(a.cgroup, std::chrono::milliseconds(0));
    a.cgroup.clear();
  }
  if (!a.devices_cgroup.empty() &&
      !write_cgroup(a.devices_cgroup, "cgroup.procs", std::to_string(job), &why)) {
    say(err_fd, "devices not isolated: " + why);
    remove_cgroup(a.devices_cgroup, std::chrono::milliseconds(0));
    a.devices_cgroup.clear();
  }
}

// Once the job's main process has ended (still a zombie, so its pid and process group cannot be
// reused yet): SIGKILL whatever of its tree remains.
void kill_leftovers(const ShimArgs& a, pid_t job) {
  ::kill(-job, SIGKILL);
  const std::vector<pid_t> session = session_members({job})[job];
  for (pid_t pid : session) {
    if (pid != job) ::kill(pid, SIGKILL);
  }
  if (!a.cgroup.empty()) kill_cgroup(a.cgroup);
  if (!a.devices_cgroup.empty()) kill_cgroup(a.devices_cgroup);
}

void close_inherited_fds() {
  if (close_range(3, ~0U, 0) == 0) return;
  const long max = sysconf(_SC_OPEN_MAX);
  for (int fd = 3; fd < (max > 0 ? max : 1024); ++fd) close(fd);
}

}  // namespace

int shim_main(int argc, char** argv) {
  ShimArgs a;
  std::string why;
  if (!parse(argc, argv, a, why)) {
    std::fprintf(stderr, "agent-shim: %s\n", why.c_str());
    return 2;
  }
  close_inherited_fds();
  setsid();  // out of the agent's session: a signal to the agent's group does not reach the run
  for (int sig : {SIGHUP, SIGINT, SIGTERM, SIGPIPE}) signal(sig, SIG_IGN);
  const RunFiles run{a.dir};
  if (a.workdir.empty()) a.workdir = a.dir;

  const int out_fd =
      open(run.path("stdout").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int err_fd =
      open(run.path("stderr").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (out_fd < 0 || err_fd < 0 || null_fd < 0) {
    std::fprintf(stderr, "agent-shim: cannot open the logs in %s: %s\n", a.dir.c_str(),
                 std::strerror(errno));
    write_exit_record(run, {127, 0, "cannot open the run's logs: " + std::string(strerror(errno))});
    return 1;
  }
  const std::string exe = resolve(a.command[0], a.workdir);
  if (exe.empty()) {
    const std::string error = "command not found: " + a.command[0];
    say(err_fd, error);
    return write_exit_record(run, {127, 0, error}) ? 0 : 1;
  }
  prepare_cgroups(a, err_fd);

  std::vector<char*> job_argv;
  for (const std::string& arg : a.command) job_argv.push_back(const_cast<char*>(arg.c_str()));
  job_argv.push_back(nullptr);
  int sync[2], fail[2];
  if (pipe2(sync, O_CLOEXEC) != 0 || pipe2(fail, O_CLOEXEC) != 0) {
    write_exit_record(run, {127, 0, std::string("pipe: ") + std::strerror(errno)});
    return 1;
  }
  const pid_t job = fork();
  if (job < 0) {
    write_exit_record(run, {127, 0, std::string("fork: ") + std::strerror(errno)});
    return 1;
  }
  if (job == 0) {
    close(sync[1]);
    close(fail[0]);
    child(a, exe.c_str(), job_argv.data(), sync[0], fail[1], null_fd, out_fd, err_fd);
  }
  close(sync[0]);
  close(fail[1]);
  auto job_stat = read_proc_stat(job);
  join_cgroups(a, job, err_fd);
  if (write(sync[1], "g", 1) < 0) {
    // The child reads EOF instead and goes on all the same.
  }
  close(sync[1]);

  ChildFailure failure{};
  ssize_t n;
  while ((n = read(fail[0], &failure, sizeof failure)) < 0 && errno == EINTR) {
  }
  close(fail[0]);
  if (n == static_cast<ssize_t>(sizeof failure)) {
    int status = 0;
    while (waitpid(job, &status, 0) < 0 && errno == EINTR) {
    }
    static const char* stages[] = {"cannot enter the working directory ",
                                   "cannot limit memory for ", "cannot run "};
    const std::string target = failure.stage == 0 ? a.workdir : a.command[0];
    const std::string error =
        stages[failure.stage] + ("'" + target + "': ") + std::strerror(failure.error);
    say(err_fd, error);
    if (!a.cgroup.empty()) remove_cgroup(a.cgroup, std::chrono::milliseconds(1000));
    if (!a.devices_cgroup.empty()) remove_cgroup(a.devices_cgroup, std::chrono::milliseconds(1000));
    return write_exit_record(run, {127, 0, error}) ? 0 : 1;
  }

  PidRecord pid;
  pid.job_pid = job;
  pid.job_start = job_stat ? job_stat->start_ticks : 0;
  pid.shim_pid = getpid();
  if (auto self = read_proc_stat(getpid())) pid.shim_start = self->start_ticks;
  pid.started_ms = epoch_ms();
  pid.cgroup = a.cgroup;
  pid.devices_cgroup = a.devices_cgroup;
  if (!write_pid_record(run, pid)) {
    std::fprintf(stderr, "agent-shim: cannot write %s: %s\n", run.path("pid").c_str(),
                 std::strerror(errno));
  }

  // Wait for the end without reaping, so the leftovers can still be found by its ids.
  siginfo_t info{};
  while (waitid(P_PID, static_cast<id_t>(job), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  kill_leftovers(a, job);
  int status = 0;
  while (waitpid(job, &status, 0) < 0 && errno == EINTR) {
  }
  ExitRecord exit;
  exit.exit_code = exit_code_of(status, exit.signal);
  if (!a.cgroup.empty()) remove_cgroup(a.cgroup, std::chrono::milliseconds(2000));
  if (!a.devices_cgroup.empty()) remove_cgroup(a.devices_cgroup, std::chrono::milliseconds(2000));
  if (!write_exit_record(run, exit)) {
    std::fprintf(stderr, "agent-shim: cannot write %s: %s\n", run.path("exit").c_str(),
                 std::strerror(errno));
    return 1;
  }
  return 0;
}

}  // namespace allot::agent
