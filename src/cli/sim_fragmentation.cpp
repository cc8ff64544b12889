// `allot sim fragmentation`: the fragmentation experiment (src/sim/fragmentation_experiment.h) on
// an openb pod list and node list.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "sim/fragmentation_experiment.h"
#include "sim/openb_resources.h"

namespace allot::cli {
namespace {

namespace sim = allot::sim;

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: allot sim fragmentation --workload FILE [--nodes FILE] [options]\n"
      "\n"
      "The fragmentation experiment of FGD (Weng et al., ATC'23): pods drawn from the trace's\n"
      "requests arrive and never leave until the GPUs they asked for reach --arrive-until of\n"
      "the cluster's; reports unallocated GPU capacity against arrived workload for each\n"
      "placement rule (docs/simulator.md, \"Fragmentation experiment\").\n"
      "\n"
      "  --workload FILE        openb pod list (openb_pod_list_*.csv)\n"
      "  --nodes FILE           openb node list (default: openb_node_list_gpu_node.csv next to\n"
      "                         the pod list)\n"
      "  --placements LIST      of fgd, best-fit, first-fit, worst-fit (default: all four)\n"
      "  --seed N               first seed (default 1)\n"
      "  --runs N               seeds per placement: N, N+1, ... (default 3)\n"
      "  --arrive-until PCT     stop once arrived GPU demand is PCT%% of capacity (default 130)\n"
      "  --gpus-only            pods ask for no CPU or memory (the nodes' then never run out),\n"
      "                         as allot's scheduler, which places GPUs only, sees them\n"
      "  --strict               fail on the first bad record (default: skip and count)\n"
      "  --out DIR              write report.json, report.html and fragmentation.csv\n");
}

bool write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  return static_cast<bool>(out);
}

std::optional<long long> whole_number(const char* s, long long lo, long long hi) {
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (!*s || !end || *end || v < lo || v > hi) return std::nullopt;
  return v;
}

}  // namespace

int sim_fragmentation_main(int argc, char** argv) {
  std::string workload, nodes, out_dir;
  sim::FragExperimentSpec spec;
  spec.placements = sim::fragmentation_placements();
  long long seed = 1, runs = 3;
  bool strict = false, gpus_only = false;
  auto bad = [](const std::string& what) {
    std::fprintf(stderr, "allot sim fragmentation: %s\n", what.c_str());
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    if (a == "--strict" || a == "--gpus-only") {
      (a == "--strict" ? strict : gpus_only) = true;
      continue;
    }
    if (a != "--workload" && a != "--nodes" && a != "--placements" && a != "--seed" &&
        a != "--runs" && a != "--arrive-until" && a != "--out") {
      usage(stderr);
      return bad("unknown flag '" + a + "'");
    }
    if (i + 1 >= argc) return bad(a + " needs a value");
    const char* v = argv[++i];
    if (a == "--workload") {
      workload = v;
    } else if (a == "--nodes") {
      nodes = v;
    } else if (a == "--out") {
      out_dir = v;
    } else if (a == "--placements") {
      spec.placements.clear();
      std::string s = v;
      for (std::size_t start = 0; start <= s.size();) {
        const auto comma = s.find(',', start);
        const std::string part =
            s.substr(start, comma == std::string::npos ? comma : comma - start);
        if (!part.empty()) spec.placements.push_back(part);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      if (spec.placements.empty()) return bad("--placements: expected a list of placements");
    } else if (a == "--seed") {
      const auto n = whole_number(v, 0, 1LL << 62);
      if (!n) return bad("--seed: expected an integer >= 0");
      seed = *n;
    } else if (a == "--runs") {
      const auto n = whole_number(v, 1, 100);
      if (!n) return bad("--runs: expected an integer between 1 and 100");
      runs = *n;
    } else {  // --arrive-until
      const auto n = whole_number(v, 1, 1000);
      if (!n) return bad("--arrive-until: expected a whole percentage between 1 and 1000");
      spec.arrive_until = static_cast<double>(*n) / 100;
    }
  }
  if (workload.empty()) return bad("--workload is required (an openb pod list)");
  if (nodes.empty()) {
    nodes =
        (std::filesystem::path(workload).parent_path() / "openb_node_list_gpu_node.csv").string();
  }
  spec.seeds.clear();
  for (long long k = 0; k < runs; ++k) spec.seeds.push_back(static_cast<std::uint64_t>(seed + k));

  sim::Diagnostics diag;
  auto pods = sim::load_openb_requests(workload, diag);
  if (!pods.ok()) return bad(pods.error().message());
  auto cluster = sim::load_openb_node_resources(nodes, diag);
  if (!cluster.ok()) return bad(cluster.error().message());
  if (strict && !diag.skipped().empty()) return bad(diag.skipped().front().message());
  for (std::size_t k = 0; k < diag.skipped().size() && k < 5; ++k) {
    std::fprintf(stderr, "  skipped %s\n", diag.skipped()[k].message().c_str());
  }
  spec.pods = std::move(pods.value());
  if (gpus_only) {
    for (core::FragRequest& r : spec.pods) r.cpu_milli = r.memory_mib = 0;
  }
  spec.nodes = std::move(cluster.value());
  std::fprintf(stderr,
               "allot sim fragmentation: %zu pods read (%zu skipped), %zu GPU nodes; %zu "
               "placements x %lld seeds\n",
               spec.pods.size(), diag.skipped().size(), spec.nodes.size(), spec.placements.size(),
               runs);
  auto result = sim::run_fragmentation_experiment(spec);
  if (!result.ok()) return bad(result.error().message());
  std::fputs(sim::fragmentation_table(result.value()).c_str(), stdout);
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    const std::filesystem::path dir(out_dir);
    if (!write_text(dir / "report.json", sim::fragmentation_json(result.value(), workload)) ||
        !write_text(dir / "report.html", sim::fragmentation_html(result.value(), workload)) ||
        !write_text(dir / "fragmentation.csv", sim::fragmentation_csv(result.value()))) {
      return bad("cannot write the reports to " + out_dir);
    }
    std::fprintf(stderr,
                 "allot sim fragmentation: wrote %s/report.json, report.html, fragmentation.csv\n",
                 out_dir.c_str());
  }
  return 0;
}

}  // namespace allot::cli
