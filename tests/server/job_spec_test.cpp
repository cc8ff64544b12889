// The job-spec reader (src/server/job_spec.cpp) called directly: cases the fuzzer found
// (fuzz/job_spec_fuzz.cpp).
#include "server/job_spec.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/budget_tree.h"
#include "core/gpu_catalog.h"
#include "core/policy_config.h"

namespace allot::server {
namespace {

using nlohmann::json;

// An environment name that is refused is echoed in the error, cut to 128 bytes: never inside a
// UTF-8 sequence, or the error could not be written back as JSON.
TEST(JobSpec, ARefusedEnvNameIsCutOnACharacterBoundary) {
  core::BudgetTree budgets;
  (void)budgets.add(budgets.root(), "lab", 1);
  std::string name = "a";
  for (int i = 0; i < 70; ++i) name += "\xc3\xa9";  // "é": two bytes each, 141 bytes in all
  const json body = {{"idempotency_key", "k"}, {"budget", "/lab"}, {"env", {{name, "x"}}}};
  auto r = parse_job_request(body, core::GpuCatalog::standard(), {}, budgets, core::PolicyConfig{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "env." + name.substr(0, 127));
  EXPECT_NO_THROW((void)json(r.error().field).dump());
}

}  // namespace
}  // namespace allot::server
