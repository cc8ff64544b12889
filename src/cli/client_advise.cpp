// allot advise: right-sizing advice from telemetry (GET /api/v1/advice, server/advice.h), the
// jobs named with their reasons, then per budget the GPU-hours measured, idle and starved.

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/client_common.h"
#include "cli/commands.h"

namespace allot::cli::client {

int cmd_advise(const Args& a, const Conn& c) {
  std::string q = "/api/v1/advice?days=" + qs_escape(a.get("days", "7"));
  if (a.has("budget")) q += "&budget=" + qs_escape(a.get("budget"));
  if (a.has("user")) q += "&user=" + qs_escape(a.get("user"));
  auto r = request(c, "GET", q);
  if (a.has("json")) {
    std::printf("%s\n", r.dump(2).c_str());
    return kOk;
  }
  const auto& jobs = r["jobs"];
  if (jobs.empty()) {
    std::printf("no advice: no job measured for at least %.0f s in the window wasted its GPUs\n",
                r.value("min_seconds", 0.0));
  }
  for (const auto& j : jobs) {
    const auto& t = j["telemetry"];
    const double gpus = j.value("gpus", 0.0), secs = t.value("seconds", 0.0);
    std::printf("job %llu %s (%s, %s, %g GPU%s, %s): GPU use %.0f%% mean over %.1f h\n",
                j["id"].get<unsigned long long>(), j.value("name", "").c_str(),
                j.value("owner", "").c_str(), j.value("budget", "").c_str(), gpus,
                gpus > 1 ? "s" : "", j.value("state", "").c_str(), t.value("gpu_util_mean", 0.0),
                secs / 3600);
    for (const auto& item : j["advice"]) {
      std::printf("  %s: %s\n", item.value("reason", "").c_str(), item.value("hint", "").c_str());
    }
  }
  if (!r["budgets"].empty()) {
    std::printf("\n%-24s %6s %6s %5s %7s %9s %10s %10s %10s\n", "BUDGET", "JOBS", "NAMED", "IDLE",
                "STARVED", "OVERSIZED", "GPU-HOURS", "IDLE-GPUH", "STARVED-H");
  }
  for (const auto& b : r["budgets"]) {
    std::printf("%-24s %6d %6d %5d %7d %9d %10.1f %10.1f %10.1f\n", b.value("budget", "").c_str(),
                b.value("jobs_measured", 0), b.value("jobs_named", 0), b.value("idle", 0),
                b.value("starved", 0), b.value("oversized_memory", 0), b.value("gpu_hours", 0.0),
                b.value("idle_gpu_hours", 0.0), b.value("starved_gpu_hours", 0.0));
  }
  return kOk;
}

}  // namespace allot::cli::client
