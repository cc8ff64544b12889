// `allot agent-shim`: the process between the agent and a job. The runner starts it with
// posix_spawn (so no C++ runs after fork() in the multi-threaded agent); being single-threaded,
// the shim may fork freely. It leaves the agent's session, prepares the run's cgroups, starts
// the job in a session of its own (as its owner's account when given one, in its workdir, with
// its limits and environment), copies the job's output into the run's logs up to a cap, records
// its pid, waits for it, kills what it left behind and records how it ended.
//
//   agent-shim --dir RUN_DIR [--workdir DIR] [--user ACCOUNT --owner SUBJECT] [--cgroup DIR]
//              [--memory-mib N] [--cpus X] [--devices-cgroup DIR | --device-filter bpf]
//              [--deny DEVICE]...
//              [--rlimit-as-mib N] [--log-cap-bytes N] -- ARGV...
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "agent/cgroup.h"
#include "agent/device_filter.h"
#include "agent/log_cap.h"
#include "agent/proc.h"
#include "agent/run_state.h"
#include "agent/runner.h"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it to us

namespace allot::agent {
namespace {

struct ShimArgs {
  std::string dir, workdir, cgroup, devices_cgroup;
  bool device_filter = false;  // --device-filter bpf: the --deny devices by a program on --cgroup
  std::string user, owner;     // the account to run as (none: the shim's own) and whose job it is
  std::int64_t memory_mib = 0, rlimit_as_mib = 0, log_cap_bytes = 0;
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
    } else if (f == "--user") {
      a.user = v;
    } else if (f == "--owner") {
      a.owner = v;
    } else if (f == "--log-cap-bytes") {
      a.log_cap_bytes = std::atoll(v);
    } else if (f == "--cgroup") {
      a.cgroup = v;
    } else if (f == "--devices-cgroup") {
      a.devices_cgroup = v;
    } else if (f == "--device-filter") {
      if (std::string(v) != "bpf") {
        why = "--device-filter must be bpf";
        return false;
      }
      a.device_filter = true;
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
  int stage;  // 0: workdir, 1: rlimit, 2: exec, 3: the owner's identity
  int error;
};

// The account a job runs as, looked up before the fork (the child allocates nothing).
struct Identity {
  bool switch_to = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary, as initgroups() would set them
  std::string home;
};

// Looks up `account` (getpwnam_r: its uid, gid and home) and its groups; "" if found, else why.
std::string look_up(const std::string& account, Identity& id) {
  long size = sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(static_cast<std::size_t>(size > 0 ? size : 16384));
  struct passwd pw {};
  struct passwd* found = nullptr;
  int rc;
  while ((rc = getpwnam_r(account.c_str(), &pw, buf.data(), buf.size(), &found)) == ERANGE) {
    buf.resize(buf.size() * 2);
  }
  if (rc != 0) return "cannot look up account '" + account + "': " + std::strerror(rc);
  if (!found) return "no account '" + account + "' on this node";
  id.switch_to = true;
  id.uid = pw.pw_uid;
  id.gid = pw.pw_gid;
  id.home = pw.pw_dir ? pw.pw_dir : "/";
  int n = 32;
  id.groups.resize(static_cast<std::size_t>(n));
  while (getgrouplist(account.c_str(), id.gid, id.groups.data(), &n) < 0) {
    id.groups.resize(static_cast<std::size_t>(n) + 16);
    n = static_cast<int>(id.groups.size());
  }
  id.groups.resize(static_cast<std::size_t>(n));
  return "";
}

// Runs in the forked child; allocates nothing (an address-space limit may be in force).
[[noreturn]] void child(const ShimArgs& a, const Identity& id, const char* exe, char* const* argv,
                        int sync_fd, int fail_fd, int null_fd, int out_fd, int err_fd) {
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
  if (id.switch_to) {
    // Groups first, then the gid, the uid last: once it is set nothing else may be changed. The
    // working directory is entered as the owner, so it is one the owner may enter.
    if (setgroups(id.groups.size(), id.groups.data()) != 0) fail(3);
    if (setgid(id.gid) != 0) fail(3);
    if (setuid(id.uid) != 0) fail(3);
    if (id.uid != 0 && setuid(0) == 0) {
      errno = EPERM;  // the switch did not hold: never run a job with root's rights by mistake
      fail(3);
    }
  }
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

// Refuses the run the --deny devices that exist here by a device program on its cgroup v2
// directory; the job runs without that isolation, saying so, if the program cannot be attached.
void deny_by_program(const ShimArgs& a, int err_fd) {
  if (a.cgroup.empty()) {
    say(err_fd, "devices not isolated: no cgroup v2 directory for this run");
    return;
  }
  std::vector<DeviceNumber> deny;
  std::string why;
  for (const std::string& dev : a.deny) {
    if (access(dev.c_str(), F_OK) != 0) continue;  // no such device here: nothing to deny
    if (auto n = device_number(dev, &why)) {
      deny.push_back(*n);
    } else {
      say(err_fd, "cannot deny " + dev + ": " + why);
    }
  }
  if (!attach_device_filter(a.cgroup, deny, &why)) say(err_fd, "devices not isolated: " + why);
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
  if (a.device_filter) deny_by_program(a, err_fd);
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

// The part of a capped stream's end kept for the end of its log.
constexpr std::int64_t kLogTailBytes = 1 << 20;

// Reads what is there; false at end of file (or an error: nothing more will come).
bool read_some(int fd, CappedLog& log) {
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      log.write(buf, static_cast<std::size_t>(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
}

// Copies the job's stdout and stderr into their logs until its main process has ended. A pidfd
// says when it ends (so a job that closed its outputs, or whose children hold them, is seen to
// end at once); without one, the exit is checked every 100 ms.
void copy_output(pid_t job, int out, int err, CappedLog& out_log, CappedLog& err_log) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, job, 0));
  bool out_open = true, err_open = true;
  for (;;) {
    struct pollfd fds[3] = {
        {out_open ? out : -1, POLLIN, 0}, {err_open ? err : -1, POLLIN, 0}, {pidfd, POLLIN, 0}};
    const int ready = poll(fds, 3, pidfd >= 0 ? -1 : 100);
    if (ready < 0 && errno != EINTR) break;
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) out_open = read_some(out, out_log);
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) err_open = read_some(err, err_log);
    siginfo_t info{};
    info.si_pid = 0;
    if (waitid(P_PID, static_cast<id_t>(job), &info, WEXITED | WNOWAIT | WNOHANG) == 0 &&
        info.si_pid == job) {
      break;
    }
    if (!out_open && !err_open && pidfd < 0) {
      while (waitid(P_PID, static_cast<id_t>(job), &info, WEXITED | WNOWAIT) < 0 &&
             errno == EINTR) {
      }
      break;
    }
  }
  if (pidfd >= 0) close(pidfd);
}

// After the job's tree was killed: what is left in a pipe, without waiting for a writer that
// escaped the tree.
void drain(int fd, CappedLog& log) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      log.write(buf, static_cast<std::size_t>(n));
    } else if (!(n < 0 && errno == EINTR)) {
      break;
    }
  }
  close(fd);
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

  // The logs are the agent's (0600): the job writes into them only through the pipes below.
  const int out_fd =
      open(run.path("stdout").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  const int err_fd =
      open(run.path("stderr").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (out_fd < 0 || err_fd < 0 || null_fd < 0) {
    std::fprintf(stderr, "agent-shim: cannot open the logs in %s: %s\n", a.dir.c_str(),
                 std::strerror(errno));
    write_exit_record(run, {127, 0, "cannot open the run's logs: " + std::string(strerror(errno))});
    return 1;
  }
  Identity id;
  if (!a.user.empty()) {
    const std::string missing = look_up(a.user, id);
    if (!missing.empty()) {
      // Never started as anyone else: the job fails, saying whose account is missing.
      const std::string error = "cannot run as the job's owner " + a.owner + ": " + missing +
                                (a.user == a.owner ? "" : " (mapped from " + a.owner + ")");
      say(err_fd, error);
      return write_exit_record(run, {127, 0, error}) ? 0 : 1;
    }
    setenv("HOME", id.home.c_str(), 1);
    setenv("USER", a.user.c_str(), 1);
    setenv("LOGNAME", a.user.c_str(), 1);
  }
  // No workdir given: the owner's home when the job runs as its owner, else the run's directory.
  if (a.workdir.empty()) a.workdir = id.switch_to ? id.home : a.dir;
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
  int sync[2], fail[2], out_pipe[2], err_pipe[2];
  if (pipe2(sync, O_CLOEXEC) != 0 || pipe2(fail, O_CLOEXEC) != 0 ||
      pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
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
    child(a, id, exe.c_str(), job_argv.data(), sync[0], fail[1], null_fd, out_pipe[1], err_pipe[1]);
  }
  close(sync[0]);
  close(fail[1]);
  close(out_pipe[1]);
  close(err_pipe[1]);
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
                                   "cannot limit memory for ", "cannot run ",
                                   "cannot become the job owner's account "};
    const std::string target = failure.stage == 0   ? a.workdir
                               : failure.stage == 3 ? a.user
                                                    : a.command[0];
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

  // Copy the output until the job ends (not reaped, so the leftovers can still be found by its
  // ids), then what its leftovers wrote before they were killed.
  const std::size_t tail = static_cast<std::size_t>(
      std::min<std::int64_t>(kLogTailBytes, a.log_cap_bytes > 0 ? a.log_cap_bytes / 4 : 0));
  CappedLog out_log(out_fd, a.log_cap_bytes, tail, "stdout");
  CappedLog err_log(err_fd, a.log_cap_bytes, tail, "stderr");
  copy_output(job, out_pipe[0], err_pipe[0], out_log, err_log);
  kill_leftovers(a, job);
  drain(out_pipe[0], out_log);
  drain(err_pipe[0], err_log);
  out_log.finish();
  err_log.finish();
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
