// The job request of the API: validation of a submit body (every error names its field) and its
// canonical form, which the store keeps and the scheduler loop turns back into a core::JobSpec
// after a restart.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/scheduler.h"
#include "server/feasibility.h"

namespace allot::server {

struct JobSpecLimits {
  std::size_t max_name = 128;
  std::size_t max_key = 128;
  std::size_t max_list = 16;
  std::size_t max_command_args = 256;
  std::size_t max_arg = 4096;
  core::Duration max_expected_duration = 30 * core::kDay;
  std::size_t max_env = 64;
  std::size_t max_env_name = 128;
  std::size_t max_env_value = 4096;
  std::size_t max_workdir = 1024;
  std::int64_t max_memory_mib = 16LL * 1024 * 1024;  // 16 TiB per node
  double max_cpus = 1024;
  std::size_t max_container = 512;
};

struct ParsedJob {
  std::string idempotency_key;
  std::string name;
  std::string budget;
  std::string canonical_json;  // what the store keeps
  core::JobSpec spec;          // id, owner and submit_time left to the caller
};

// `body` must be an object; unknown fields are refused. `gpus` (a total, instead of nodes and
// gpus_per_node) is shaped against the largest of `nodes` the job accepts, by the core's rule.
core::Result<ParsedJob> parse_job_request(const nlohmann::json& body,
                                          const core::GpuCatalog& catalog,
                                          const std::map<std::string, core::ClusterId>& clusters,
                                          const core::BudgetTree& budgets,
                                          const core::PolicyConfig& policy,
                                          const JobSpecLimits& limits = {},
                                          const std::vector<NodeShape>& nodes = {});

// docs/policy.md §2, "Default minimum runtime": what a job submitted to `budget` without a
// minimum runtime gets, from the nearest budget on its path (root excluded) that sets one.
struct DefaultMinRuntime {
  std::int64_t seconds = 0;
  std::string from;  // the budget that set it
};
std::optional<DefaultMinRuntime> default_min_runtime(
    const std::map<std::string, std::int64_t>& defaults, const std::string& budget);
// Puts it into a submit body that gives no "min_runtime" (a debug job gets at most the policy's
// max_debug_min_runtime) and says what it put; nullopt (body unchanged) when the body gives one,
// names no budget, or no budget on the path sets a default.
std::optional<DefaultMinRuntime> apply_default_min_runtime(
    nlohmann::json& body, const std::map<std::string, std::int64_t>& defaults,
    const core::PolicyConfig& policy);

// The canonical JSON back into a core spec (ids resolved against the given model).
core::Result<core::JobSpec> spec_from_canonical(
    const std::string& json, const core::GpuCatalog& catalog,
    const std::map<std::string, core::ClusterId>& clusters, const core::BudgetTree& budgets);

// Names: [A-Za-z0-9._@-]{1,max}, but not "." or "..".
// The integer field `f` of object `b` (`def` when absent), within [lo, hi]; an error names
// `where` + `f` (`where`: the enclosing object's path, e.g. "autoscale.").
core::Result<std::int64_t> get_int(const nlohmann::json& b, const char* f, std::int64_t def,
                                   std::int64_t lo, std::int64_t hi, const std::string& where = "");
bool valid_name(const std::string& s, std::size_t max = 128);
// Budget paths: "/" or "/a/b" with valid names (no empty, "." or ".." segment), at most 512
// characters.
bool valid_budget_path(const std::string& s);
// Environment variable names: [A-Za-z_][A-Za-z0-9_]{0,max-1}.
bool valid_env_name(const std::string& s, std::size_t max = 128);
// Set by allot for every job: ALLOT_*, CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES.
bool reserved_env_name(const std::string& s);

}  // namespace allot::server
