// What keeps a job apart from the agent and from other users' jobs on a node (docs/security.md,
// "Jobs on a node"): the environment a job gets (an allowlist, never the agent's token), the
// modes of the agent's files, the owner -> account map, and (as root) jobs started as their
// owners' accounts. What needs root is skipped, saying so, where the tests do not run as root.
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "agent/accounts.h"
#include "agent/runner.h"

namespace allot::agent {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

unsigned mode_of(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 07777;  // no such file: never a mode expected
  return st.st_mode & 07777;
}

class IsolationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/allot-isolation-XXXXXX";
    dir_ = mkdtemp(tmpl);
    options_.state_dir = dir_ + "/state";
    options_.shim_binary = TEST_SHIM;
  }
  void TearDown() override {
    Runner cleanup(options_);
    for (const RunStatus& s : cleanup.recover()) {
      if (s.phase != RunPhase::Exited) cleanup.kill(s.key);
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

  static RunStatus run_to_end(Runner& runner, const LaunchSpec& spec) {
    auto started = runner.launch(spec);
    EXPECT_TRUE(started.ok()) << started.error().message();
    if (!started.ok()) return {};
    const auto until = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < until) {
      for (const RunStatus& s : runner.poll()) {
        if (s.key == spec.key && s.phase == RunPhase::Exited) return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << "job " << spec.key.job << " did not end";
    return started.value();
  }

  std::string dir_;
  RunnerOptions options_;
};

// Sets an environment variable for one test and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      unsetenv(name_.c_str());
    } else {
      setenv(name_.c_str(), old_.c_str(), 1);
    }
  }

 private:
  std::string name_, old_;
};

TEST_F(IsolationTest, NoSecretOfTheAgentReachesAJob) {
  ScopedEnv token("ALLOT_TOKEN", "allot_0123456789abcdef0123456789abcdef01234567");
  ScopedEnv aws("AWS_SECRET_ACCESS_KEY", "agent-secret-value");
  ScopedEnv lang("LANG", "C.UTF-8");
  ScopedEnv extra("NCCL_SOCKET_IFNAME", "ib0");
  options_.pass_env = {"NCCL_SOCKET_IFNAME"};
  Runner runner(options_);
  LaunchSpec spec = sh(1, "env");
  spec.env = {{"SEED", "7"}, {"ALLOT_JOB_ID", "1"}};
  RunStatus s = run_to_end(runner, spec);
  const std::string env = slurp(s.stdout_path);
  EXPECT_EQ(env.find("allot_0123456789abcdef"), std::string::npos) << env;
  EXPECT_EQ(env.find("ALLOT_TOKEN"), std::string::npos) << env;
  EXPECT_EQ(env.find("agent-secret-value"), std::string::npos) << env;
  // The allowlist, what the operator passes, and the job's own variables are there.
  EXPECT_NE(env.find("PATH="), std::string::npos) << env;
  EXPECT_NE(env.find("LANG=C.UTF-8"), std::string::npos) << env;
  EXPECT_NE(env.find("NCCL_SOCKET_IFNAME=ib0"), std::string::npos) << env;
  EXPECT_NE(env.find("SEED=7"), std::string::npos) << env;
  EXPECT_NE(env.find("ALLOT_JOB_ID=1"), std::string::npos) << env;
}

TEST(JobBaseEnvironment, IsTheAllowlistOnly) {
  std::vector<std::string> agent = {
      "PATH=/usr/bin", "HOME=/root",       "USER=root",           "TZ=UTC",  "LC_ALL=C",
      "ALLOT_TOKEN=x", "SSH_AUTH_SOCK=/s", "LD_PRELOAD=/evil.so", "NOEQUALS"};
  std::vector<char*> env;
  for (auto& e : agent) env.push_back(e.data());
  env.push_back(nullptr);
  RunnerOptions o;
  EXPECT_EQ(
      job_base_environment(env.data(), o),
      (std::vector<std::string>{"PATH=/usr/bin", "HOME=/root", "USER=root", "TZ=UTC", "LC_ALL=C"}));
  // Running as the owner, the shim sets HOME, USER and LOGNAME from the owner's account.
  o.run_as_owner = true;
  o.pass_env = {"LD_PRELOAD"};
  EXPECT_EQ(
      job_base_environment(env.data(), o),
      (std::vector<std::string>{"PATH=/usr/bin", "TZ=UTC", "LC_ALL=C", "LD_PRELOAD=/evil.so"}));
}

TEST_F(IsolationTest, TheAgentsFilesArePrivate) {
  Runner runner(options_);
  RunStatus s = run_to_end(runner, sh(1, "echo out; echo err >&2"));
  const std::string run = dir_ + "/state/runs/1.1";
  EXPECT_EQ(mode_of(dir_ + "/state"), 0700u);
  EXPECT_EQ(mode_of(dir_ + "/state/runs"), 0700u);
  EXPECT_EQ(mode_of(run), 0700u);
  for (const char* f : {"stdout", "stderr", "shim.log", "pid", "exit"}) {
    EXPECT_EQ(mode_of(run + "/" + f), 0600u) << f;
  }
  EXPECT_EQ(slurp(s.stdout_path), "out\n");
}

