// `allot sim` and `allot sim sweep`: the trace-driven simulator (src/sim) from the command line.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "sim/duration_text.h"
#include "sim/experiment.h"
#include "sim/reports.h"
#include "sim/sweep.h"
#include "sim/tradeoff.h"

namespace allot::cli {
namespace {

namespace sim = allot::sim;

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: allot sim [sweep] --workload FILE [--cluster FILE] [options]\n"
      "       allot sim fragmentation --workload FILE [options]  (allot sim fragmentation -h)\n"
      "\n"
      "Simulates a cluster on a workload with the real scheduling core, for several policies,\n"
      "and reports availability, occupancy, impact and utilization (docs/simulator.md).\n"
      "\n"
      "inputs:\n"
      "  --workload FILE        native JSON Lines, philly.csv, or openb_pod_list_*.csv; or\n"
      "                         'lab': the seeded lab workload model (docs/simulator.md), with\n"
      "                         its own 1,024-GPU cluster and 15-team budget tree\n"
      "  --days N               lab: days of arrivals (default 30); the run stops there\n"
      "  --closed-loop          lab: arrivals follow users, each keeping a few jobs outstanding\n"
      "  --format F             native | philly | openb (default: from the file name)\n"
      "  --cluster FILE         cluster YAML (openb: default the trace's node list)\n"
      "  --nodes FILE           openb node list (default: next to the pod list)\n"
      "  --budgets FILE         budget tree YAML (default: leaves in proportion to demand)\n"
      "                         (sweep: a comma-separated list of files is a grid axis)\n"
      "  --services FILE        inference services beside the workload, with their request\n"
      "                         load and budgets (YAML; docs/simulator.md)\n"
      "  --limit N              only the first N jobs\n"
      "  --strict               fail on the first bad record (default: skip and count)\n"
      "models:\n"
      "  --seed N               seed of every random choice (default 1)\n"
      "  --load R               compress arrivals to a demand/supply ratio of R (e.g. 2.5);\n"
      "                         lab: the model's load, 1.0 by default (closed loop: GPUs\n"
      "                         requested by outstanding jobs over the cluster's GPUs)\n"
      "  --faults               node failures: --mtbf DUR (60d) --repair DUR (6h)\n"
      "                         --unhealthy-fraction F (0.5, drained instead of lost)\n"
      "  --checkpoint DUR       resumable jobs checkpoint this often (default 30m; 0 = never "
      "lose)\n"
      "  --restart-delay DUR    a resumed job's restore time (default 5m)\n"
      "  --until DUR            stop this long after the first submission (default: when all end)\n"
      "policies:\n"
      "  --policies LIST        default fairshare,fifo,priority,fairtree (sweep: fairshare);\n"
      "                         also fifo-strict, sjf-strict: the Helios simulator's baselines\n"
      "  --lookback DUR, --max-min-runtime DUR, --margin F   override the presets\n"
      "  --burst-limit F, --unallocated-loss-ratio F, --unallocated-loss-patience DUR\n"
      "                         override the presets too (one value; 0 turns the rule off)\n"
      "  --burst-exempt-below F a budget under F x its share may fund one job of any size\n"
      "                         (default 0: only one holding no allocated GPUs)\n"
      "  --burst-exempt-max-size F  ... but only a job of at most F x its share (default 0: any)\n"
      "  --keep-non-resumable on|off  allocated non-resumable runs are not demoted when their\n"
      "                         budget goes over (default off; fairshare only; docs/design/0014)\n"
      "  --share-claims on|off  unfunded work within its budget's share may take unallocated\n"
      "                         work of budgets above theirs (default on; fairshare only)\n"
      "  --interactive-allowance N  GPUs of interactive work per person that are protected\n"
      "                         (default 0: none; 8 is the measured setting; fairshare only)\n"
      "  --interactive-stop-grace DUR  warning before an interactive job's stop, its work saved\n"
      "                         (default 0: an ordinary stop; 5m measured; fairshare only)\n"
      "  --mig-dynamic on|off   the scheduler re-partitions idle GPUs into the MIG instances\n"
      "                         waiting jobs name, and back (docs/policy.md 7.5; default off)\n"
      "  --mig-hold DUR         a GPU keeps a layout the scheduler decided this long (10m)\n"
      "  --mig-yield on|off     MIG instances of unallocated work are preempted to make GPUs\n"
      "                         whole for waiting training, down to --inference-share of the\n"
      "                         GPUs in MIG mode (docs/policy.md 7.5; default off)\n"

