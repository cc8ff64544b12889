// The agent's 1 Hz telemetry tick on an 8-GPU node: one sample of every GPU (fake backend, with
// an empty control directory read as the fake reads it), the process trees of 8 runs (3
// processes each: sh and two sleeps) and their /proc times, and the aggregation (a take every 10
// ticks, as the agent posts every 10 s). Reported as CPU time per tick and as a share of one core
// at one tick a second (target < 1%).
//
// Trees are found through the runs' cgroups where this machine has them (Tick/cgroup), and by
// scanning /proc for their sessions without (Tick/session).
//
// Post/report: the agent's server client posting a report-sized body on its kept-alive
// connection to a local HTTP server, per post (wall time): what each report, heartbeat and log
// upload costs the agent's loop beyond the server's own work.
//
// The binary is its own shim: `agent_bench agent-shim ...` runs shim_main.
#include <benchmark/benchmark.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <thread>

#include "agent/gpu_backend.h"
#include "agent/runner.h"
#include "agent/server_client.h"
#include "agent/telemetry.h"

namespace {

using namespace allot::agent;  // NOLINT(google-build-using-namespace)
namespace fs = std::filesystem;

std::string self() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return std::string(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

void tick_benchmark(benchmark::State& state, bool cgroups) {
  char tmpl[] = "/tmp/allot-agent-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  fs::create_directories(dir + "/control");
  auto backend = make_fake_backend_from_text(
      "model: H100\ngpus: 8\nmemory_mib: 81559\ntelemetry: {util_pct: 87, mem_used_mib: 61234}\n"
      "control_dir: " +
          dir + "/control\n",
      "bench");
  if (!backend.ok()) {
    state.SkipWithError(backend.error().message().c_str());
    return;
  }
  RunnerOptions options;
  options.state_dir = dir + "/state";
  options.shim_binary = self();
  if (!cgroups) options.cgroup_root = options.devices_cgroup_root = "none";
  Runner runner(options);
  if (cgroups && runner.capabilities().cgroup.empty() &&
      runner.capabilities().devices_cgroup.empty()) {
    state.SkipWithError(("no cgroup here: " + runner.isolation()).c_str());
    return;
  }
  GpuHolders holders;
  for (int i = 0; i < 8; ++i) {
    LaunchSpec spec;
    spec.key = {static_cast<allot::core::JobId>(i + 1), 1};
    spec.command = {"/bin/sh", "-c", "sleep 1000 & sleep 1000 & wait"};
    auto s = runner.launch(spec);
    if (!s.ok()) {
      state.SkipWithError(s.error().message().c_str());
      return;
    }
    holders[spec.key] = {i};
  }
  // Until every run shows its three processes.
  for (int wait = 0; wait < 2000; ++wait) {
    std::size_t n = 0;
    for (const auto& [key, pids] : runner.processes()) n += pids.size();
    if (n >= 24) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  TelemetryAggregator agg;
  double now = 0;
  std::size_t processes = 0;
  const double cpu0 = thread_cpu_seconds();
  for (auto _ : state) {
    auto samples = backend.value()->sample(now);
    std::map<RunKey, ProcessTimes> times;
    processes = 0;
    for (const auto& [key, pids] : runner.processes()) {
      times[key] = process_times(pids);
      processes += pids.size();
    }
    agg.add(now, samples.value(), holders, times);
    if (static_cast<int>(now) % 10 == 9) benchmark::DoNotOptimize(agg.take_jobs());
    now += 1;
  }
  const double cpu = thread_cpu_seconds() - cpu0;
  state.counters["processes"] = static_cast<double>(processes);
  // CPU seconds per tick over the one second between ticks, in percent.
  state.counters["core_pct_at_1Hz"] = 100 * cpu / static_cast<double>(state.iterations());

  for (const RunStatus& s : runner.poll()) runner.kill(s.key);
  for (int wait = 0; wait < 2000; ++wait) {
    bool all = true;
    for (const RunStatus& s : runner.poll()) all = all && s.phase == RunPhase::Exited;
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  fs::remove_all(dir);
}

void BM_TelemetryTick_cgroup(benchmark::State& state) {
  tick_benchmark(state, true);
}
void BM_TelemetryTick_session(benchmark::State& state) {
  tick_benchmark(state, false);
}
BENCHMARK(BM_TelemetryTick_cgroup)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TelemetryTick_session)->Unit(benchmark::kMicrosecond);

void BM_ServerClientPost(benchmark::State& state) {
  httplib::Server svr;
  svr.set_tcp_nodelay(true);  // as allot's API server
  svr.Post("/api/v1/agent/nodes/n01/reports", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"accepted":1})", "application/json");
  });
  const int port = svr.bind_to_any_port("127.0.0.1");
  std::thread serve([&] { svr.listen_after_bind(); });
  while (!svr.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ServerClient client({"http://127.0.0.1:" + std::to_string(port), "allot_token", "", false});
  const nlohmann::json report = {
      {"reports", {{{"job", 12345}, {"run", 1}, {"state", "started"}, {"pid", 4242}}}}};
  for (auto _ : state) {
    const Reply r = client.post("/api/v1/agent/nodes/n01/reports", report);
    if (!r.ok()) state.SkipWithError(r.error.c_str());
  }
  svr.stop();
  serve.join();
}
BENCHMARK(BM_ServerClientPost)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "agent-shim") == 0) {
    return shim_main(argc - 1, argv + 1);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
