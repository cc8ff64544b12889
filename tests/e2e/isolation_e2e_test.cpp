// End to end, as root: an `allot agent` that starts each job as its owner's account. Two users'
// jobs run as two unprivileged system accounts (ann -> nobody, bob -> daemon, through a user map);
// ann's job tries to read bob's files, signal bob's process, and read the agent's token and the
// server's database and admin token, and must fail at each. A user without an account on the node
// gets a failed job that says why. Nothing here creates or changes system accounts.
// Skipped, saying so, where the tests do not run as root or those accounts do not exist.
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_cluster.h"

namespace allot::e2e {
namespace {

unsigned mode_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 07777;
  return st.st_mode & 07777;
}

struct Account {
  uid_t uid = 0;
  gid_t gid = 0;
};

std::optional<Account> account(const char* name) {
  const struct passwd* pw = ::getpwnam(name);
  if (!pw || pw->pw_uid == 0) return std::nullopt;
  return Account{pw->pw_uid, pw->pw_gid};
}

// A directory only `a` may use, for its job to start in.
std::string private_dir(const std::string& path, const Account& a) {
  std::filesystem::create_directories(path);
  if (::chown(path.c_str(), a.uid, a.gid) != 0 || ::chmod(path.c_str(), 0700) != 0) {
    throw std::runtime_error("cannot prepare " + path);
  }
  return path;
}

Reply as(Cluster& c, const std::string& token, const std::string& path, const json& body) {
  httplib::Client http(c.url());
  http.set_read_timeout(10);
  auto r = http.Post(path, {{"Authorization", "Bearer " + token}}, body.dump(), "application/json");
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.raw = r->body;
  out.body = json::parse(r->body, nullptr, false);
  return out;
}

TEST(Isolation, AJobCannotReachAnotherUsersJobNorTheAgentsOrServersSecrets) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "starting jobs as their owners' accounts needs an agent running as root; "
                    "these tests run as uid "
                 << ::geteuid();
  }
  const auto nobody = account("nobody");
  const auto daemon = account("daemon");
  if (!nobody || !daemon) GTEST_SKIP() << "no unprivileged 'nobody' and 'daemon' accounts here";
  if (::getpwnam("carol"))
    GTEST_SKIP() << "an account 'carol' exists here: cannot show a missing one";

  TestCluster c;
  c.start_server();
  ASSERT_EQ(c.post("/api/v1/budgets",
                   {{"path", "/lab"}, {"share", 1}, {"members", {"ann", "bob", "carol"}}})
                .status,
            200);
  std::map<std::string, std::string> token;
  for (const char* user : {"ann", "bob", "carol"}) {
    auto t = c.post("/api/v1/tokens", {{"name", user}, {"role", "user"}});
    ASSERT_EQ(t.status, 201) << t.raw;
    token[user] = t.body["token"].get<std::string>();
  }
  const std::string map = c.dir() + "/users.map";
  std::ofstream(map) << "# subject account\nann nobody\nbob daemon\n";
  c.start_agent("n1", 8, {"--run-jobs-as", "owner", "--user-map", map});

  // Bob's job: a process that stays, its pid in bob's own directory.
  const std::string bob_dir = private_dir(c.dir() + "/work-bob", *daemon);
  auto bob =
      as(c, token["bob"], "/api/v1/jobs",
         {{"budget", "/lab"},
          {"idempotency_key", "bob-1"},
          {"gpus_per_node", 1},
          {"workdir", bob_dir},
          {"command", {"/bin/sh", "-c", "echo $$ > pid; echo bob-secret-output; exec sleep 300"}}});
  ASSERT_EQ(bob.status, 201) << bob.raw;
  const auto bob_id = bob.body["id"].get<std::uint64_t>();
  ASSERT_TRUE(c.wait_state(bob_id, "running")) << c.history(bob_id);
  pid_t bob_pid = 0;
  ASSERT_TRUE(eventually([&] {
    std::ifstream in(bob_dir + "/pid");
    return static_cast<bool>(in >> bob_pid) && bob_pid > 0;
  }));
  const std::string state = c.dir() + "/state-n1";
  const std::string bob_run = state + "/runs/" + std::to_string(bob_id) + ".1";

  // Ann's job tries each door; "open:" lines are the ones that must not appear.
  const std::string ann_dir = private_dir(c.dir() + "/work-ann", *nobody);
  const std::vector<std::pair<std::string, std::string>> doors = {
      {"agent-token", "cat " + c.dir() + "/n1.token"},
      {"server-db", "cat " + c.dir() + "/allot.db"},
      {"admin-token", "cat " + c.dir() + "/admin-token"},
      {"agent-state", "ls " + state},
      {"bob-run-dir", "ls " + bob_run},
      {"bob-log", "cat " + bob_run + "/stdout"},
      {"bob-workdir", "ls " + bob_dir},
      {"bob-signal", "kill -0 " + std::to_string(bob_pid)},
      {"bob-kill", "kill -KILL " + std::to_string(bob_pid)},
      {"token-in-env", "env | grep -q ALLOT_TOKEN"},
  };
  std::string script = "id -u; echo \"$HOME $USER $(pwd)\"; ";
  for (const auto& [name, cmd] : doors) {
    script += "if " + cmd + " >/dev/null 2>&1; then echo open:" + name +
              "; else echo shut:" + name + "; fi; ";
  }
  auto ann = as(c, token["ann"], "/api/v1/jobs",
                {{"budget", "/lab"},
                 {"idempotency_key", "ann-1"},
                 {"gpus_per_node", 1},
                 {"workdir", ann_dir},
                 {"command", {"/bin/sh", "-c", script}}});
  ASSERT_EQ(ann.status, 201) << ann.raw;
  const auto ann_id = ann.body["id"].get<std::uint64_t>();
  ASSERT_TRUE(c.wait_state(ann_id, "succeeded")) << c.history(ann_id);
  const std::string out = slurp(state + "/runs/" + std::to_string(ann_id) + ".1/stdout");
  EXPECT_EQ(out.rfind(std::to_string(nobody->uid) + "\n", 0), 0u) << out;
  EXPECT_NE(out.find(" nobody " + ann_dir + "\n"), std::string::npos) << out;
  for (const auto& [name, cmd] : doors) {
    EXPECT_NE(out.find("shut:" + name + "\n"), std::string::npos) << name << ":\n" << out;
    EXPECT_EQ(out.find("open:" + name), std::string::npos) << name << ":\n" << out;
  }
  EXPECT_EQ(out.find("allot_"), std::string::npos) << out;  // no token's secret printed
  // Bob's job is untouched and still runs as bob's account.
  EXPECT_EQ(::kill(bob_pid, 0), 0);
  EXPECT_EQ(c.state(bob_id), "running");
  struct stat st {};
  ASSERT_EQ(::stat(("/proc/" + std::to_string(bob_pid)).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, daemon->uid);

  // The files' modes, as docs/agent.md states them.
  EXPECT_EQ(mode_of(state), 0700u);
  EXPECT_EQ(mode_of(state + "/agent"), 0700u);
  EXPECT_EQ(mode_of(bob_run), 0700u);
  EXPECT_EQ(mode_of(bob_run + "/stdout"), 0600u);
  EXPECT_EQ(mode_of(c.dir() + "/allot.db"), 0600u);
  EXPECT_EQ(mode_of(c.dir() + "/admin-token"), 0600u);
  EXPECT_EQ(mode_of(c.dir() + "/allot.db.logs"), 0700u);

  // Carol has no account here: her job fails and says so; it never runs as anyone else.
  auto carol = as(c, token["carol"], "/api/v1/jobs",
                  {{"budget", "/lab"},
                   {"idempotency_key", "carol-1"},
                   {"gpus_per_node", 1},
                   {"workdir", "/tmp"},
                   {"command", {"/bin/sh", "-c", "echo ran as $(id -u)"}}});
  ASSERT_EQ(carol.status, 201) << carol.raw;
  const auto carol_id = carol.body["id"].get<std::uint64_t>();
  ASSERT_TRUE(c.wait_state(carol_id, "failed")) << c.history(carol_id);
  const std::string carol_run = state + "/runs/" + std::to_string(carol_id) + ".1";
  EXPECT_EQ(slurp(carol_run + "/stdout"), "");
  EXPECT_NE(slurp(carol_run + "/stderr")
                .find("cannot run as the job's owner carol: no account "
                      "'carol' on this node"),
            std::string::npos)
      << slurp(carol_run + "/stderr");

  ::kill(bob_pid, SIGKILL);
}

}  // namespace
}  // namespace allot::e2e
