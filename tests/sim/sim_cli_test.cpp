// `allot sim --workload lab` end to end: the binary runs the model, says which regime its figures
// come from (table and report.json), writes timings.json, and refuses bad lab options clearly.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

struct Ran {
  int status = -1;
  std::string output;
};

Ran run(const std::string& args) {
  Ran r;
  const std::string cmd = std::string(ALLOT_BIN) + " sim " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

class SimCliLab : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("allot-sim-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // `allot sim ARGS --quiet --out OUT`, which must succeed; its report.json.
  static nlohmann::json report_of(const std::string& args, const std::filesystem::path& out) {
    const Ran r = run(args + " --quiet --out " + out.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return r.status == 0 ? read_json(out / "report.json") : nlohmann::json::object();
  }
  std::filesystem::path dir_;
};

TEST_F(SimCliLab, OpenLoopRunSaysItsRegime) {
  const Ran r =
      run("--workload lab --days 1 --load 1.5 --seed 3 --policies fifo,fairshare "
          "--quiet --out " +
          dir_.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("regime: open loop, load 1.50x, 1 days"), std::string::npos) << r.output;
  const auto rep = read_json(dir_ / "report.json");
  EXPECT_EQ(rep["inputs"]["regime"], "open loop, load 1.50x, 1 days");
  EXPECT_EQ(rep["inputs"]["lab_model"]["regime"], "open");
  EXPECT_EQ(rep["inputs"]["cluster"]["gpus"], 1024);
  ASSERT_EQ(rep["policies"].size(), 2u);
  for (const auto& p : rep["policies"]) {
    EXPECT_GT(p["jobs"]["admitted"].get<int>(), 500);
    EXPECT_EQ(p["period"]["end_s"], 86400) << "the run stops at the end of the arrival period";
    EXPECT_EQ(p["metrics"]["impact"]["budgets_owed"].get<int>(), 15);
    EXPECT_TRUE(p["waits"].contains("large"));
  }
  const auto t = read_json(dir_ / "timings.json");
  ASSERT_EQ(t["runs"].size(), 2u);
  EXPECT_GT(t["runs"][0]["cpu_s"].get<double>(), 0);
}

TEST_F(SimCliLab, ClosedLoopRunIsRepeatable) {
  const std::string args =
      "--workload lab --days 1 --load 2.5 --closed-loop --policies fairtree "
      "--quiet --out ";
  const Ran a = run(args + (dir_ / "a").string());
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(a.output.find("regime: closed loop, 2.50x outstanding, 1 days"), std::string::npos)
      << a.output;
  const Ran b = run(args + (dir_ / "b").string());
  ASSERT_EQ(b.status, 0) << b.output;
  std::ifstream fa(dir_ / "a" / "report.json"), fb(dir_ / "b" / "report.json");
  std::stringstream sa, sb;
  sa << fa.rdbuf();
  sb << fb.rdbuf();
  EXPECT_EQ(sa.str(), sb.str());
  const auto rep = nlohmann::json::parse(sa.str());
  EXPECT_EQ(rep["inputs"]["lab_model"]["regime"], "closed");
  // More jobs ran than the people's first ones: the loop turned.
  EXPECT_GT(rep["policies"][0]["jobs"]["admitted"].get<int>(),
            rep["inputs"]["workload"]["jobs_admitted"].get<int>());
}

TEST_F(SimCliLab, BadLabOptionsAreRefusedByName) {
  Ran r = run("--workload lab --days 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--days"), std::string::npos) << r.output;
  r = run("--workload lab --load fast");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--load"), std::string::npos) << r.output;
  r = run("--workload lab --budgets " + std::string(ALLOT_EXAMPLES_DIR) + "/budgets.yaml");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--budgets"), std::string::npos) << r.output;
  r = run("--workload " + std::string(ALLOT_EXAMPLES_DIR) + "/budgets.yaml --closed-loop");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--closed-loop"), std::string::npos) << r.output;
  r = run("--workload lab --mig-dynamic on --mig-split-unallocated sometimes");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--mig-split-unallocated"), std::string::npos) << r.output;
}

// docs/simulator.md, "Inference services": both tiers from the command line.
TEST_F(SimCliLab, ServicesBesideTheLabReportBothTiers) {
  const std::string services = std::string(ALLOT_EXAMPLES_DIR) + "/lab-services.yaml";
  const Ran r = run("--workload lab --days 1 --services " + services +
                    " --policies fairshare,fifo --quiet --out " + dir_.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("service chat: replicas available"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("training tier: impact"), std::string::npos) << r.output;
  const auto rep = read_json(dir_ / "report.json");
  EXPECT_EQ(rep["inputs"]["services"]["names"], nlohmann::json::array({"chat", "embed"}));
  for (const auto& p : rep["policies"]) {
    ASSERT_EQ(p["inference"]["services"].size(), 2u);
    const auto& chat = p["inference"]["services"][0];
    EXPECT_EQ(chat["min_replicas"], 8);
    EXPECT_GT(chat["scale_outs"].get<int>(), 0);
    EXPECT_GT(chat["replica_availability"].get<double>(), 0.5);
    EXPECT_TRUE(p["training"].contains("impact_mean"));
    EXPECT_EQ(p["period"]["end_s"], 86400);
    // The tree gained the services' budgets: 15 teams and 2 services.
    EXPECT_EQ(p["budgets"].size(), 17u);
  }
  const std::string html = [&] {
    std::ifstream in(dir_ / "report.html");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }();
  EXPECT_NE(html.find("<h2>Tiers</h2>"), std::string::npos);

  Ran bad = run("--workload lab --days 1 --services " + (dir_ / "none.yaml").string());
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("cannot open the services file"), std::string::npos) << bad.output;
  bad = run("--workload lab --days 1 --inference-share 2");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("--inference-share"), std::string::npos) << bad.output;
}

