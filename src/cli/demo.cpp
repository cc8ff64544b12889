// `allot demo`: the scheduling core on a built-in 11 x 8 H100 cluster (Ai2's smallest size) with
// five teams asking for about twice the GPUs that exist, over three simulated days. It narrates
// the decisions people ask about (preemptions, drains, why a job waits) and ends with what each
// budget was owed and got. Everything is decided by the same core the simulator and server use.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/owed.h"
#include "core/scheduler.h"

namespace allot::cli {
namespace {

using namespace allot::core;

struct Team {
  const char* path;
  double share;
  double jobs_per_hour;
  int min_gpus, max_gpus, nodes;  // nodes > 1: gang of whole nodes
  Duration min_runtime;
  Duration min_len, max_len;
  JobKind kind;
};

struct Tracked {
  JobSpec spec;
  Duration remaining;  // work left
  Time started = -1;   // current run
  Time first_start = -1;
  Time done = -1;
  int preemptions = 0;
  double gpu_seconds = 0;                   // GPU time it held, including work lost to preemption
  std::vector<std::pair<Time, Time>> runs;  // [start, end) of each run that ended
};

// Adds rate x (overlap of [start, end) with each hour) to `hours`.
void spread(Time start, Time end, double rate, std::vector<double>& hours) {
  for (Time t = std::max<Time>(0, start); t < end;) {
    const auto h = static_cast<std::size_t>(t / kHour);
    if (h >= hours.size()) break;
    const Time next = std::min<Time>(end, static_cast<Time>(h + 1) * kHour);
    hours[h] += rate * static_cast<double>(next - t);
    t = next;
  }
}

std::string clock(Time t) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "day %lld %02lld:%02lld", static_cast<long long>(t / kDay + 1),
                static_cast<long long>(t % kDay / kHour),
                static_cast<long long>(t % kHour / kMinute));
  return buf;
}

double percentile(std::vector<Duration> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))]);
}

std::string minutes(double seconds) {
  char buf[32];
  if (seconds < 120) {
    std::snprintf(buf, sizeof buf, "%.0fs", seconds);
  } else if (seconds < 2 * kHour) {
    std::snprintf(buf, sizeof buf, "%.0fm", seconds / 60);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fh", seconds / 3600);
  }
  return buf;
}

}  // namespace

