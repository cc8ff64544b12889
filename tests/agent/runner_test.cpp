// The runner with real processes (through test_shim): exit codes, signals, stop with grace,
// process trees, logs, environment, limits, devices, recovery after a restart, pid reuse.
// What this machine cannot do (no cgroup, no devices controller, no perl) is skipped, saying so.
#include "agent/runner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/proc.h"
#include "agent/run_state.h"

extern char** environ;

namespace allot::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Generous: the machine may be loaded by other builds.
constexpr auto kPatience = std::chrono::seconds(30);

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool eventually(const std::function<bool()>& done, Clock::duration patience = kPatience) {
  const auto until = Clock::now() + patience;
  while (!done()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

class RunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/allot-runner-XXXXXX";
    dir_ = mkdtemp(tmpl);
    options_.state_dir = dir_ + "/state";
    options_.shim_binary = TEST_SHIM;
  }

  void TearDown() override {
    // Whatever a failed test left running is killed, through a runner that recovers it.
    Runner cleanup(options_);
    for (const RunStatus& s : cleanup.recover()) {
      if (s.phase != RunPhase::Exited) cleanup.kill(s.key);
    }
    eventually([&] {
      for (const RunStatus& s : cleanup.poll()) {
        if (s.phase != RunPhase::Exited) return false;
      }
      return true;
    });
    for (const std::string& d :
         {cleanup.capabilities().cgroup, cleanup.capabilities().devices_cgroup}) {
      if (!d.empty()) rmdir(d.c_str());
    }
    fs::remove_all(dir_);
  }

  LaunchSpec sh(core::JobId job, const std::string& script) const {
    LaunchSpec spec;
    spec.key = {job, 1};
    spec.command = {"/bin/sh", "-c", script};
    spec.workdir = dir_;
    return spec;
  }

  static RunStatus launch(Runner& runner, const LaunchSpec& spec) {
    auto s = runner.launch(spec);
    EXPECT_TRUE(s.ok()) << s.error().message();
    return s.ok() ? s.value() : RunStatus{};
  }

  static std::optional<RunStatus> find(const std::vector<RunStatus>& all, const RunKey& key) {
    for (const RunStatus& s : all) {
      if (s.key == key) return s;
    }
    return std::nullopt;
  }

  void expect_device_denied_to_one_job(Runner& runner);
  static RunStatus wait_exit(Runner& runner, const RunKey& key) {
    RunStatus last;
    const bool ended = eventually([&] {
      auto s = find(runner.poll(), key);
      if (s) last = *s;
      return s && s->phase == RunPhase::Exited;
    });
    EXPECT_TRUE(ended) << "job " << key.job << " did not end";
    return last;
  }

  bool wait_file(const std::string& name) const {
    return eventually([&] { return fs::exists(dir_ + "/" + name); });
  }

  std::string dir_;
  RunnerOptions options_;
};

TEST_F(RunnerTest, ExitCode) {
  Runner runner(options_);
  RunStatus s = launch(runner, sh(1, "exit 3"));
  EXPECT_GT(s.pid, 0);
  s = wait_exit(runner, {1, 1});
  ASSERT_TRUE(s.exit_code);
  EXPECT_EQ(*s.exit_code, 3);
  EXPECT_FALSE(s.signal);
  EXPECT_FALSE(s.stop_requested);
  EXPECT_EQ(s.error, "");
}

TEST_F(RunnerTest, KilledBySignal) {
  Runner runner(options_);
  launch(runner, sh(1, "kill -TERM $$"));
  RunStatus s = wait_exit(runner, {1, 1});
  EXPECT_EQ(s.exit_code, 143);
  EXPECT_EQ(s.signal, 15);
  EXPECT_FALSE(s.stop_requested);
}

