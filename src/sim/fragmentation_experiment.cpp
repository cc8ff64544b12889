// The fragmentation experiment (see fragmentation_experiment.h).
#include "sim/fragmentation_experiment.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "sim/report_numbers.h"
#include "sim/rng.h"
#include "sim/svg_plot.h"
#include "sim/text_table.h"

namespace allot::sim {
namespace {

using core::FragChoice;
using core::FragNode;
using core::FragRequest;
using core::kWholeGpu;
using core::Milli;

// Loads at which the table reports the unallocated fraction (fractions of GPU capacity).
constexpr double kTableLoads[] = {0.8, 0.9, 1.0, 1.1, 1.2, 1.3};

int whole_free(const FragNode& n) {
  int k = 0;
  for (Milli f : n.gpu_free) k += f == kWholeGpu ? 1 : 0;
  return k;
}

Milli gpu_free_total(const FragNode& n) {
  Milli t = 0;
  for (Milli f : n.gpu_free) t += f;
  return t;
}

// The lowest-indexed `count` GPUs of `n` with at least `milli` free.
std::vector<int> lowest_gpus(const FragNode& n, int count, Milli milli) {
  std::vector<int> g;
  for (std::size_t i = 0; i < n.gpu_free.size() && static_cast<int>(g.size()) < count; ++i) {
    if (n.gpu_free[i] >= milli) g.push_back(static_cast<int>(i));
  }
  return g;
}

// allot's best fit (core::GpuPool::find), with CPU and memory checked as well.
std::optional<FragChoice> best_fit(const std::vector<FragNode>& nodes, const FragRequest& r) {
  std::optional<FragChoice> best;
  if (r.gpus == 0) {  // the node with the least CPU free that fits
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (core::fits(nodes[i], r) && (!best || nodes[i].cpu_free < nodes[best->node].cpu_free)) {
        best = FragChoice{i, {}, 0, 0};
      }
    }
    return best;
  }
  if (r.milli < kWholeGpu) {  // the fullest partly used GPU with room
    Milli best_free = kWholeGpu;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      if (!core::fits(nodes[i], r)) continue;
      for (std::size_t g = 0; g < nodes[i].gpu_free.size(); ++g) {
        const Milli f = nodes[i].gpu_free[g];
        if (f >= r.milli && f < best_free) {
          best_free = f;
          best = FragChoice{i, {static_cast<int>(g)}, r.milli, 0};
        }
      }
    }
    if (best) return best;
  }
  // Whole GPUs (or a fraction with no partly used GPU to go to): the node with the fewest whole
  // GPUs free that has enough.
  const int need = r.gpus;
  int best_whole = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!core::fits(nodes[i], r)) continue;
    const int w = whole_free(nodes[i]);
    if (w >= need && (!best || w < best_whole)) {
      best_whole = w;
      best = FragChoice{i, lowest_gpus(nodes[i], need, kWholeGpu), r.milli, 0};
    }
  }
  return best;
}

// First fit: the lowest-indexed node that fits, its lowest-indexed GPUs with room.
std::optional<FragChoice> first_fit(const std::vector<FragNode>& nodes, const FragRequest& r) {
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (core::fits(nodes[i], r))
      return FragChoice{i, lowest_gpus(nodes[i], r.gpus, r.milli), r.milli, 0};
  }
  return std::nullopt;
}

// Worst fit: the node with the most GPU capacity free (then CPU), its emptiest GPUs.
std::optional<FragChoice> worst_fit(const std::vector<FragNode>& nodes, const FragRequest& r) {
  std::optional<std::size_t> best;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!core::fits(nodes[i], r)) continue;
    if (!best) {
      best = i;
      continue;
    }
    const Milli a = gpu_free_total(nodes[i]), b = gpu_free_total(nodes[*best]);
    if (a > b || (a == b && nodes[i].cpu_free > nodes[*best].cpu_free)) best = i;
  }
  if (!best) return std::nullopt;
  const FragNode& n = nodes[*best];
  std::vector<int> order(n.gpu_free.size());
  for (std::size_t g = 0; g < order.size(); ++g) order[g] = static_cast<int>(g);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return n.gpu_free[a] > n.gpu_free[b]; });
  order.resize(static_cast<std::size_t>(r.gpus));
  std::sort(order.begin(), order.end());
  return FragChoice{*best, order, r.milli, 0};
}