int demo_main(int argc, char** argv) {
  std::uint64_t seed = 7;
  int days = 3;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (!std::strcmp(argv[i], "--days") && i + 1 < argc) {
      days = std::max(1, std::min(30, std::atoi(argv[++i])));
    } else if (!std::strcmp(argv[i], "--quiet")) {
      quiet = true;
    } else {
      std::fprintf(stdout,
                   "usage: allot demo [--seed N] [--days N] [--quiet]\n"
                   "Runs the scheduling core on a built-in 88-GPU cluster and narrates it.\n");
      return std::strcmp(argv[i], "--help") ? 2 : 0;
    }
  }

  Scheduler s;
  const ClusterId cluster = s.add_cluster("h100-a");
  const GpuModelId h100 = *s.catalog().find("H100");
  std::vector<NodeId> nodes;
  for (int i = 0; i < 11; ++i) {
    NodeSpec n;
    n.name = "h100-" + std::to_string(i + 1);
    n.cluster = cluster;
    n.model = h100;
    n.gpus = 8;
    n.block = i < 6 ? "block-a" : "block-b";
    nodes.push_back(s.add_node(n).value());
  }
  const std::vector<Team> teams = {
      {"/lm/pretraining", 4, 0.15, 8, 8, 4, 4 * kHour, 6 * kHour, 20 * kHour, JobKind::Batch},
      {"/lm/post-training", 2, 1.5, 1, 8, 1, kHour, 30 * kMinute, 6 * kHour, JobKind::Batch},
      {"/rl/agents", 2, 1.5, 1, 4, 1, kHour, 20 * kMinute, 4 * kHour, JobKind::Batch},
      {"/rl/simulation", 1, 1.2, 2, 8, 1, 2 * kHour, kHour, 8 * kHour, JobKind::Batch},
      {"/data/analysis", 1, 2.0, 1, 2, 1, 10 * kMinute, 10 * kMinute, 40 * kMinute, JobKind::Debug},
  };
  // Programs first (language models 50%, RL 30%, data 20%), then projects within them.
  (void)s.budgets().ensure_path("/lm", 5);
  (void)s.budgets().ensure_path("/rl", 3);
  (void)s.budgets().ensure_path("/data", 2);
  std::vector<BudgetId> budget;
  for (const Team& t : teams) budget.push_back(s.budgets().ensure_path(t.path, t.share).value());

  // The workload: Poisson arrivals per team, seeded.
  std::mt19937_64 rng(seed);
  std::map<JobId, Tracked> jobs;
  std::multimap<Time, JobId> arrivals;
  JobId next = 1;
  const Time end = days * kDay;
  for (std::size_t t = 0; t < teams.size(); ++t) {
    std::exponential_distribution<double> gap(teams[t].jobs_per_hour / kHour);
    for (double at = gap(rng); at < static_cast<double>(end); at += gap(rng)) {
      Tracked j;
      j.spec.id = next++;
      j.spec.owner = "researcher" + std::to_string(rng() % 30);
      j.spec.budget = budget[t];
      const int g =
          teams[t].min_gpus + static_cast<int>(rng() % (teams[t].max_gpus - teams[t].min_gpus + 1));
      j.spec.shape = Shape{teams[t].nodes, g, kWholeGpu};
      j.spec.kind = teams[t].kind;
      j.spec.min_runtime = teams[t].min_runtime;
      if (rng() % 10 == 0 && j.spec.kind != JobKind::Debug) j.spec.min_runtime = 0;  // free work
      j.spec.resumable = j.spec.kind != JobKind::Debug;
      j.spec.submit_time = static_cast<Time>(at);
      j.remaining = teams[t].min_len +
                    static_cast<Duration>(
                        rng() % static_cast<std::uint64_t>(teams[t].max_len - teams[t].min_len));
      j.spec.expected_duration = j.remaining;
      arrivals.emplace(j.spec.submit_time, j.spec.id);
      jobs.emplace(j.spec.id, j);
    }
  }
  double demand = 0;
  for (const auto& [id, j] : jobs) demand += j.spec.shape.total_gpus() * double(j.remaining);
  std::printf("allot demo: cluster h100-a, 11 nodes x 8 H100 = 88 GPUs, %d days, seed %llu\n", days,
              static_cast<unsigned long long>(seed));
  std::printf("%zu jobs from %zu teams asking for %.0f GPU-hours: %.1fx what the cluster has\n\n",
              jobs.size(), teams.size(), demand / kHour, demand / (88.0 * end));

  // A node fails its health check on day 1 and is repaired half a day later.
  const Time sick_at = 20 * kHour, repaired_at = 32 * kHour;
  std::multimap<Time, JobId> finishes;
  int narrated = 0, preemptions = 0, drains = 0;
  Time now = 0;
  bool sick = false, repaired = false;
  while (now <= end) {
    if (!sick && now >= sick_at) {
      sick = true;
      (void)s.set_node_health(nodes[3], NodeHealth::Unhealthy, "ECC errors on GPU 5", now);
      std::printf(
          "[%s] node h100-4 failed its health check (ECC errors): no new work, its jobs "
          "stop as they reach their minimum runtime\n",
          clock(now).c_str());
    }
    if (!repaired && now >= repaired_at) {
      repaired = true;
      (void)s.set_node_health(nodes[3], NodeHealth::Healthy, "", now);
      std::printf("[%s] node h100-4 repaired and back in service\n", clock(now).c_str());
    }
    for (auto it = finishes.begin(); it != finishes.end() && it->first <= now;) {
      Tracked& j = jobs.at(it->second);
      if (j.started >= 0 && j.started + j.remaining == it->first) {
        j.gpu_seconds += j.spec.shape.total_gpus() * double(now - j.started);
        j.runs.emplace_back(j.started, now);
        (void)s.job_finished(j.spec.id, now);
        j.done = now;
        j.remaining = 0;
        j.started = -1;
      }
      it = finishes.erase(it);
    }
    for (auto it = arrivals.begin(); it != arrivals.end() && it->first <= now;) {
      (void)s.submit(jobs.at(it->second).spec, now);
      it = arrivals.erase(it);
    }
    const CycleResult r = s.cycle(now);
    for (const StopDecision& d : r.stops) {
      Tracked& j = jobs.at(d.job);
      // Resumable work keeps what it did up to its last checkpoint (every 30 minutes).
      const Duration ran = now - j.started;
      j.gpu_seconds += j.spec.shape.total_gpus() * double(ran);
      j.runs.emplace_back(j.started, now);
      j.remaining -= j.spec.resumable ? ran - ran % (30 * kMinute) : 0;
      j.started = -1;
      ++j.preemptions;
      (d.reason == StopReason::Preempted ? preemptions : drains)++;
      if (narrated < 6 || d.reason != StopReason::Preempted) {
        std::printf("[%s] stop job %llu (%s, %d GPUs): %s\n", clock(now).c_str(),
                    static_cast<unsigned long long>(d.job),
                    s.budgets().node(j.spec.budget).path.c_str(), j.spec.shape.total_gpus(),
                    s.describe(d).c_str());
        ++narrated;
      }
      (void)s.job_stopped(d.job, now);
      if (!j.spec.resumable) {
        (void)s.job_finished(d.job, now);
      }
    }
    for (const StartDecision& d : r.starts) {
      Tracked& j = jobs.at(d.job);
      j.started = now;
      if (j.first_start < 0) j.first_start = now;
      finishes.emplace(now + j.remaining, d.job);
      if (j.spec.shape.gang() && !quiet) {
        std::printf("[%s] %s gang job %llu (%s, %dx%d GPUs, %s) %s %s%s\n", clock(now).c_str(),
                    j.preemptions ? "restart" : "start", static_cast<unsigned long long>(d.job),
                    s.budgets().node(j.spec.budget).path.c_str(), j.spec.shape.nodes,
                    j.spec.shape.gpus_per_node, d.allocated ? "allocated" : "unallocated",
                    j.preemptions ? "submitted" : "after waiting",
                    j.preemptions ? (minutes(double(now - j.spec.submit_time)) + " ago").c_str()
                                  : minutes(double(now - j.spec.submit_time)).c_str(),
                    d.victims.empty()
                        ? ""
                        : (", preempting " + std::to_string(d.victims.size()) + " job(s)").c_str());
      }
    }
    // Next event: an arrival, a finish, a fault, or a time the core asked to be woken at.
    Time next_t = end + 1;
    if (!arrivals.empty()) next_t = std::min(next_t, arrivals.begin()->first);
    if (!finishes.empty()) next_t = std::min(next_t, finishes.begin()->first);
    if (!sick) next_t = std::min(next_t, sick_at);
    if (!repaired) next_t = std::min(next_t, repaired_at);
    next_t = std::min(next_t, std::max(now + 1, s.next_wakeup()));
    if (next_t > end) {
      // Explain three jobs still waiting at the end, as `allot why` would.
      std::printf("\nAt the end, %zu jobs are waiting. Why, for the first three in line:\n",
                  r.waiting.size());
      for (std::size_t i = 0; i < r.waiting.size() && i < 3; ++i) {
        std::printf("  job %llu: %s\n", static_cast<unsigned long long>(r.waiting[i].job),
                    s.describe(r.waiting[i]).c_str());
      }
      break;
    }
    now = next_t;
  }

  // What each budget was owed and what it got (allocated and unallocated GPU-hours). Owed is the
  // one definition (core/owed.h, as `allot report` and `allot sim` count it): hour by hour, its
  // share of the healthy GPUs capped at what its jobs asked for.
  const std::size_t hours = static_cast<std::size_t>((end + kHour - 1) / kHour);
  std::vector<double> available(hours, 0);
  spread(0, end, 88.0, available);
  spread(sick_at, std::min(end, repaired_at), -8.0, available);  // h100-4 out of service
  std::printf("\n%-20s %6s %10s %10s %10s %7s %6s %9s\n", "budget", "share", "owed GPUh",
              "allocated", "unalloc.", "impact", "done", "p90 wait");
  std::vector<Duration> debug_waits, batch_waits;
  for (std::size_t t = 0; t < teams.size(); ++t) {
    std::vector<Duration> waits;
    int done = 0;
    std::vector<double> demand_h(hours, 0), delivered_h(hours, 0);
    for (const auto& [id, j] : jobs) {
      if (j.spec.budget != budget[t] || j.spec.submit_time > end) continue;
      if (j.first_start >= 0) {
        waits.push_back(j.first_start - j.spec.submit_time);
        (j.spec.kind == JobKind::Debug ? debug_waits : batch_waits).push_back(waits.back());
      }
      done += j.done >= 0;
      const double gpus = j.spec.shape.total_gpus();
      spread(j.spec.submit_time, j.done >= 0 ? j.done : end, gpus, demand_h);
      for (const auto& [from, to] : j.runs) spread(from, to, gpus, delivered_h);
      if (j.started >= 0) spread(j.started, end, gpus, delivered_h);
    }
    const double fraction = s.budgets().allocated_fraction(budget[t], cluster);
    OwedTally owed;
    for (std::size_t h = 0; h < hours; ++h) {
      owed.add(fraction * available[h], demand_h[h], delivered_h[h]);
    }
    const double used = static_cast<double>(s.usage(cluster, budget[t])) / kWholeGpu / kHour;
    std::printf("%-20s %5.0f%% %10.0f %10.0f %10.0f %6.1f%% %6d %9s\n", teams[t].path,
                100 * fraction, owed.owed / kHour, used,
                std::max(0.0, owed.delivered / kHour - used), 100 * owed.impact(), done,
                minutes(percentile(waits, 0.9)).c_str());
  }
  std::printf(
      "\nOwed: hour by hour, the budget's share of the healthy GPUs, capped at what its jobs asked "
      "for (the definition `allot report` and `allot sim` use, docs/metrics.md); impact: the part "
      "of that it got. Allocation is measured over the 7-day lookback, so a team may burst above "
      "its share for a few days before its work runs unallocated.\n");
  std::printf(
      "%d preemptions, %d drain or failure stops. Waits: debug p50 %s p90 %s; "
      "batch p50 %s p90 %s\n",
      preemptions, drains, minutes(percentile(debug_waits, 0.5)).c_str(),
      minutes(percentile(debug_waits, 0.9)).c_str(), minutes(percentile(batch_waits, 0.5)).c_str(),
      minutes(percentile(batch_waits, 0.9)).c_str());
  return 0;
}

}  // namespace allot::cli