TEST_F(SimCliLab, DebugFirstSwitchOverridesEveryPreset) {
  const auto rep =
      report_of("--workload lab --days 1 --policies fifo-strict,fifo --debug-first off", dir_);
  ASSERT_EQ(rep["policies"].size(), 2u);
  for (const auto& p : rep["policies"]) {
    SCOPED_TRACE(p["policy"].get<std::string>());
    EXPECT_EQ(p["config"]["debug_jobs_first"], false);
  }
  EXPECT_EQ(rep["policies"][0]["config"]["head_of_line_blocking"], true);
  EXPECT_EQ(rep["policies"][0]["config"]["placement"], "consolidate");
  EXPECT_EQ(rep["policies"][0]["config"]["gang_shape"], "uneven");
  EXPECT_FALSE(rep["policies"][1]["config"].contains("gang_shape"));
  // Written only when it differs from the default, so that reports of presets that do not use
  // the strict rules stay as they were.
  EXPECT_FALSE(report_of("--workload lab --days 1 --policies fifo-strict --debug-first on",
                         dir_ / "on")["policies"][0]["config"]
                   .contains("debug_jobs_first"));
  const Ran bad = run("--workload lab --debug-first maybe");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("--debug-first"), std::string::npos) << bad.output;
}

// --placement fgd reaches every policy that places by best fit, and the Helios presets keep their
// own rule; the run's decisions differ from best fit's on the same model.
TEST_F(SimCliLab, PlacementSwitchReachesBestFitPolicies) {
  const auto rep = report_of(
      "--workload lab --days 2 --policies fifo-strict,fairshare,fifo --placement fgd", dir_);
  ASSERT_EQ(rep["policies"].size(), 3u);
  EXPECT_EQ(rep["policies"][0]["config"]["placement"], "consolidate");
  EXPECT_EQ(rep["policies"][1]["config"]["placement"], "fgd");
  EXPECT_EQ(rep["policies"][2]["config"]["placement"], "fgd");
  const auto best =
      report_of("--workload lab --days 2 --policies fairshare --placement best-fit", dir_ / "best");
  EXPECT_FALSE(best["policies"][0]["config"].contains("placement"));
  std::ifstream fgd_events(dir_ / "events.csv"), best_events(dir_ / "best" / "events.csv");
  std::stringstream fe, be;
  fe << fgd_events.rdbuf();
  be << best_events.rdbuf();
  std::string fairshare_fgd;
  std::istringstream lines(fe.str());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("fairshare,", 0) == 0) fairshare_fgd += line + "\n";
  }
  EXPECT_NE(fairshare_fgd, be.str().substr(be.str().find('\n') + 1))
      << "the placement rule changed no decision";
  const Ran bad = run("--workload lab --placement tightest");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("--placement"), std::string::npos) << bad.output;
}

