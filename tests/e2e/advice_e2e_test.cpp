// End to end: planted waste found by `allot advise`. A real server and agent (fake GPUs whose
// use and memory the test sets through the control directory) run five jobs as processes: two
// that use a fraction of their GPUs' memory, one whose GPUs sit idle, one whose GPUs starve
// while it busy-loops a CPU (its data pipeline), and one that uses its GPUs fully. The CLI
// names each of the first four with its reason and leaves the last one out.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>

#include "cli_run.h"
#include "test_cluster.h"

namespace allot::e2e {
namespace {

CliRun cli(const Cluster& c, const std::string& args) {
  return run_allot(args, "ALLOT_ADDR=" + c.url() + " ALLOT_TOKEN=" + c.admin());
}

// The line block of job `id` in `allot advise`'s text ("" if it is not named).
std::string block_of(const std::string& text, std::uint64_t id) {
  const std::string head = "job " + std::to_string(id) + " ";
  auto at = text.find(head);
  if (at == std::string::npos) return "";
  auto end = text.find("\njob ", at + 1);
  if (end == std::string::npos) end = text.find("\n\n", at);
  return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

TEST(AdviceEndToEnd, AdviseNamesUnderUsersIdleAndStarvedJobsButNotAFullyUsedOne) {
  TestCluster c({"--advice-min-seconds", "6"});
  c.start_server();
  c.budget("/lab/a", 1);
  c.start_agent("n1", 8, {"--telemetry-ms", "1000"});
  // Until a job's GPUs are known: busy, no memory (so no peak is planted by accident).
  auto set = [&](int gpu, const char* field, long value) {
    std::ofstream(c.control_dir("n1") + "/gpu" + std::to_string(gpu) + "." + field)
        << value << "\n";
  };
  for (int g = 0; g < 8; ++g) {
    set(g, "util_pct", 95);
    set(g, "mem_used_mib", 0);
  }
  auto submit = [&](const std::string& tag, int gpus, const std::string& body, double cpus = 0) {
    json spec = {{"budget", "/lab/a"},
                 {"gpus_per_node", gpus},
                 {"name", tag},
                 {"command", c.marked(tag, body)}};
    if (cpus > 0) spec["cpus"] = cpus;
    return c.submit(spec);
  };
  const auto small2 = submit("small2", 2, "sleep 600");
  const auto small1 = submit("small1", 1, "sleep 600");
  const auto idle = submit("idle", 1, "sleep 600");
  // A pipeline that saturates its tenth of a CPU (and more: nothing limits it here; the
  // machine may be busy, so the limit is low enough to be reached whatever it gets).
  const auto starved = submit("starved", 1, "while :; do :; done", 0.1);
  const auto full = submit("full", 2, "sleep 600");
  std::map<std::uint64_t, std::vector<int>> gpus;
  for (auto id : {small2, small1, idle, starved, full}) {
    ASSERT_TRUE(c.wait_state(id, "running")) << c.history(id);
    const json job = c.job(id);
    for (const auto& slot : job["placement"]) gpus[id].push_back(slot.value("gpu", -1));
    ASSERT_FALSE(gpus[id].empty()) << job.dump();
  }
  auto plant = [&](std::uint64_t id, long util, long mem) {
    for (int g : gpus[id]) {
      set(g, "mem_used_mib", mem);
      set(g, "util_pct", util);
    }
  };
  plant(small2, 90, 3000);   // 6 GiB of 2 x 80: one GPU would do
  plant(small1, 90, 4000);   // 4 GiB of 80: a MIG slice would do
  plant(idle, 0, 60000);     // idle GPUs, memory held
  plant(starved, 3, 60000);  // starved while its CPU spins
  plant(full, 97, 78000);    // busy and full: not named

  CliRun r;
  auto named = [&](std::uint64_t id, const std::string& reason) {
    const auto b = block_of(r.out, id);
    return b.find("  " + reason + ": ") != std::string::npos;
  };
  const bool found = eventually(
      [&] {
        r = cli(c, "advise");
        return r.code == 0 && named(small2, "oversized-memory") &&
               named(small1, "oversized-memory") && named(idle, "idle") &&
               named(starved, "starved");
      },
      60000ms);
  std::string where;
  for (const auto& [id, gs] : gpus) {
    where += "job " + std::to_string(id) + ":";
    for (int g : gs) where += " " + std::to_string(g);
    where += "\n";
  }
  EXPECT_TRUE(found) << r.out << where;
  EXPECT_EQ(block_of(r.out, full), "") << r.out;
  // Each for its own reason only.
  EXPECT_FALSE(named(idle, "starved")) << r.out;
  EXPECT_FALSE(named(starved, "idle")) << r.out;
  EXPECT_FALSE(named(small2, "idle")) << r.out;
  EXPECT_NE(block_of(r.out, small2).find("1 GPU would hold it"), std::string::npos) << r.out;
  EXPECT_NE(block_of(r.out, small1).find("MIG "), std::string::npos) << r.out;
  // The JSON and the job's own `show` carry the same advice.
  auto j = cli(c, "advise --json --budget /lab/a");
  ASSERT_EQ(j.code, 0) << j.out;
  auto report = json::parse(j.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << j.out;
  EXPECT_EQ(report["jobs"].size(), 4u) << j.out;
  auto show = cli(c, "show " + std::to_string(starved));
  EXPECT_NE(show.out.find("advice:\n  starved: "), std::string::npos) << show.out;
  // Bad input: a clear error naming the flag, no crash.
  auto bad = cli(c, "advise --days x");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.out.find("days"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace allot::e2e