FragRun run_one(const FragExperimentSpec& spec, const std::vector<core::WorkloadShare>& workload,
                const std::string& placement, std::uint64_t seed, Milli capacity) {
  FragRun run;
  run.placement = placement;
  run.seed = seed;
  std::vector<FragNode> nodes = spec.nodes;
  const bool fgd = placement == "fgd";
  std::vector<double> frag;  // each node's fragmentation for the workload (fgd only)
  if (fgd) {
    for (const FragNode& n : nodes) frag.push_back(core::fragmentation(n, workload));
  }
  Rng rng(mix_seed(seed, 0xF7A6));
  Milli arrived = 0, allocated = 0;
  const double limit = spec.arrive_until * static_cast<double>(capacity);
  while (static_cast<double>(arrived) < limit) {
    const std::size_t k =
        std::min(spec.pods.size() - 1,
                 static_cast<std::size_t>(rng.uniform() * static_cast<double>(spec.pods.size())));
    const FragRequest& r = spec.pods[k];
    const Milli asked = static_cast<Milli>(r.gpus) * r.milli;
    arrived += asked;
    ++run.arrived_pods;
    std::optional<FragChoice> c;
    if (fgd) {
      c = core::least_fragmenting(nodes, r, workload, frag);
    } else if (placement == "best-fit") {
      c = best_fit(nodes, r);
    } else if (placement == "first-fit") {
      c = first_fit(nodes, r);
    } else {
      c = worst_fit(nodes, r);
    }
    if (c) {
      nodes[c->node] = core::after(nodes[c->node], r, c->gpus);
      if (fgd) frag[c->node] = core::fragmentation(nodes[c->node], workload);
      allocated += asked;
    } else {
      ++run.failed_pods;
      ++(r.gpus == 0           ? run.failed_cpu_only
         : r.milli < kWholeGpu ? run.failed_shared
                               : run.failed_whole);
      if (asked > 0 && run.first_failure < 0) {
        run.first_failure = static_cast<double>(arrived) / static_cast<double>(capacity);
      }
    }
    if (asked > 0) {
      run.curve.push_back(
          {static_cast<double>(arrived) / static_cast<double>(capacity),
           static_cast<double>(capacity - allocated) / static_cast<double>(capacity)});
    }
  }
  return run;
}

// Mean over a placement's runs of the unallocated fraction at `load`.
double mean_at(const FragResult& r, const std::string& placement, double load) {
  double sum = 0;
  int n = 0;
  for (const FragRun& run : r.runs) {
    if (run.placement == placement) {
      sum += unallocated_at(run, load);
      ++n;
    }
  }
  return n ? sum / n : 0;
}

std::vector<std::string> placements_of(const FragResult& r) {
  std::vector<std::string> out;
  for (const FragRun& run : r.runs) {
    if (std::find(out.begin(), out.end(), run.placement) == out.end()) out.push_back(run.placement);
  }
  return out;
}

// The last load in the table the runs reached.
std::vector<double> table_loads(const FragResult& r) {
  double reached = 0;
  for (const FragRun& run : r.runs) {
    if (!run.curve.empty()) reached = std::max(reached, run.curve.back().arrived);
  }
  std::vector<double> loads;
  for (double l : kTableLoads) {
    if (l <= reached + 1e-9) loads.push_back(l);
  }
  return loads;
}

}  // namespace

const std::vector<std::string>& fragmentation_placements() {
  static const std::vector<std::string> p = {"fgd", "best-fit", "first-fit", "worst-fit"};
  return p;
}

std::vector<core::WorkloadShare> target_workload(const std::vector<core::FragRequest>& pods) {
  std::vector<core::FragRequest> gpu_pods;
  for (const FragRequest& p : pods) {
    if (p.gpus > 0) gpu_pods.push_back(p);
  }
  auto out = core::shares_of(gpu_pods);
  // Most frequent first (stable: ties in trace order), as FGD lists its typical pods.
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.probability > b.probability; });
  return out;
}

core::Result<FragResult> run_fragmentation_experiment(const FragExperimentSpec& spec) {
  if (spec.pods.empty()) return core::Error{"workload", "no pods"};
  if (spec.nodes.empty()) return core::Error{"nodes", "no GPU nodes"};
  if (!(spec.arrive_until > 0 && spec.arrive_until <= 10)) {
    return core::Error{"arrive-until", "expected a percentage above 0 and at most 1000"};
  }
  for (const std::string& p : spec.placements) {
    const auto& known = fragmentation_placements();
    if (std::find(known.begin(), known.end(), p) == known.end()) {
      return core::Error{"placements", "unknown placement '" + p +
                                           "' (expected fgd, best-fit, first-fit or worst-fit)"};
    }
  }
  const auto workload = target_workload(spec.pods);
  if (workload.empty()) return core::Error{"workload", "no pod asks for a GPU"};
  FragResult result;
  for (const FragNode& n : spec.nodes) result.capacity += gpu_free_total(n);
  result.workload_kinds = workload.size();
  for (const std::string& p : spec.placements) {
    for (std::uint64_t seed : spec.seeds) {
      result.runs.push_back(run_one(spec, workload, p, seed, result.capacity));
    }
  }
  return result;
}

double unallocated_at(const FragRun& run, double arrived) {
  if (run.curve.empty()) return 1;
  auto it = std::lower_bound(run.curve.begin(), run.curve.end(), arrived - 1e-12,
                             [](const FragPoint& p, double x) { return p.arrived < x; });
  return it == run.curve.end() ? run.curve.back().unallocated : it->unallocated;
}