// `allot sim fragmentation` end to end on the openb sample: the table, the three files, and a
// clear refusal of a flag it does not take and of an unknown placement.
TEST_F(SimCliLab, FragmentationExperimentWritesTheCurve) {
  const std::string data = ALLOT_TEST_DATA_DIR;
  const Ran r = run("fragmentation --workload " + data + "/openb_pods_sample_800.csv --nodes " +
                    data + "/openb_nodes_every20.csv --runs 2 --placements fgd,best-fit " +
                    "--arrive-until 110 --out " + dir_.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("unallocated GPU capacity at arrived"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("at 110% arrived: fgd leaves"), std::string::npos) << r.output;
  const auto rep = read_json(dir_ / "report.json");
  EXPECT_EQ(rep["experiment"], "fragmentation");
  EXPECT_EQ(rep["gpu_capacity"], 314);
  EXPECT_EQ(rep["runs"].size(), 4u);
  EXPECT_EQ(rep["table"][0]["placement"], "fgd");
  std::ifstream csv(dir_ / "fragmentation.csv");
  std::string header, first;
  std::getline(csv, header);
  std::getline(csv, first);
  EXPECT_EQ(header, "placement,seed,arrived_pct,unallocated_pct");
  EXPECT_EQ(first.rfind("fgd,1,1,", 0), 0u) << first;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "report.html"));

  // --gpus-only: pods without CPU or memory, so fewer kinds of request (only GPUs and shares).
  const auto gpus_dir = dir_ / "gpus-only";
  const Ran g =
      run("fragmentation --workload " + data + "/openb_pods_sample_800.csv --nodes " + data +
          "/openb_nodes_every20.csv --runs 1 --gpus-only --out " + gpus_dir.string());
  ASSERT_EQ(g.status, 0) << g.output;
  const auto kinds = rep["workload_kinds"].get<int>();
  const auto gpu_kinds = read_json(gpus_dir / "report.json")["workload_kinds"].get<int>();
  EXPECT_GT(gpu_kinds, 0);
  EXPECT_LT(gpu_kinds, kinds);

  const Ran flag = run("fragmentation --workload " + data + "/openb_pods_sample_800.csv --load 2");
  EXPECT_EQ(flag.status, 2);
  EXPECT_NE(flag.output.find("unknown flag '--load'"), std::string::npos) << flag.output;
  const Ran bad = run("fragmentation --workload " + data + "/openb_pods_sample_800.csv --nodes " +
                      data + "/openb_nodes_every20.csv --placements fgd,random");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("placements: unknown placement 'random'"), std::string::npos)
      << bad.output;
}

}  // namespace

// Without --quiet the progress goes to stderr, one line per policy, and changes nothing else: the
// report and the events are byte-identical to a --quiet run's.
TEST_F(SimCliLab, ProgressLinesOnStderrChangeNoResult) {
  const std::string base = std::string(ALLOT_BIN) +
                           " sim --workload lab --days 1 --seed 5 --policies fifo,fairshare --out ";
  std::filesystem::create_directories(dir_);
  const std::filesystem::path loud = dir_ / "loud", quiet = dir_ / "quiet";
  const std::filesystem::path err = dir_ / "stderr.txt";
  ASSERT_EQ(std::system((base + loud.string() + " >/dev/null 2>" + err.string()).c_str()), 0);
  ASSERT_EQ(std::system((base + quiet.string() + " --quiet >/dev/null 2>/dev/null").c_str()), 0);
  std::ifstream in(err);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // Each policy's last line: its simulated day, events and rate.
  for (const char* policy : {"fifo", "fairshare"}) {
    const std::string line =
        std::string(policy) + (std::string(policy) == "fifo" ? "     " : "") + "  done: day 1.0, ";
    EXPECT_NE(text.find(line), std::string::npos) << text;
  }
  EXPECT_NE(text.find("events/s"), std::string::npos) << text;
  auto bytes = [](const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  for (const char* file : {"report.json", "events.csv"}) {
    EXPECT_FALSE(bytes(loud / file).empty()) << file;
    EXPECT_EQ(bytes(loud / file), bytes(quiet / file)) << file << " differs with progress on";
  }
}
