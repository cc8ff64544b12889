// The job-spec reader (src/server/job_spec.cpp) on any submit body. Contract:
// - no exception escapes; a refusal names its field and can be sent back as JSON;
// - an accepted job's canonical form (what the store keeps) reads back, after a restart, as the
//   same core spec, and submitting the canonical form again is accepted as the same job (the
//   canonical form is a fixed point, but for the empty name it writes for a job without one).
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "check.h"
#include "core/budget_tree.h"
#include "core/gpu_catalog.h"
#include "core/policy_config.h"
#include "server/job_spec.h"

namespace {

using allot::core::JobSpec;
using nlohmann::json;

struct World {
  allot::core::GpuCatalog catalog = allot::core::GpuCatalog::standard();
  std::map<std::string, allot::core::ClusterId> clusters{{"default", 0}, {"east", 1}};
  allot::core::BudgetTree budgets;
  allot::core::PolicyConfig policy;
  World() {
    auto lab = budgets.add(budgets.root(), "lab", 1).value();
    (void)budgets.add(lab, "nlp", 2);
    (void)budgets.add(lab, "vision", 1);
    (void)budgets.add(budgets.root(), "ops", 1);
  }
};

const World& world() {
  static const World w;
  return w;
}

bool same_spec(const JobSpec& a, const JobSpec& b) {
  return a.budget == b.budget && a.shape == b.shape && a.models == b.models &&
         a.clusters == b.clusters && a.min_runtime == b.min_runtime && a.resumable == b.resumable &&
         a.priority == b.priority && a.kind == b.kind && a.expected_duration == b.expected_duration;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const World& w = world();
  const json body = json::parse(data, data + size, nullptr, false);
  if (body.is_discarded()) return 0;  // the API refuses it before the reader (400, "body")
  auto r = allot::server::parse_job_request(body, w.catalog, w.clusters, w.budgets, w.policy);
  if (!r.ok()) {
    allot::fuzz::check_error_json(r.error());
    return 0;
  }
  const auto& job = r.value();
  FUZZ_CHECK(!job.idempotency_key.empty(), "accepted without an idempotency key");
  FUZZ_CHECK(allot::server::valid_budget_path(job.budget), "budget '%s'", job.budget.c_str());

  // After a restart: the store's canonical form back into a spec.
  auto back =
      allot::server::spec_from_canonical(job.canonical_json, w.catalog, w.clusters, w.budgets);
  FUZZ_CHECK(back.ok(), "canonical form unreadable: %s", job.canonical_json.c_str());
  FUZZ_CHECK(same_spec(back.value(), job.spec), "canonical form reads as another spec: %s",
             job.canonical_json.c_str());

  // Submitting the canonical form again makes the same job.
  json again = json::parse(job.canonical_json);
  again["idempotency_key"] = job.idempotency_key;
  if (again["name"] == "") again.erase("name");  // the canonical form writes "no name" as ""
  auto r2 = allot::server::parse_job_request(again, w.catalog, w.clusters, w.budgets, w.policy);
  FUZZ_CHECK(r2.ok(), "canonical form refused (%s): %s",
             r2.ok() ? "" : r2.error().message().c_str(), job.canonical_json.c_str());
  FUZZ_CHECK(r2.value().canonical_json == job.canonical_json, "not a fixed point: %s then %s",
             job.canonical_json.c_str(), r2.value().canonical_json.c_str());
  FUZZ_CHECK(same_spec(r2.value().spec, job.spec), "resubmitted as another spec: %s",
             job.canonical_json.c_str());
  return 0;
}
