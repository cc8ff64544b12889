// The store's durable group commit on its own (no HTTP): concurrent callers each write one job per
// batch, as the API's submit does, and wait for the commit. Per-job figures are the writer's and
// the callers' CPU together (process CPU time over jobs written; with PostgreSQL, the server's
// processes are not in it). The embedded SQLite store in a temporary directory, or with
// ALLOT_BENCH_STORE=postgres://... that PostgreSQL database (jobs are added after its last one).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>

#include "store/open_store.h"
#include "store/sqlite_store.h"

namespace {

using namespace allot;

std::unique_ptr<store::Store> g_store;
std::string g_dir;
std::atomic<std::uint64_t> g_next{1};

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

store::JobRecord job(std::uint64_t id) {
  store::JobRecord r;
  r.id = id;
  r.owner = "admin";
  r.idempotency_key = "bench-" + std::to_string(id);
  r.budget = "/lab/t" + std::to_string(id % 10);
  r.spec_json =
      R"({"budget":"/lab/t3","clusters":[],"command":[],"expected_duration":3600,"gpu_milli":1000,)"
      R"("gpus_per_node":1,"kind":"batch","min_runtime":0,"models":[],"name":"","nodes":1,)"
      R"("priority":"normal","resumable":false})";
  r.state = "pending";
  r.reason = "submitted";
  r.submit_time = 1'700'000'000;
  r.updated_at = r.submit_time;
  return r;
}

// One job per write, from state.threads() concurrent callers (the group commit's batching).
void BM_DurableSubmit(benchmark::State& state) {
  if (state.thread_index() == 0) {
    if (const char* pg = std::getenv("ALLOT_BENCH_STORE"); pg && *pg) {
      auto r = store::open_store(pg);
      if (!r.ok()) {
        state.SkipWithError(r.error().message().c_str());
        return;
      }
      g_store = std::move(r.value());
      g_next = g_store->max_job_id() + 1;
    } else {
      char tmpl[] = "/tmp/allot-store-bench-XXXXXX";
      g_dir = mkdtemp(tmpl);
      g_store = std::move(store::open_sqlite(g_dir + "/allot.db").value());
    }
  }
  // Google Benchmark starts every thread's timing loop together, after the setup above.
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    if (!g_store) break;  // it did not open (said above)
    auto st = g_store->write({store::op::InsertJob{job(g_next++)}});
    if (!st.ok()) state.SkipWithError(st.error().reason.c_str());
  }
  if (state.thread_index() == 0) {
    state.counters["cpu_us_per_job"] =
        benchmark::Counter((process_cpu_seconds() - cpu0) * 1e6 /
                           static_cast<double>(state.iterations()) / state.threads());
    g_store.reset();
    if (!g_dir.empty()) std::filesystem::remove_all(g_dir);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DurableSubmit)->Threads(64)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