      "  --mig-split-unallocated on|off  a job naming a profile, with a contract and its\n"
      "                         budget below its share, may have the unallocated work on a\n"
      "                         whole GPU preempted to split it, up to --inference-share of\n"
      "                         the GPUs in MIG mode (docs/policy.md 7.5; default off)\n"
      "  --mig-reconfigure DUR  a GPU being re-partitioned is unusable this long (default 30s)\n"
      "  --placement RULE       best-fit (default) or fgd: fragmentation gradient descent over\n"
      "                         the recent mix of requests (docs/policy.md 14), for every\n"
      "                         policy that places by best fit (not the Helios presets)\n"
      "  --inference-share F    protected replicas hold at most F of the cluster (docs/policy.md\n"
      "                         15; default 0: no bound; lookback funding only)\n"
      "  --debug-first on|off   debug jobs get a pass of their own before other work (default:\n"
      "                         as the preset says: on, except fifo-strict and sjf-strict)\n"
      "sweep (allot sim sweep): comma-separated values make a grid, e.g.\n"
      "  --lookback 1d,7d,14d --max-min-runtime 2h,8h --margin 0.05,0.1 --budgets a.yaml,b.yaml\n"
      "  --plot-x COST          the trade-off plot's x axis: debug-p90 (default), batch-p90,\n"
      "                         large-p90, wait-p50, lost-gpu-hours, preemptions\n"
      "output:\n"
      "  --out DIR              write report.json, events.csv, report.html and timings.json\n"
      "  --threads N            parallel runs (default: all cores)\n"
      "  --quiet                no progress lines on stderr\n");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto comma = s.find(',', start);
    const std::string part = s.substr(start, comma == std::string::npos ? comma : comma - start);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

bool parse_durations(const std::string& text, std::vector<core::Duration>* out) {
  for (const std::string& p : split(text)) {
    auto d = sim::parse_duration(p);
    if (!d) return false;
    out->push_back(*d);
  }
  return !out->empty();
}

bool parse_numbers(const std::string& text, std::vector<double>* out) {
  for (const std::string& p : split(text)) {
    char* end = nullptr;
    const double v = std::strtod(p.c_str(), &end);
    if (!end || *end) return false;
    out->push_back(v);
  }
  return !out->empty();
}

// Progress on stderr while runs go on: one line per run (sim::progress_line), redrawn in place a
// few times a second on a terminal; elsewhere (a log) the lines every few seconds. Each run's last
// line ("done: ...") is written when all have ended. The runs only store relaxed atomics.
class Progress {
 public:
  Progress(std::vector<std::string> names, bool enabled)
      : names_(std::move(names)),
        runs_(names_.size()),
        enabled_(enabled),
        terminal_(isatty(STDERR_FILENO) != 0) {
    for (const std::string& n : names_) width_ = std::max(width_, n.size());
    if (enabled_) thread_ = std::thread([this] { loop(); });
  }
  ~Progress() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (enabled_) draw(true);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  sim::RunProgress* run(std::size_t i) { return enabled_ ? &runs_[i] : nullptr; }

 private:
  static constexpr std::size_t kMaxLines = 8;  // more runs (a sweep): the running ones and a count

  void loop() {
    const auto period = std::chrono::milliseconds(terminal_ ? 250 : 5000);
    auto last = std::chrono::steady_clock::now();
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (stop_ || std::chrono::steady_clock::now() - last < period) continue;
      last = std::chrono::steady_clock::now();
      draw(false);
    }
  }

  void draw(bool final) {
    const std::int64_t now = sim::progress_clock_ns();
    std::vector<std::string> lines;
    std::size_t done = 0, running = 0;
    for (std::size_t i = 0; i < runs_.size(); ++i) {
      const sim::ProgressSnapshot s = sim::snapshot_of(runs_[i], names_[i], now);
      done += s.done;
      running += s.started && !s.done;
      if (runs_.size() <= kMaxLines || (s.started && !s.done)) {
        lines.push_back(sim::progress_line(s, width_));
      }
    }
    if (runs_.size() > kMaxLines) {
      lines.push_back(std::to_string(done) + " of " + std::to_string(runs_.size()) +
                      " runs done, " + std::to_string(running) + " running");
    }
    std::string out;
    if (terminal_ && drawn_ > 0) out += "\x1b[" + std::to_string(drawn_) + "A\r\x1b[J";
    for (const std::string& l : lines) out += l + "\n";
    drawn_ = final ? 0 : lines.size();
    std::fputs(out.c_str(), stderr);
    std::fflush(stderr);
  }