TEST_F(RunnerTest, OutputGoesToLogFiles) {
  Runner runner(options_);
  RunStatus s = launch(runner, sh(1, "echo out; echo err >&2"));
  wait_exit(runner, {1, 1});
  EXPECT_EQ(slurp(s.stdout_path), "out\n");
  EXPECT_EQ(slurp(s.stderr_path), "err\n");
  EXPECT_EQ(fs::path(s.stdout_path).parent_path(), fs::path(dir_ + "/state/runs/1.1"));
}

TEST_F(RunnerTest, EnvironmentAndWorkdir) {
  Runner runner(options_);
  LaunchSpec spec = sh(1, "echo \"$CUDA_VISIBLE_DEVICES|$ALLOT_JOB_ID|$HOME|$(pwd)\"");
  spec.env = {{"CUDA_VISIBLE_DEVICES", "GPU-fake-n01-3,GPU-fake-n01-5"},
              {"ALLOT_JOB_ID", "1"},
              {"HOME", "/job/home"}};
  RunStatus s = launch(runner, spec);
  wait_exit(runner, {1, 1});
  EXPECT_EQ(slurp(s.stdout_path), "GPU-fake-n01-3,GPU-fake-n01-5|1|/job/home|" + dir_ + "\n");
}

TEST_F(RunnerTest, AReadinessCheckRunsLikeItsRunAndSaysHowItEnded) {
  Runner runner(options_);
  LaunchSpec spec = sh(1, "sleep 30");
  spec.env = {{"MODEL", "llama"}};
  launch(runner, spec);
  auto outcome = [&](milliseconds timeout = milliseconds(5000)) {
    std::optional<Runner::CheckOutcome> o;
    EXPECT_TRUE(eventually([&] {
      return (o = runner.check_outcome({1, 1}, timeout)).has_value();
    }));
    return o.value_or(Runner::CheckOutcome{});
  };
  // The run's environment and workdir: fails until the file appears, with its stderr's tail.
  LaunchSpec check = spec;
  check.command = {"/bin/sh", "-c",
                   "test \"$MODEL\" = llama && test -e up || { echo not up yet >&2; exit 3; }"};
  ASSERT_TRUE(runner.start_check(check).ok());
  EXPECT_FALSE(runner.start_check(check).ok()) << "one check in flight per run";
  auto o = outcome();
  EXPECT_FALSE(o.ok);
  EXPECT_EQ(o.reason, "ready_command exited with code 3: not up yet") << o.reason;
  std::ofstream(dir_ + "/up") << "1\n";
  ASSERT_TRUE(runner.start_check(check).ok());
  o = outcome();
  EXPECT_TRUE(o.ok) << o.reason;
  // One that hangs is killed at its timeout.
  check.command = {"/bin/sh", "-c", "sleep 30"};
  const auto began = Clock::now();
  ASSERT_TRUE(runner.start_check(check).ok());
  o = outcome(milliseconds(300));
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.reason.find("ran longer than"), std::string::npos) << o.reason;
  EXPECT_LT(Clock::now() - began, std::chrono::seconds(10));
  // None for a run that is not running here.
  check.key = {2, 1};
  EXPECT_FALSE(runner.start_check(check).ok());
  EXPECT_FALSE(runner.check_outcome({2, 1}, milliseconds(100)));
  runner.kill({1, 1});
  wait_exit(runner, {1, 1});
}

TEST_F(RunnerTest, DefaultWorkdirIsTheRunsDirectory) {
  Runner runner(options_);
  LaunchSpec spec = sh(1, "pwd");
  spec.workdir.clear();
  RunStatus s = launch(runner, spec);
  wait_exit(runner, {1, 1});
  EXPECT_EQ(slurp(s.stdout_path), fs::path(s.stdout_path).parent_path().string() + "\n");
}

TEST_F(RunnerTest, CommandNotFound) {
  Runner runner(options_);
  LaunchSpec spec = sh(1, "");
  spec.command = {"no-such-command-for-allot"};
  RunStatus s = launch(runner, spec);
  s = wait_exit(runner, {1, 1});
  EXPECT_EQ(s.exit_code, 127);
  EXPECT_EQ(s.error, "command not found: no-such-command-for-allot");
  EXPECT_EQ(slurp(s.stderr_path), "allot: command not found: no-such-command-for-allot\n");
}

