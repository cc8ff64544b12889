// allot me: the caller's standing, like Slurm's sshare. For each budget the caller belongs to or
// manages (or the one --budget names, with its children): its share of the cluster, what it is
// owed and holds now, its standing over the lookback window, its rank among its siblings, its
// jobs, owed vs delivered GPU-hours this week, and what a new job of --gpus/--min-runtime would
// get. Everything comes from GET /api/v1/standing.
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "cli/client_common.h"

namespace allot::cli::client {

namespace {

std::string fixed(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string percent(const json& v) {
  if (!v.is_number()) return "-";
  return fixed(v.get<double>() * 100.0, v.get<double>() < 0.1 ? 1 : 0) + "%";
}

std::string gpus(double v) {
  return fixed(v, std::fabs(v - std::round(v)) < 1e-9 ? 0 : 1);
}

std::string clock_utc(long long t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

std::string span(long long seconds) {
  if (seconds % 86400 == 0) return std::to_string(seconds / 86400) + "d";
  if (seconds % 3600 == 0) return std::to_string(seconds / 3600) + "h";
  if (seconds % 60 == 0) return std::to_string(seconds / 60) + "m";
  return std::to_string(seconds) + "s";
}

}  // namespace

int cmd_me(const Args& a, const Conn& c) {
  std::string q = "/api/v1/standing?";
  long long g = 1, m = 3600;
  if (a.has("gpus")) g = parse_count("--gpus", a.get("gpus"));
  if (a.has("min-runtime")) m = parse_duration("--min-runtime", a.get("min-runtime"));
  q += "gpus=" + std::to_string(g) + "&min_runtime=" + std::to_string(m);
  if (a.has("budget")) q += "&budget=" + qs_escape(a.get("budget"));
  auto r = request(c, "GET", q);
  if (a.has("json")) {
    std::printf("%s\n", r.dump(2).c_str());
    return kOk;
  }
  const auto& budgets = r["budgets"];
  const std::string who = r.value("subject", "");
  if (budgets.empty()) {
    std::printf(
        "%s belongs to no budget and manages none: ask a manager to add you "
        "(allot budget set PATH --members ...).\n",
        who.empty() ? "this token" : who.c_str());
    return kOk;
  }
  std::size_t clusters = 0;
  for (const auto& b : budgets) clusters = std::max(clusters, b["clusters"].size());
  std::printf("%sstanding at %s UTC; usage over the last %s (the lookback window)\n",
              who.empty() ? "" : (who + ": ").c_str(), clock_utc(r["at"].get<long long>()).c_str(),
              span(r["lookback_seconds"].get<long long>()).c_str());
  std::vector<std::string> head = {"BUDGET"};
  if (clusters > 1) head.push_back("CLUSTER");
  for (const char* h : {"SHARE", "OWED GPUS", "HELD GPUS A+U", "STANDING", "RANK", "RUNNING A+U",
                        "WAITING", "7 DAYS DELIVERED / OWED"}) {
    head.push_back(h);
  }
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> outlook;
  for (const auto& b : budgets) {
    const std::string path = b["budget"];
    std::string week = "-";
    if (b.contains("week")) {
      const auto& w = b["week"];
      week = fixed(w["delivered_gpu_hours"].get<double>(), 0) + " / " +
             fixed(w["owed_gpu_hours"].get<double>(), 0) + " GPU-h";
      if (w["impact"].is_number()) week += " (impact " + percent(w["impact"]) + ")";
    }
    for (const auto& cl : b["clusters"]) {
      std::vector<std::string> row = {path};
      if (clusters > 1) row.push_back(cl["cluster"]);
      row.push_back(percent(cl["fraction"]));
      row.push_back(gpus(cl["allocation_gpus"].get<double>()));
      row.push_back(gpus(cl["held_allocated_gpus"].get<double>()) + " + " +
                    gpus(cl["held_unallocated_gpus"].get<double>()));
      row.push_back(cl["standing"].is_number() ? percent(cl["standing"]) : "no allocation");
      row.push_back(cl["rank"].get<int>() > 0 ? std::to_string(cl["rank"].get<int>()) + " of " +
                                                    std::to_string(cl["siblings"].get<int>())
                                              : "-");
      row.push_back(std::to_string(cl["running_allocated"].get<int>()) + " + " +
                    std::to_string(cl["running_unallocated"].get<int>()));
      row.push_back(std::to_string(cl["waiting"].get<int>()));
      row.push_back(week);
      rows.push_back(std::move(row));
      if (cl.contains("new_job")) {
        const auto& n = cl["new_job"];
        std::string line =
            "  " + path + (clusters > 1 ? " on " + cl["cluster"].get<std::string>() : "") + ": ";
        if (n["allocated"].get<bool>()) {
          line += "funded: it starts ALLOCATED, protected " + span(m) + " once started";
        } else {
          line += "not funded: it runs UNALLOCATED (preemptible) if it starts: " +
                  n["reason"].get<std::string>();
        }
        outlook.push_back(line);
      }
    }
  }
  table(head, rows);
  std::printf(
      "\nSTANDING is usage plus promised contracts over the budget's allocation for the window "
      "(under 100%%: it can fund new contracts); RANK is its place among its siblings by standing, "
      "the order in which the fair-share walk serves them (1 goes first). OWED over 7 days is, "
      "hour by hour, its share of the available "
      "GPUs capped at what its jobs asked for; impact = the part of it delivered allocated.\n");
  if (!outlook.empty()) {
    std::printf("\nA new %lld-GPU job with --min-runtime %s now:\n", g, span(m).c_str());
    for (const auto& l : outlook) std::printf("%s\n", l.c_str());
  }
  return kOk;
}

}  // namespace allot::cli::client
