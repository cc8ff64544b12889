// The API's submit-body work per request, apart from HTTP and the store: parsing the JSON body and
// validating it into a job spec and its canonical form (server/job_spec.h).
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include "server/job_spec.h"

namespace {

using namespace allot;

struct Model {
  core::GpuCatalog catalog = core::GpuCatalog::standard();
  std::map<std::string, core::ClusterId> clusters{{"default", 0}};
  core::BudgetTree budgets;
  core::PolicyConfig policy;
  Model() {
    auto lab = budgets.add(budgets.root(), "lab", 1).value();
    for (int i = 0; i < 10; ++i) (void)budgets.add(lab, "t" + std::to_string(i), 1);
  }
};

// The body bench/submit.lua sends.
const std::string kSmall =
    R"({"idempotency_key":"wrk-1700000000-1-12345","budget":"/lab/t3","gpus_per_node":1,)"
    R"("expected_duration":3600})";
// A training job as the CLI sends one from a YAML spec.
const std::string kFull =
    R"({"idempotency_key":"cli-7f3a9c2e","name":"llama-70b-sft","budget":"/lab/t3","nodes":4,)"
    R"("gpus_per_node":8,"models":["H100","H200"],"min_runtime":14400,"resumable":true,)"
    R"("priority":"high","kind":"batch","expected_duration":172800,)"
    R"("command":["torchrun","--nproc-per-node=8","train.py","--config","configs/70b.yaml"],)"
    R"("env":{"WANDB_PROJECT":"sft","NCCL_DEBUG":"WARN"},"workdir":"/home/alice/sft",)"
    R"("memory_mib":1048576,"cpus":96,"container":"nvcr.io/nvidia/pytorch:24.05-py3"})";

void parse(benchmark::State& state, const std::string& body) {
  Model m;
  for (auto _ : state) {
    auto b = nlohmann::json::parse(body, nullptr, false);
    auto r = server::parse_job_request(b, m.catalog, m.clusters, m.budgets, m.policy);
    if (!r.ok()) state.SkipWithError(r.error().reason.c_str());
    benchmark::DoNotOptimize(r);
  }
}

void BM_SubmitBody_Small(benchmark::State& state) {
  parse(state, kSmall);
}
void BM_SubmitBody_Full(benchmark::State& state) {
  parse(state, kFull);
}
BENCHMARK(BM_SubmitBody_Small);
BENCHMARK(BM_SubmitBody_Full);

}  // namespace

BENCHMARK_MAIN();