TEST_F(RunnerTest, MissingWorkdir) {
  Runner runner(options_);
  LaunchSpec spec = sh(1, "true");
  spec.workdir = "/nonexistent/dir";
  launch(runner, spec);
  RunStatus s = wait_exit(runner, {1, 1});
  EXPECT_EQ(s.exit_code, 127);
  EXPECT_EQ(s.error,
            "cannot enter the working directory '/nonexistent/dir': No such file or directory");
}

TEST_F(RunnerTest, BadSpecsAndDuplicatesAreRefused) {
  Runner runner(options_);
  LaunchSpec empty = sh(1, "");
  empty.command.clear();
  EXPECT_EQ(runner.launch(empty).error().field, "command");
  LaunchSpec no_run = sh(1, "true");
  no_run.key.run = 0;
  EXPECT_FALSE(runner.launch(no_run).ok());
  launch(runner, sh(1, "while [ ! -e go ]; do sleep 0.02; done"));
  auto again = runner.launch(sh(1, "true"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().reason, "job 1 run 1 is already running here");
  std::ofstream(dir_ + "/go") << "";
  wait_exit(runner, {1, 1});
  EXPECT_EQ(runner.launch(sh(1, "true")).error().reason,
            "job 1 run 1 has run here already and is not forgotten");
}

TEST_F(RunnerTest, StopOfAJobThatCatchesTermReportsItsExit) {
  Runner runner(options_);
  launch(runner, sh(1, "trap 'exit 0' TERM; touch ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(wait_file("ready"));
  runner.stop({1, 1}, std::chrono::seconds(20));
  auto during = find(runner.poll(), {1, 1});
  ASSERT_TRUE(during);
  EXPECT_TRUE(during->stop_requested);
  RunStatus s = wait_exit(runner, {1, 1});
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_FALSE(s.signal);
  EXPECT_TRUE(s.stop_requested) << "the agent reports it preempted";
}

TEST_F(RunnerTest, JobIgnoringTermIsKilledAfterGrace) {
  Runner runner(options_);
  launch(runner, sh(1, "trap '' TERM; touch ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(wait_file("ready"));
  const auto t0 = Clock::now();
  runner.stop({1, 1}, milliseconds(300));
  auto during = find(runner.poll(), {1, 1});
  ASSERT_TRUE(during);
  EXPECT_EQ(during->phase, RunPhase::Stopping);
  RunStatus s = wait_exit(runner, {1, 1});
  EXPECT_GE(Clock::now() - t0, milliseconds(300));
  EXPECT_EQ(s.exit_code, 137);
  EXPECT_EQ(s.signal, 9);
  EXPECT_TRUE(s.stop_requested);
}

// An interactive job's stop (docs/agent.md "Stop warning"): the warning first — the notice file
// with the deadlines, the job's ALLOT_STOP_SIGNAL — then SIGTERM once the notice has passed.
TEST_F(RunnerTest, StopWithNoticeWarnsAndWaitsBeforeTerm) {
  Runner runner(options_);
  LaunchSpec spec =
      sh(1,
         "trap 'cat \"$ALLOT_STOP_NOTICE\" > w.tmp && mv w.tmp warned' USR1; "
         "trap 'touch termed; exit 0' TERM; touch ready; while :; do sleep 0.05; done");
  spec.env["ALLOT_STOP_SIGNAL"] = "USR1";
  launch(runner, spec);
  ASSERT_TRUE(wait_file("ready"));
  const auto t0 = Clock::now();
  runner.stop({1, 1}, milliseconds(2000), milliseconds(600));
  ASSERT_TRUE(wait_file("warned")) << "the job's signal comes at the start of the notice";
  EXPECT_FALSE(fs::exists(dir_ + "/termed")) << "no SIGTERM before the notice has passed";
  std::ifstream warned(dir_ + "/warned");
  std::string word;
  long long term_at = 0, kill_at = 0;
  warned >> word >> term_at;
  EXPECT_EQ(word, "term_at");
  warned >> word >> kill_at;
  EXPECT_EQ(word, "kill_at");
  EXPECT_GE(kill_at - term_at, 1) << "SIGKILL is due the grace after the SIGTERM";
  RunStatus s = wait_exit(runner, {1, 1});
  EXPECT_GE(Clock::now() - t0, milliseconds(600));
  EXPECT_TRUE(fs::exists(dir_ + "/termed"));
  EXPECT_EQ(s.exit_code, 0) << "it ended on the SIGTERM, within the grace";
  EXPECT_TRUE(s.stop_requested);
}

// The job's ALLOT_STOP_SIGNAL outlives the agent: a runner that recovered the run still warns
// the job with it.
TEST_F(RunnerTest, StopWithNoticeAfterTheAgentRestartedStillSendsTheJobsSignal) {
  {
    Runner first(options_);
    LaunchSpec spec = sh(1,
                         "trap 'touch warned' USR2; trap 'touch termed; exit 0' TERM; touch ready; "
                         "while :; do sleep 0.05; done");
    spec.env["ALLOT_STOP_SIGNAL"] = "SIGUSR2";
    launch(first, spec);
    ASSERT_TRUE(wait_file("ready"));
  }
  Runner second(options_);
  ASSERT_TRUE(find(second.recover(), {1, 1}));
  second.stop({1, 1}, milliseconds(2000), milliseconds(400));
  ASSERT_TRUE(wait_file("warned")) << "the recovered run was warned with its own signal";
  EXPECT_FALSE(fs::exists(dir_ + "/termed"));
  RunStatus s = wait_exit(second, {1, 1});
  EXPECT_TRUE(fs::exists(dir_ + "/termed"));
  EXPECT_EQ(s.exit_code, 0);
}

TEST_F(RunnerTest, StopWithNoticeWithoutASignalOnlyWritesTheNotice) {
  Runner runner(options_);
  // USR1's default action would end the job: without ALLOT_STOP_SIGNAL nothing is sent.
  launch(
      runner,
      sh(1,
         "trap 'touch termed; exit 0' TERM; echo \"$ALLOT_STOP_NOTICE\" > p.tmp && mv p.tmp path; "
         "touch ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(wait_file("ready"));
  ASSERT_TRUE(wait_file("path"));
  runner.stop({1, 1}, milliseconds(2000), milliseconds(400));
  std::ifstream path_file(dir_ + "/path");
  std::string notice;
  path_file >> notice;
  EXPECT_TRUE(eventually([&] { return fs::exists(notice); })) << notice;
  auto during = find(runner.poll(), {1, 1});
  ASSERT_TRUE(during);
  EXPECT_EQ(during->phase, RunPhase::Stopping);
  RunStatus s = wait_exit(runner, {1, 1});
  EXPECT_TRUE(fs::exists(dir_ + "/termed"));
  EXPECT_EQ(s.exit_code, 0);
}

TEST(StopSignal, Names) {
  EXPECT_EQ(stop_signal("USR1"), SIGUSR1);
  EXPECT_EQ(stop_signal("SIGUSR2"), SIGUSR2);
  EXPECT_EQ(stop_signal("KILL"), 0);
  EXPECT_EQ(stop_signal(""), 0);
}

TEST_F(RunnerTest, KillIsImmediate) {
  Runner runner(options_);
  launch(runner, sh(1, "trap '' TERM; touch ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(wait_file("ready"));
  runner.kill({1, 1});
  RunStatus s = wait_exit(runner, {1, 1});
  EXPECT_EQ(s.exit_code, 137);
  EXPECT_TRUE(s.stop_requested);
}

TEST_F(RunnerTest, ProcessesListTheTree) {
  Runner runner(options_);
  RunStatus s = launch(runner, sh(1, "sleep 30 & echo $! > child.pid; wait"));
  ASSERT_TRUE(wait_file("child.pid"));
  const pid_t child = std::stoi(slurp(dir_ + "/child.pid"));
  std::vector<pid_t> pids;
  ASSERT_TRUE(eventually([&] {
    pids = runner.processes({1, 1});
    return std::find(pids.begin(), pids.end(), child) != pids.end();
  }));
  EXPECT_NE(std::find(pids.begin(), pids.end(), s.pid), pids.end());
  const RunKey key{1, 1};
  EXPECT_EQ(runner.processes()[key], runner.processes(key));
  EXPECT_TRUE(runner.processes({9, 9}).empty());
  runner.kill({1, 1});
  wait_exit(runner, {1, 1});
  EXPECT_TRUE(runner.processes({1, 1}).empty());
}

TEST_F(RunnerTest, WhatAJobLeavesBehindIsKilledWhenItEnds) {
  Runner runner(options_);
  launch(runner, sh(1, "sleep 30 & echo $! > child.pid"));
  wait_exit(runner, {1, 1});
  const pid_t child = std::stoi(slurp(dir_ + "/child.pid"));
  EXPECT_TRUE(eventually([&] { return !process_alive(child, 0); }));
}

TEST_F(RunnerTest, GrandchildEscapingTheSessionIsStillKilled) {
  Runner runner(options_);
  if (runner.capabilities().cgroup.empty() && runner.capabilities().devices_cgroup.empty()) {
    GTEST_SKIP() << "no cgroup to follow a process that leaves the session: " << runner.isolation();
  }
  if (access("/usr/bin/setsid", X_OK) != 0) GTEST_SKIP() << "no setsid(1) here";
  launch(runner, sh(1,
                    "setsid sh -c 'trap \"\" TERM; echo $$ > grandchild.pid; "
                    "while :; do sleep 0.05; done' & "
                    "while [ ! -s grandchild.pid ]; do sleep 0.01; done; sleep 30"));
  ASSERT_TRUE(wait_file("grandchild.pid"));
  pid_t grandchild = 0;
  ASSERT_TRUE(eventually([&] {
    const std::string text = slurp(dir_ + "/grandchild.pid");
    if (text.empty() || text.back() != '\n') return false;
    grandchild = std::stoi(text);
    return true;
  }));
  auto stat = read_proc_stat(grandchild);
  ASSERT_TRUE(stat);
  auto job = find(runner.poll(), {1, 1});
  ASSERT_TRUE(job);
  EXPECT_NE(stat->session, job->pid) << "the grandchild left the job's session";
  std::vector<pid_t> pids = runner.processes({1, 1});
  EXPECT_NE(std::find(pids.begin(), pids.end(), grandchild), pids.end())
      << "the cgroup still lists it";
  runner.stop({1, 1}, milliseconds(200));
  wait_exit(runner, {1, 1});
  EXPECT_TRUE(eventually([&] { return !process_alive(grandchild, stat->start_ticks); }));
}

// Job 1 is denied /dev/zero (and a device missing here), job 2 is not: 1 fails with EPERM, 2 reads.
void RunnerTest::expect_device_denied_to_one_job(Runner& runner) {
  LaunchSpec denied = sh(1, "head -c 1 /dev/zero > /dev/null");
  denied.denied_devices = {"/dev/zero", "/dev/nonexistent-gpu"};
  RunStatus a = launch(runner, denied);
  launch(runner, sh(2, "head -c 1 /dev/zero > /dev/null"));
  EXPECT_NE(wait_exit(runner, {1, 1}).exit_code, 0);
  EXPECT_NE(slurp(a.stderr_path).find("Operation not permitted"), std::string::npos)
      << slurp(a.stderr_path);
  EXPECT_EQ(wait_exit(runner, {2, 1}).exit_code, 0) << "another job still may";
}

TEST_F(RunnerTest, DeniedDeviceCannotBeOpened) {
  Runner runner(options_);
  if (runner.capabilities().devices_cgroup.empty()) {
    GTEST_SKIP() << "no cgroup v1 devices controller to write to: " << runner.isolation();
  }
  expect_device_denied_to_one_job(runner);
}

// The same on cgroup v2 alone: a device program (eBPF) on the run's cgroup refuses the device.
TEST_F(RunnerTest, DeniedDeviceCannotBeOpenedUnderTheCgroupV2Program) {
  RunnerOptions bpf = options_;
  bpf.devices_cgroup_root = "bpf";
  Runner runner(bpf);
  if (runner.capabilities().devices_cgroup.empty()) {
    GTEST_SKIP() << "no cgroup v2 device program here: " << runner.isolation();
  }
  EXPECT_NE(runner.isolation().find("devices: cgroup v2 device program (eBPF) at "),
            std::string::npos)
      << runner.isolation();
  expect_device_denied_to_one_job(runner);
}

TEST_F(RunnerTest, MemoryLimitIsEnforced) {
  Runner runner(options_);
  if (access("/usr/bin/perl", X_OK) != 0) GTEST_SKIP() << "no perl to allocate memory with";
  const std::string hog = "perl -e '$x = \"x\" x (128 * 1024 * 1024); print length($x)'";
  LaunchSpec limited = sh(1, hog);
  limited.memory_mib = 48;
  launch(runner, limited);
  launch(runner, sh(2, hog));
  EXPECT_NE(wait_exit(runner, {1, 1}).exit_code, 0) << runner.isolation();
  RunStatus free = wait_exit(runner, {2, 1});
  EXPECT_EQ(free.exit_code, 0) << "the same job without a limit allocates";
  EXPECT_EQ(slurp(free.stdout_path), "134217728");
}

TEST_F(RunnerTest, CgroupLimitsAreWritten) {
  Runner runner(options_);
  const Isolation& iso = runner.capabilities();
  if (!iso.memory_limit && !iso.cpu_limit) {
    GTEST_SKIP() << "no cgroup v2 memory or cpu controller here: " << runner.isolation();
  }
  LaunchSpec spec = sh(1, "while [ ! -e go ]; do sleep 0.02; done");
  spec.memory_mib = 512;
  spec.cpus = 1.5;
  launch(runner, spec);
  const std::string dir = iso.cgroup + "/1.1";
  if (iso.memory_limit) {
    EXPECT_EQ(slurp(dir + "/memory.max"), "536870912\n");
  }
  if (iso.cpu_limit) {
    EXPECT_EQ(slurp(dir + "/cpu.max"), "150000 100000\n");
  }
  std::ofstream(dir_ + "/go") << "";
  wait_exit(runner, {1, 1});
  EXPECT_TRUE(eventually([&] { return !fs::exists(dir); })) << "the shim removes the run's cgroup";
}

TEST_F(RunnerTest, GpuJobsGetNoAddressSpaceLimit) {
  Runner runner(options_);
  if (runner.capabilities().memory_limit) GTEST_SKIP() << "memory is limited by cgroup v2 here";
  if (access("/usr/bin/perl", X_OK) != 0) GTEST_SKIP() << "no perl to allocate memory with";
  LaunchSpec gpu_job = sh(1, "perl -e '$x = \"x\" x (128 * 1024 * 1024); print length($x)'");
  gpu_job.memory_mib = 48;
  gpu_job.env = {{"CUDA_VISIBLE_DEVICES", "GPU-fake-n01-0"}};
  launch(runner, gpu_job);
  EXPECT_EQ(wait_exit(runner, {1, 1}).exit_code, 0)
      << "RLIMIT_AS would break CUDA, so a GPU job goes without it";
}

TEST_F(RunnerTest, RecoversARunThatKeptRunning) {
  pid_t pid = 0;
  {
    Runner first(options_);
    pid = launch(first, sh(1, "while [ ! -e go ]; do sleep 0.02; done; exit 7")).pid;
  }
  Runner second(options_);
  auto s = find(second.recover(), {1, 1});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->phase, RunPhase::Running);
  EXPECT_EQ(s->pid, pid);
  EXPECT_FALSE(second.processes({1, 1}).empty());
  std::ofstream(dir_ + "/go") << "";
  RunStatus done = wait_exit(second, {1, 1});
  EXPECT_EQ(done.exit_code, 7);
}

TEST_F(RunnerTest, RecoversARunThatEndedMeanwhile) {
  std::string exit_file;
  {
    Runner first(options_);
    RunStatus s = launch(first, sh(1, "exit 5"));
    exit_file = fs::path(s.stdout_path).parent_path() / "exit";
  }
  ASSERT_TRUE(eventually([&] { return fs::exists(exit_file); }));
  Runner second(options_);
  auto s = find(second.recover(), {1, 1});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->phase, RunPhase::Exited);
  EXPECT_EQ(s->exit_code, 5);
}

TEST_F(RunnerTest, RecoveredStopStillEscalates) {
  {
    Runner first(options_);
    launch(first, sh(1, "trap '' TERM; touch ready; while :; do sleep 0.05; done"));
    ASSERT_TRUE(wait_file("ready"));
    first.stop({1, 1}, milliseconds(200));
  }
  Runner second(options_);
  auto s = find(second.recover(), {1, 1});
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->stop_requested);
  RunStatus done = wait_exit(second, {1, 1});
  EXPECT_EQ(done.exit_code, 137) << "the new runner sent the SIGKILL that was due";
  EXPECT_TRUE(done.stop_requested);
}

TEST_F(RunnerTest, ReusedPidIsNotTakenForTheRun) {
  // A process that is not the run, with the pid the run's record names.
  pid_t other = 0;
  char* argv[] = {const_cast<char*>("sleep"), const_cast<char*>("30"), nullptr};
  ASSERT_EQ(posix_spawn(&other, "/bin/sleep", nullptr, nullptr, argv, environ), 0);
  auto stat = read_proc_stat(other);
  ASSERT_TRUE(stat);
  const RunFiles files{dir_ + "/state/runs/42.1"};
  fs::create_directories(files.dir);
  PidRecord stale;
  stale.job_pid = other;
  stale.job_start = stat->start_ticks + 12345;  // it started at another time: not the run
  stale.shim_pid = other;
  stale.shim_start = stat->start_ticks + 12345;
  stale.started_ms = epoch_ms() - 60000;
  ASSERT_TRUE(write_pid_record(files, stale));

  Runner runner(options_);
  auto s = find(runner.recover(), {42, 1});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->phase, RunPhase::Exited);
  EXPECT_FALSE(s->exit_code) << "its exit status is unknown";
  EXPECT_EQ(s->error, "the shim ended without recording the exit status");
  EXPECT_TRUE(runner.processes({42, 1}).empty());
  runner.kill({42, 1});
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_TRUE(process_alive(other, stat->start_ticks)) << "the other process was not signalled";
  ::kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
}

TEST_F(RunnerTest, ForgetDropsTheStateButKeepsTheLogs) {
  Runner runner(options_);
  RunStatus s = launch(runner, sh(1, "echo hi"));
  wait_exit(runner, {1, 1});
  runner.forget({1, 1});
  EXPECT_FALSE(find(runner.poll(), {1, 1}));
  EXPECT_EQ(slurp(s.stdout_path), "hi\n");
  Runner again(options_);
  EXPECT_FALSE(find(again.recover(), {1, 1})) << "a forgotten run is not recovered";
  RunStatus second = launch(again, sh(1, "echo again"));
  wait_exit(again, {1, 1});
  EXPECT_EQ(slurp(second.stdout_path), "hi\nagain\n") << "logs are appended";
}

TEST_F(RunnerTest, PruneRemovesOnlyOldForgottenRuns) {
  Runner runner(options_);
  RunStatus old_run = launch(runner, sh(1, "echo old"));
  RunStatus kept = launch(runner, sh(2, "echo kept"));
  RunStatus live = launch(runner, sh(3, "sleep 30"));
  wait_exit(runner, {1, 1});
  wait_exit(runner, {2, 1});
  runner.forget({1, 1});
  runner.forget({2, 1});
  // Run 1 was last written to a day ago; run 2 just now; run 3 still runs.
  const auto day_ago = std::filesystem::file_time_type::clock::now() - std::chrono::hours(24);
  const auto dir1 = std::filesystem::path(old_run.stdout_path).parent_path();
  for (const auto& f : std::filesystem::directory_iterator(dir1)) {
    std::filesystem::last_write_time(f.path(), day_ago);
  }
  std::filesystem::last_write_time(dir1, day_ago);
  EXPECT_EQ(runner.prune(std::chrono::hours(1)), 1);
  EXPECT_FALSE(std::filesystem::exists(dir1));
  EXPECT_TRUE(std::filesystem::exists(kept.stdout_path));
  EXPECT_TRUE(std::filesystem::exists(live.stdout_path));
  // A run not forgotten is never pruned, however old.
  const auto dir3 = std::filesystem::path(live.stdout_path).parent_path();
  std::filesystem::last_write_time(dir3, day_ago);
  EXPECT_EQ(runner.prune(std::chrono::seconds(0)), 1);  // only run 2, forgotten
  EXPECT_TRUE(std::filesystem::exists(live.stdout_path));
  runner.kill({3, 1});
  wait_exit(runner, {3, 1});
}

TEST_F(RunnerTest, ContainerTemplate) {
  Runner runner(options_);
  LaunchSpec spec = sh(1, "true");
  spec.container_template =
      "/bin/echo run --device={devices} --env={env} -w {workdir} {image} "
      "{command}";
  spec.container_image = "ghcr.io/lab/train:1";
  spec.gpu_uuids = {"GPU-a", "GPU-b"};
  spec.env = {{"SEED", "1"}};
  RunStatus s = launch(runner, spec);
  wait_exit(runner, {1, 1});
  EXPECT_EQ(slurp(s.stdout_path),
            "run --device=nvidia.com/gpu=GPU-a --device=nvidia.com/gpu=GPU-b "
            "--env=SEED=1 -w " +
                dir_ + " ghcr.io/lab/train:1 /bin/sh -c true\n");
  spec.key.job = 2;
  spec.container_template = "podman run {image}";
  EXPECT_EQ(runner.launch(spec).error().field, "container_template");
}

TEST_F(RunnerTest, IsolationIsDescribed) {
  Runner runner(options_);
  const std::string d = runner.isolation();
  EXPECT_TRUE(d.starts_with("cgroup v2 at ") || d.starts_with("process group + rlimits: ")) << d;
  EXPECT_NE(d.find(", devices: "), std::string::npos) << d;
  RunnerOptions none = options_;
  none.cgroup_root = "none";
  none.devices_cgroup_root = "none";
  Runner plain(none);
  EXPECT_EQ(plain.isolation(),
            "process group + rlimits: cgroup v2 off by configuration (memory by RLIMIT_AS for "
            "jobs without GPUs, no CPU limit), devices: not isolated (device isolation off by "
            "configuration)");
  // Without any cgroup the tree is still stopped through its session.
  launch(plain, sh(1, "trap '' TERM; sleep 30 & touch ready; while :; do sleep 0.05; done"));
  ASSERT_TRUE(wait_file("ready"));
  EXPECT_GE(plain.processes({1, 1}).size(), 2u);
  plain.stop({1, 1}, milliseconds(100));
  EXPECT_EQ(wait_exit(plain, {1, 1}).exit_code, 137);
}

}  // namespace
}  // namespace allot::agent