TEST_F(IsolationTest, AJobsLocalLogIsCapped) {
  options_.log_cap_bytes = 1 << 16;
  Runner runner(options_);
  // 4 MiB of output, then its last words.
  RunStatus s =
      run_to_end(runner, sh(1, "head -c 4194304 /dev/zero | tr '\\0' x; echo; echo last words"));
  const std::string out = slurp(s.stdout_path);
  EXPECT_LT(out.size(), (1u << 16) + (1u << 14) + 400);
  EXPECT_NE(out.find("allot: stdout reached this node's cap of 65536 bytes"), std::string::npos);
  EXPECT_NE(out.find("bytes of stdout were dropped here"), std::string::npos);
  EXPECT_EQ(out.substr(out.size() - 11), "last words\n");
}

TEST(MakePrivateDir, ClosesItsOwnDirectoryButNeverASharedOne) {
  char tmpl[] = "/tmp/allot-private-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  EXPECT_TRUE(make_private_dir(dir).ok());
  EXPECT_EQ(mode_of(dir), 0700u);
  // /tmp (sticky, shared by everyone) is left as it is, and said so.
  const unsigned tmp_mode = mode_of("/tmp");
  auto refused = make_private_dir("/tmp");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().reason,
            "/tmp is shared with other users (sticky): give the agent a directory of its own");
  EXPECT_EQ(mode_of("/tmp"), tmp_mode);
  fs::remove_all(dir);
}

TEST(AccountMap, DefaultIsTheSameNameAndTheFileNamesExceptions) {
  auto m = parse_account_map(
      "# subject  account\n\nann.smith asmith\n  ci-bot   svc-ci   # the CI\n", "users.map");
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m.value().account_for("ann.smith"), "asmith");
  EXPECT_EQ(m.value().account_for("ci-bot"), "svc-ci");
  EXPECT_EQ(m.value().account_for("bob"), "bob");
}

TEST(AccountMap, MalformedLinesAreRefusedWithTheirLine) {
  struct Case {
    const char* text;
    const char* why;
  } cases[] = {
      {"ann\n", "users.map:1: 'ann' has no account after it"},
      {"ann asmith\nann other\n", "users.map:2: subject 'ann' is mapped twice"},
      {"ann asmith extra\n",
       "users.map:1: expected 'SUBJECT ACCOUNT', found more after the account"},
      {"ann -rf\n", "users.map:1: account '-rf' is not an account name"},
      {"a/b x\n", "users.map:1: subject 'a/b' is not a name"},
  };
  for (const auto& c : cases) {
    auto m = parse_account_map(c.text, "users.map");
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_EQ(m.error().field, "user_map");
    EXPECT_EQ(m.error().reason, c.why);
  }
  EXPECT_FALSE(load_account_map("/nonexistent/users.map").ok());
}

TEST_F(IsolationTest, AnOwnerWithoutAnAccountFailsAndNeverRunsAsTheAgent) {
  // The lookup comes before any change of identity, so this needs no root.
  options_.run_as_owner = true;
  options_.accounts.exceptions = {{"ann", "no-such-account-allot"}};
  Runner runner(options_);
  LaunchSpec spec = sh(1, "touch " + dir_ + "/ran");
  spec.owner = "ann";
  RunStatus s = run_to_end(runner, spec);
  EXPECT_EQ(s.exit_code, 127);
  EXPECT_EQ(s.error,
            "cannot run as the job's owner ann: no account 'no-such-account-allot' on this node "
            "(mapped from ann)");
  EXPECT_NE(slurp(s.stderr_path).find("no account 'no-such-account-allot'"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ + "/ran"));
  // A job without an owner is not started at all.
  LaunchSpec nobody = sh(2, "true");
  auto refused = runner.launch(nobody);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().field, "owner");
}

TEST_F(IsolationTest, AsRootAJobRunsAsItsOwnersAccount) {
  if (geteuid() != 0)
    GTEST_SKIP() << "starting jobs as other accounts needs root (uid " << geteuid() << ")";
  const struct passwd* pw = getpwnam("nobody");
  if (!pw) GTEST_SKIP() << "no account 'nobody' here to run a job as";
  const uid_t uid = pw->pw_uid;
  const gid_t gid = pw->pw_gid;
  options_.run_as_owner = true;
  options_.accounts.exceptions = {{"ann", "nobody"}};
  Runner runner(options_);
  // /tmp: a directory nobody may enter (the test's own is root's 0700).
  LaunchSpec spec =
      sh(1,
         "echo \"$(id -u) $(id -g) $HOME $USER $LOGNAME $(pwd)\"; "
         "ls " +
             dir_ +
             "/state >/dev/null 2>&1 && echo state-readable; "
             "cat /proc/1/environ >/dev/null 2>&1 && echo init-environ-readable; true");
  spec.workdir = "/tmp";
  spec.owner = "ann";
  RunStatus s = run_to_end(runner, spec);
  EXPECT_EQ(s.exit_code, 0) << s.error << slurp(s.stderr_path);
  EXPECT_EQ(slurp(s.stdout_path), std::to_string(uid) + " " + std::to_string(gid) + " " +
                                      pw->pw_dir + " nobody nobody /tmp\n");
  // A workdir the owner may not enter is refused as the owner would be.
  LaunchSpec locked = sh(2, "true");
  locked.workdir = dir_ + "/state";
  locked.owner = "ann";
  s = run_to_end(runner, locked);
  EXPECT_EQ(s.exit_code, 127);
  EXPECT_EQ(s.error, "cannot enter the working directory '" + dir_ + "/state': Permission denied");
}

}  // namespace
}  // namespace allot::agent