  std::vector<std::string> names_;
  std::vector<sim::RunProgress> runs_;
  std::size_t width_ = 0;
  bool enabled_, terminal_;
  std::size_t drawn_ = 0;  // lines on the terminal to redraw over
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

bool write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace

int sim_main(int argc, char** argv) {
  if (argc > 1 && !std::strcmp(argv[1], "fragmentation")) {
    return sim_fragmentation_main(argc - 1, argv + 1);
  }
  int i = 1;
  const bool sweep = argc > 1 && !std::strcmp(argv[1], "sweep");
  if (sweep) ++i;
  sim::ExperimentSpec spec;
  sim::SweepGrid grid;
  std::string out_dir;
  bool quiet = false, policies_given = false;
  std::vector<core::Duration> lookback, max_min_runtime;
  std::vector<double> margin;
  // Single values: not grid dimensions.
  std::vector<double> burst_limit, loss_ratio, burst_exempt, burst_exempt_max;
  std::optional<bool> share_claims, keep_non_resumable;
  std::optional<int> interactive_allowance;
  std::optional<core::Duration> interactive_grace;
  std::optional<bool> mig_dynamic, mig_yield, mig_split_unallocated;
  std::optional<core::PlacementRule> placement;
  std::optional<core::Duration> mig_hold, mig_reconfigure;
  std::optional<double> inference_share;
  std::vector<core::Duration> loss_patience;
  std::optional<bool> debug_first;  // overrides every preset's debug_jobs_first
  std::vector<std::string> budget_files;
  std::string plot_x = sim::tradeoff_costs().front().name;
  int lab_days = 0;  // 0: not given
  bool closed_loop = false, until_given = false;
  auto bad = [&](const std::string& what) {
    std::fprintf(stderr, "allot sim: %s\n", what.c_str());
    return 2;
  };
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    auto need = [&](const char* name) {
      v = value();
      if (!v) std::fprintf(stderr, "allot sim: %s needs a value\n", name);
      return v != nullptr;
    };
    // An on|off switch: its value into `out`; 0, or the exit status of the refusal.
    auto on_off = [&](std::optional<bool>& out) {
      if (!need(a.c_str())) return 2;
      if (std::strcmp(v, "on") != 0 && std::strcmp(v, "off") != 0) {
        return bad("bad " + a + " '" + v + "' (expected on or off)");
      }
      out = std::strcmp(v, "on") == 0;
      return 0;
    };
    auto duration = [&](core::Duration* out) {
      auto d = sim::parse_duration(v);
      if (!d) return false;
      *out = *d;
      return true;
    };
    if (a == "--strict") {
      spec.strict = true;
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "--closed-loop") {
      closed_loop = true;
    } else if (a == "--days") {
      if (!need("--days")) return 2;
      char* end = nullptr;
      const long d = std::strtol(v, &end, 10);
      if (!end || *end || d < 1 || d > 3650) {
        return bad(std::string("--days must be a whole number of days from 1 to 3650, not '") + v +
                   "'");
      }
      lab_days = static_cast<int>(d);
    } else if (a == "--faults") {
      spec.sim.faults.enabled = true;
    } else if (a == "--workload" || a == "--trace") {
      if (!need("--workload")) return 2;
      spec.workload_path = v;
    } else if (a == "--format") {
      if (!need("--format")) return 2;
      spec.workload_format = v;
    } else if (a == "--cluster") {
      if (!need("--cluster")) return 2;
      spec.cluster_path = v;
    } else if (a == "--nodes") {
      if (!need("--nodes")) return 2;
      spec.openb_nodes_path = v;
    } else if (a == "--budgets") {
      if (!need("--budgets")) return 2;
      budget_files = split(v);
      if (budget_files.empty()) return bad("bad --budgets");
    } else if (a == "--policies") {
      if (!need("--policies")) return 2;
      spec.policies = split(v);
      policies_given = true;
    } else if (a == "--seed") {
      if (!need("--seed")) return 2;
      spec.seed = std::strtoull(v, nullptr, 10);
    } else if (a == "--load") {
      if (!need("--load")) return 2;
      char* end = nullptr;
      spec.load = std::strtod(v, &end);
      if (!end || *end || !(spec.load > 0)) {
        return bad(std::string("--load must be a positive ratio, e.g. 2.5, not '") + v + "'");
      }
    } else if (a == "--limit") {
      if (!need("--limit")) return 2;
      spec.limit = std::strtoull(v, nullptr, 10);
    } else if (a == "--threads") {
      if (!need("--threads")) return 2;
      spec.threads = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
    } else if (a == "--mtbf") {
      if (!need("--mtbf") || !duration(&spec.sim.faults.mtbf)) return bad("bad --mtbf");
      spec.sim.faults.enabled = true;
    } else if (a == "--repair") {
      if (!need("--repair") || !duration(&spec.sim.faults.repair)) return bad("bad --repair");
      spec.sim.faults.enabled = true;
    } else if (a == "--unhealthy-fraction") {
      if (!need("--unhealthy-fraction")) return 2;
      spec.sim.faults.unhealthy_fraction = std::strtod(v, nullptr);
    } else if (a == "--checkpoint") {
      if (!need("--checkpoint") || !duration(&spec.sim.cost.checkpoint_interval)) {
        return bad("bad --checkpoint");
      }
    } else if (a == "--restart-delay") {
      if (!need("--restart-delay") || !duration(&spec.sim.cost.restart_delay)) {
        return bad("bad --restart-delay");
      }
    } else if (a == "--until") {
      core::Duration d = 0;
      if (!need("--until") || !duration(&d)) return bad("bad --until");
      spec.sim.until = d;  // made absolute once the first submission is known
      until_given = true;
    } else if (a == "--lookback") {
      if (!need("--lookback") || !parse_durations(v, &lookback)) return bad("bad --lookback");
    } else if (a == "--max-min-runtime") {
      if (!need("--max-min-runtime") || !parse_durations(v, &max_min_runtime)) {
        return bad("bad --max-min-runtime");
      }
    } else if (a == "--margin") {
      if (!need("--margin") || !parse_numbers(v, &margin)) return bad("bad --margin");
    } else if (a == "--burst-limit") {
      if (!need("--burst-limit") || !parse_numbers(v, &burst_limit) || burst_limit.size() != 1) {
        return bad("bad --burst-limit (one number)");
      }
    } else if (a == "--burst-exempt-below") {
      if (!need("--burst-exempt-below") || !parse_numbers(v, &burst_exempt) ||
          burst_exempt.size() != 1 || burst_exempt.front() < 0) {
        return bad("bad --burst-exempt-below (one number >= 0)");
      }
    } else if (a == "--burst-exempt-max-size") {
      if (!need("--burst-exempt-max-size") || !parse_numbers(v, &burst_exempt_max) ||
          burst_exempt_max.size() != 1 || burst_exempt_max.front() < 0) {
        return bad("bad --burst-exempt-max-size (one number >= 0)");
      }
    } else if (a == "--keep-non-resumable") {
      if (int st = on_off(keep_non_resumable)) return st;
    } else if (a == "--share-claims") {
      if (int st = on_off(share_claims)) return st;
    } else if (a == "--interactive-allowance") {
      std::vector<double> n;
      if (!need("--interactive-allowance") || !parse_numbers(v, &n) || n.size() != 1 ||
          n.front() < 0 || n.front() > 4096 || n.front() != static_cast<int>(n.front())) {
        return bad("bad --interactive-allowance (one whole number of GPUs, 0 to 4096)");
      }
      interactive_allowance = static_cast<int>(n.front());
    } else if (a == "--interactive-stop-grace") {
      core::Duration d = 0;
      if (!need("--interactive-stop-grace") || !duration(&d)) {
        return bad("bad --interactive-stop-grace (one duration)");
      }
      interactive_grace = d;
    } else if (a == "--services") {
      if (!need("--services")) return 2;
      spec.services_path = v;
    } else if (a == "--inference-share") {
      if (!need("--inference-share")) return 2;
      char* end = nullptr;
      const double f = std::strtod(v, &end);
      if (!end || *end || !(f >= 0 && f <= 1)) {
        return bad(std::string("--inference-share must be a fraction from 0 to 1, not '") + v +
                   "'");
      }
      inference_share = f;
    } else if (a == "--mig-dynamic") {
      if (int st = on_off(mig_dynamic)) return st;
    } else if (a == "--mig-yield") {
      if (int st = on_off(mig_yield)) return st;
    } else if (a == "--mig-split-unallocated") {
      if (int st = on_off(mig_split_unallocated)) return st;
    } else if (a == "--placement") {
      if (!need("--placement")) return 2;
      if (std::strcmp(v, "best-fit") != 0 && std::strcmp(v, "fgd") != 0) {
        return bad(std::string("bad --placement '") + v + "' (expected best-fit or fgd)");
      }
      placement = std::strcmp(v, "fgd") == 0 ? core::PlacementRule::LeastFragmenting
                                             : core::PlacementRule::BestFit;
    } else if (a == "--mig-hold" || a == "--mig-reconfigure") {
      core::Duration d = 0;
      if (!need(a.c_str()) || !duration(&d)) return bad("bad " + a + " (one duration)");
      (a == "--mig-hold" ? mig_hold : mig_reconfigure) = d;
    } else if (a == "--unallocated-loss-ratio") {
      if (!need("--unallocated-loss-ratio") || !parse_numbers(v, &loss_ratio) ||
          loss_ratio.size() != 1) {
        return bad("bad --unallocated-loss-ratio (one number)");
      }
    } else if (a == "--unallocated-loss-patience") {
      if (!need("--unallocated-loss-patience") || !parse_durations(v, &loss_patience) ||
          loss_patience.size() != 1) {
        return bad("bad --unallocated-loss-patience (one duration)");
      }
    } else if (a == "--debug-first") {
      if (int st = on_off(debug_first)) return st;
    } else if (a == "--plot-x") {
      if (!need("--plot-x")) return 2;
      if (!sim::find_tradeoff_cost(v)) return bad(std::string("unknown --plot-x '") + v + "'");
      plot_x = v;
    } else if (a == "--out") {
      if (!need("--out")) return 2;
      out_dir = v;
    } else {
      std::fprintf(stderr, "allot sim: unknown option '%s'\n\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (spec.workload_path.empty()) {
    usage(stderr);
    return 2;
  }
  if (spec.workload_path == "lab") {
    sim::LabWorkloadModel m;
    m.seed = spec.seed;
    m.load = spec.load > 0 ? spec.load : 1.0;
    m.days = lab_days > 0 ? lab_days : m.days;
    m.closed_loop = closed_loop;
    spec.load = m.load;
    spec.lab = m;
  } else if (lab_days > 0 || closed_loop) {
    return bad(std::string(lab_days > 0 ? "--days" : "--closed-loop") +
               " is a parameter of the lab model: use it with --workload lab");
  }
  if (sweep && !policies_given) spec.policies = {"fairshare"};
  if (!sweep && (lookback.size() > 1 || max_min_runtime.size() > 1 || margin.size() > 1 ||
                 budget_files.size() > 1)) {
    return bad("several values make a grid: use 'allot sim sweep'");
  }
  if (!budget_files.empty()) spec.budgets_path = budget_files.front();
  if (budget_files.size() > 1) spec.budget_variants = budget_files;
  grid.lookback = lookback;
  grid.max_min_runtime = max_min_runtime;
  grid.preemption_margin = margin;
  spec.sim.record_events = !out_dir.empty() && !sweep;

  auto inputs = sim::prepare_inputs(spec);
  if (!inputs.ok()) return bad(inputs.error().message());
  const sim::Inputs& in = inputs.value();
  if (spec.sim.until != core::kNever && !in.scenario.jobs.empty()) {
    spec.sim.until += in.scenario.jobs.front().job.submit;
  }
  if (spec.lab && !until_given) {
    // The model's figures are those of its arrival period: work still waiting at the end counts
    // as owed and undelivered, rather than a drain with no arrivals diluting it.
    spec.sim.until = static_cast<core::Time>(spec.lab->days) * core::kDay;
  }
  for (const sim::BudgetVariant& b : in.budget_variants) {
    grid.budgets.push_back(sim::SweepBudgets{sim::budgets_name(b.path), &b.scenario});
    if (b.skipped > 0) {
      std::fprintf(stderr, "allot sim: with budgets %s, %zu jobs are left out (unknown budget)\n",
                   b.path.c_str(), b.skipped);
    }
  }
  auto bases = sim::policy_runs(spec);
  if (!bases.ok()) return bad(bases.error().message());
  std::vector<sim::SimOptions> runs = sim::sweep_points(bases.value(), grid);
  if (!sweep) {
    for (sim::SimOptions& o : runs) o.label.clear();  // single values are overrides, not a grid
  }
  for (sim::SimOptions& o : runs) {
    if (!burst_limit.empty()) o.policy.burst_limit = burst_limit.front();
    if (!burst_exempt.empty()) o.policy.burst_exempt_below = burst_exempt.front();
    if (!burst_exempt_max.empty()) o.policy.burst_exempt_max_size = burst_exempt_max.front();
    if (keep_non_resumable && o.policy.funding == core::Funding::Lookback) {
      o.policy.keep_non_resumable_allocated = *keep_non_resumable;
    }
    if (share_claims) o.policy.share_claims = *share_claims;
    // allot's own rules (docs/policy.md §6, §9): the baselines never have them.
    if (interactive_allowance && o.policy.funding == core::Funding::Lookback) {
      o.policy.interactive_gpus_per_user = *interactive_allowance;
    }
    if (interactive_grace && o.policy.funding == core::Funding::Lookback) {
      o.policy.interactive_stop_grace = *interactive_grace;
    }
    if (inference_share && o.policy.funding == core::Funding::Lookback) {
      o.policy.inference_share = *inference_share;
    }
    if (!loss_ratio.empty()) o.policy.max_unallocated_loss_ratio = loss_ratio.front();
    if (!loss_patience.empty()) o.policy.unallocated_loss_patience = loss_patience.front();
    if (debug_first) o.policy.debug_jobs_first = *debug_first;
    // Infrastructure rather than policy: every policy's run gets it alike.
    if (mig_dynamic) o.policy.mig_dynamic = *mig_dynamic;
    if (mig_hold) o.policy.mig_hold = *mig_hold;
    if (mig_yield) o.policy.mig_yield = *mig_yield;
    if (mig_split_unallocated) o.policy.mig_split_unallocated = *mig_split_unallocated;
    if (placement && o.policy.placement == core::PlacementRule::BestFit) {
      o.policy.placement = *placement;
    }
    if (mig_reconfigure) o.mig_reconfigure = *mig_reconfigure;
  }

  // The lab model states its own load (its regime); a closed loop's first jobs have no load of
  // their own to measure.
  const std::string load = in.regime.empty() ? "load " + sim::load_text(in.load_after.ratio) + "x" +
                                                   (spec.load > 0 ? " (scaled)" : "")
                                             : "lab model, " + in.regime;
  std::fprintf(
      stderr, "allot sim: %zu jobs admitted of %zu read (%zu skipped), %d GPUs, %s; %zu run%s\n",
      in.scenario.jobs.size(), in.jobs_read, in.diag.skipped().size(),
      in.scenario.cluster.total_gpus(), load.c_str(), runs.size(), runs.size() == 1 ? "" : "s");
  for (std::size_t k = 0; k < in.diag.skipped().size() && k < 5; ++k) {
    std::fprintf(stderr, "  skipped %s\n", in.diag.skipped()[k].message().c_str());
  }

  sim::Report report;
  report.spec = &spec;
  report.inputs = &in;
  report.sweep = sweep;
  report.tradeoff_x = plot_x;
  {
    std::vector<std::string> names;
    for (const sim::SimOptions& o : runs) {
      names.push_back(o.label.empty() ? o.policy_name : o.policy_name + " " + o.label);
    }
    Progress progress(std::move(names), !quiet);
    for (std::size_t k = 0; k < runs.size(); ++k) runs[k].progress = progress.run(k);
    report.runs = sim::run_all(in.scenario, runs, spec.threads);
  }
  std::fputs(sim::summary_table(report, true).c_str(), stdout);

  bool checks_ok = true;
  for (const sim::RunResult& r : report.runs) {
    for (const sim::Check& c : r.checks) checks_ok &= c.passed;
  }
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    const std::filesystem::path dir(out_dir);
    if (!write_file(dir / "report.json", sim::report_json(report)) ||
        !write_file(dir / "report.html", sim::report_html(report)) ||
        !write_file(dir / "timings.json", sim::timings_json(report)) ||
        (!sweep && !write_file(dir / "events.csv", sim::events_csv(report)))) {
      return bad("cannot write the reports to " + out_dir);
    }
    std::fprintf(stderr, "allot sim: wrote %s/report.json, report.html, timings.json%s\n",
                 out_dir.c_str(), sweep ? "" : ", events.csv");
  }
  return checks_ok ? 0 : 1;
}

}  // namespace allot::cli
