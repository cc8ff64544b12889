// Slurm's habits end to end through the `allot` CLI: a real server, a real agent (fake GPUs) and
// jobs as real processes. hold -> release -> run; --after orders B after A (and a failed A fails
// B); an array's tasks each see their own index.
#include <fcntl.h>
#include <gtest/gtest.h>

#include "test_cluster.h"

namespace allot::e2e {
namespace {

struct Out {
  int code = -1;
  std::string out, err;
};

class Habits : public ::testing::Test {
 protected:
  void SetUp() override {
    c.start_server();
    c.budget("/lab/a", 1);
    c.start_agent("n1", 8);
  }
  // Runs `allot args...` as the administrator against the cluster's server.
  Out allot(const std::vector<std::string>& args) {
    const std::string out = c.dir() + "/cli.out", err = c.dir() + "/cli.err";
    pid_t pid = ::fork();
    if (pid == 0) {
      int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(o, 1);
      ::dup2(e, 2);
      ::setenv("HOME", c.dir().c_str(), 1);
      ::setenv("ALLOT_ADDR", c.url().c_str(), 1);
      ::setenv("ALLOT_TOKEN", c.admin().c_str(), 1);
      std::vector<char*> argv{const_cast<char*>(ALLOT_BIN)};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(ALLOT_BIN, argv.data());
      _exit(127);
    }
    int st = 0;
    ::waitpid(pid, &st, 0);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(out), slurp(err)};
  }
  // `allot submit ARGS --json -- sh -c BODY`: the new job's id (or the array's first).
  std::uint64_t submit(std::vector<std::string> args, const std::string& body) {
    std::vector<std::string> all = {"submit", "--budget", "/lab/a", "--json"};
    all.insert(all.end(), args.begin(), args.end());
    all.insert(all.end(), {"--", "/bin/sh", "-c", body});
    auto r = allot(all);
    EXPECT_EQ(r.code, 0) << r.err;
    auto j = json::parse(r.out, nullptr, false);
    if (!j.is_object()) return 0;
    return j.contains("array_job_id") ? j["array_job_id"].get<std::uint64_t>()
                                      : j.value("id", std::uint64_t{0});
  }
  TestCluster c{{"--stop-grace-seconds", "1"}};
};

TEST_F(Habits, HoldThenReleaseThenRun) {
  const auto id = submit({"--hold", "--name", "held"}, "touch " + c.out("held.ran"));
  ASSERT_GT(id, 0u);
  const auto sid = std::to_string(id);
  auto why = allot({"why", sid});
  EXPECT_EQ(why.code, 0) << why.err;
  EXPECT_NE(why.out.find("is pending: held (by admin)"), std::string::npos) << why.out;
  auto ls = allot({"ls"});
  EXPECT_NE(ls.out.find("held (by admin)"), std::string::npos) << ls.out;
  EXPECT_NE(allot({"show", sid}).out.find("held (by admin)"), std::string::npos);
  std::this_thread::sleep_for(1s);  // several cycles: a held job must not start
  EXPECT_EQ(c.state(id), "pending");
  EXPECT_FALSE(std::filesystem::exists(c.out("held.ran")));
  auto rel = allot({"release", sid});
  EXPECT_EQ(rel.code, 0) << rel.err;
  EXPECT_NE(rel.out.find("released"), std::string::npos) << rel.out;
  ASSERT_TRUE(c.wait_state(id, "succeeded")) << c.history(id);
  EXPECT_TRUE(std::filesystem::exists(c.out("held.ran")));
  // Ended now: holding it is refused (exit 1) with the reason.
  auto late = allot({"hold", sid});
  EXPECT_EQ(late.code, 1);
  EXPECT_NE(late.err.find("already ended (succeeded)"), std::string::npos) << late.err;
  EXPECT_EQ(allot({"release", "nope"}).code, 2);
  EXPECT_EQ(allot({"hold"}).code, 2);
}

TEST_F(Habits, AfterStartsBOnlyOnceASucceededAndAFailedAFailsB) {
  const auto a = submit({"--gpus", "1"}, "sleep 1.5; date +%s.%N > " + c.out("a.end"));
  ASSERT_GT(a, 0u);
  const auto b =
      submit({"--gpus", "1", "--after", std::to_string(a)}, "date +%s.%N > " + c.out("b.start"));
  ASSERT_GT(b, 0u);
  EXPECT_TRUE(eventually([&] {
    return allot({"why", std::to_string(b)}).out.find("waiting for job " + std::to_string(a)) !=
           std::string::npos;
  })) << allot({"why", std::to_string(b)}).out;
  ASSERT_TRUE(c.wait_state(b, "succeeded")) << c.history(b);
  EXPECT_EQ(c.state(a), "succeeded");
  EXPECT_LE(std::stod(slurp(c.out("a.end"))), std::stod(slurp(c.out("b.start"))))
      << "B started before A ended";

  const auto bad = submit({"--gpus", "1"}, "exit 3");
  const auto after_bad =
      submit({"--gpus", "1", "--after", std::to_string(bad)}, "touch " + c.out("never.ran"));
  const auto any = submit({"--gpus", "1", "--after-any", std::to_string(bad)}, "exit 0");
  ASSERT_TRUE(c.wait_state(after_bad, "failed")) << c.history(after_bad);
  EXPECT_EQ(c.job(after_bad)["reason"], "dependency " + std::to_string(bad) + " failed (failed)");
  EXPECT_FALSE(std::filesystem::exists(c.out("never.ran")));
  ASSERT_TRUE(c.wait_state(any, "succeeded")) << c.history(any);
  // A dependency the caller cannot name is refused at submit, naming the flag's field.
  auto unknown = allot({"submit", "--budget", "/lab/a", "--after", "999999", "--", "true"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.err.find("after: no job 999999"), std::string::npos) << unknown.err;
  EXPECT_EQ(allot({"submit", "--budget", "/lab/a", "--after", "x", "--", "true"}).code, 2);
}

TEST_F(Habits, AnArrayOfThreeTasksEachSeesItsOwnIndex) {
  auto r =
      allot({"submit", "--budget", "/lab/a", "--gpus", "1", "--name", "sweep", "--array", "0-2",
             "--", "/bin/sh", "-c",
             "echo $ALLOT_ARRAY_JOB_ID $ALLOT_JOB_NAME > " + c.out("task") + "$ALLOT_ARRAY_INDEX"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("3 tasks"), std::string::npos) << r.out;
  const auto first = std::stoull(r.out.substr(r.out.find("array ") + 6));
  for (int i = 0; i < 3; ++i) {
    const auto id = first + static_cast<std::uint64_t>(i);
    ASSERT_TRUE(c.wait_state(id, "succeeded")) << c.history(id);
    EXPECT_EQ(slurp(c.out("task" + std::to_string(i))),
              std::to_string(first) + " sweep[" + std::to_string(i) + "]\n");
  }
  EXPECT_FALSE(std::filesystem::exists(c.out("task3")));
  auto big = allot({"submit", "--budget", "/lab/a", "--array", "0-10000", "--", "true"});
  EXPECT_EQ(big.code, 1);
  EXPECT_NE(big.err.find("array: at most 10000 tasks"), std::string::npos) << big.err;
}

}  // namespace
}  // namespace allot::e2e