std::string fragmentation_csv(const FragResult& r) {
  std::string out = "placement,seed,arrived_pct,unallocated_pct\n";
  char line[128];
  for (const FragRun& run : r.runs) {
    if (run.curve.empty()) continue;
    const int last = static_cast<int>(run.curve.back().arrived * 100 + 1e-9);
    for (int pct_arrived = 1; pct_arrived <= last; ++pct_arrived) {
      std::snprintf(line, sizeof line, "%s,%llu,%d,%.2f\n", run.placement.c_str(),
                    static_cast<unsigned long long>(run.seed), pct_arrived,
                    100 * unallocated_at(run, pct_arrived / 100.0));
      out += line;
    }
  }
  return out;
}

std::string fragmentation_table(const FragResult& r) {
  const auto loads = table_loads(r);
  std::vector<std::string> header = {"unallocated GPU capacity at arrived"};
  for (double l : loads) header.push_back(fmt(100 * l) + "%");
  header.emplace_back("first failure");
  TextTable t(header);
  for (const std::string& p : placements_of(r)) {
    std::vector<std::string> row = {p};
    for (double l : loads) row.push_back(pct(mean_at(r, p, l)));
    double ff = 0;
    int n = 0;
    for (const FragRun& run : r.runs) {
      if (run.placement == p && run.first_failure >= 0) {
        ff += run.first_failure;
        ++n;
      }
    }
    row.push_back(n ? pct(ff / n) : "none");
    t.add_row(row);
  }
  std::string out = t.render();
  const auto ps = placements_of(r);
  if (std::find(ps.begin(), ps.end(), "fgd") != ps.end() && !loads.empty()) {
    // FGD's unallocated capacity against the best other rule's, at each load from 100% (below,
    // every rule has placed nearly everything).
    for (double l : loads) {
      if (l < 1.0 - 1e-9) continue;
      double best = -1;
      std::string who;
      for (const std::string& p : ps) {
        if (p == "fgd") continue;
        const double v = mean_at(r, p, l);
        if (best < 0 || v < best) {
          best = v;
          who = p;
        }
      }
      if (best <= 0) continue;
      out += "at " + fmt(100 * l) + "% arrived: fgd leaves " +
             fmt(100 * (1 - mean_at(r, "fgd", l) / best), "%.0f") + "% less unallocated than " +
             who + "\n";
    }
  }
  return out;
}

std::string fragmentation_json(const FragResult& r, const std::string& source) {
  nlohmann::json j;
  j["experiment"] = "fragmentation";
  j["workload"] = source;
  j["gpu_capacity"] = static_cast<double>(r.capacity) / kWholeGpu;
  j["workload_kinds"] = r.workload_kinds;
  nlohmann::json table = nlohmann::json::array();
  for (const std::string& p : placements_of(r)) {
    nlohmann::json row;
    row["placement"] = p;
    for (double l : table_loads(r)) {
      row["unallocated_at_" + fmt(100 * l)] = mean_at(r, p, l);
    }
    table.push_back(row);
  }
  j["table"] = table;
  nlohmann::json runs = nlohmann::json::array();
  for (const FragRun& run : r.runs) {
    runs.push_back({{"placement", run.placement},
                    {"seed", run.seed},
                    {"arrived_pods", run.arrived_pods},
                    {"failed_pods", run.failed_pods},
                    {"failed_shared", run.failed_shared},
                    {"failed_whole", run.failed_whole},
                    {"failed_cpu_only", run.failed_cpu_only},
                    {"first_failure", run.first_failure},
                    {"final_unallocated", run.curve.empty() ? 1.0 : run.curve.back().unallocated}});
  }
  j["runs"] = runs;
  return j.dump(2) + "\n";
}

std::string fragmentation_html(const FragResult& r, const std::string& source) {
  PlotAxes axes;
  axes.title = "Unallocated GPU capacity as the cluster fills (mean over seeds)";
  axes.x_label = "arrived workload, % of GPU capacity";
  axes.y_label = "unallocated";
  double reached = 0;
  for (const FragRun& run : r.runs) {
    if (!run.curve.empty()) reached = std::max(reached, run.curve.back().arrived);
  }
  axes.x_max = std::max(1.0, reached * 100);
  axes.y_max = 1;
  axes.percent_y = true;
  std::vector<PlotLine> lines;
  std::size_t colour = 0;
  for (const std::string& p : placements_of(r)) {
    PlotLine line{p, palette(colour++), {}, false};
    for (int x = 1; x <= static_cast<int>(reached * 100 + 1e-9); ++x) {
      line.points.emplace_back(x, mean_at(r, p, x / 100.0));
    }
    lines.push_back(std::move(line));
  }
  PlotLine ideal{"no fragmentation", "#999999", {}, false};
  for (int x = 1; x <= static_cast<int>(reached * 100 + 1e-9); ++x) {
    ideal.points.emplace_back(x, std::max(0.0, 1 - x / 100.0));
  }
  lines.push_back(std::move(ideal));
  std::string table = fragmentation_table(r);
  return "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>allot fragmentation "
         "experiment</title></head><body>\n<h1>Fragmentation experiment</h1>\n<p>Workload: " +
         html_escape(source) + "; " + fmt(static_cast<double>(r.capacity) / kWholeGpu) +
         " GPUs.</p>\n" + line_chart(axes, lines) + "\n<pre>" + html_escape(table) +
         "</pre>\n</body></html>\n";
}

}  // namespace allot::sim
