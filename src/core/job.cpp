#include "core/job.h"

#include <string_view>

#include "core/budget_tree.h"

namespace allot::core {

const char* to_string(JobKind k) {
  switch (k) {
    case JobKind::Batch:
      return "batch";
    case JobKind::Interactive:
      return "interactive";
    case JobKind::Debug:
      return "debug";
    case JobKind::Inference:
      return "inference";
  }
  return "?";
}

const char* to_string(Priority p) {
  switch (p) {
    case Priority::Low:
      return "low";
    case Priority::Normal:
      return "normal";
    case Priority::High:
      return "high";
    case Priority::Urgent:
      return "urgent";
  }
  return "?";
}

std::optional<JobKind> parse_job_kind(std::string_view s) {
  for (JobKind k : {JobKind::Batch, JobKind::Interactive, JobKind::Debug, JobKind::Inference}) {
    if (s == to_string(k)) return k;
  }
  return std::nullopt;
}

std::optional<Priority> parse_priority(std::string_view s) {
  for (Priority p : {Priority::Low, Priority::Normal, Priority::High, Priority::Urgent}) {
    if (s == to_string(p)) return p;
  }
  return std::nullopt;
}

Status validate_job(const JobSpec& job, const PolicyConfig& config, const BudgetTree& budgets) {
  if (job.id == kNoJob) return Error{"id", "must be greater than 0"};
  if (!budgets.valid(job.budget)) return Error{"budget", "no such budget"};
  if (!budgets.is_leaf(job.budget)) {
    return Error{"budget", "'" + budgets.node(job.budget).path +
                               "' has sub-budgets; a job is funded by a leaf budget"};
  }
  const Shape& s = job.shape;
  if (s.nodes < 1 || s.nodes > config.max_nodes_per_job) {
    return Error{"nodes", "must be between 1 and " + std::to_string(config.max_nodes_per_job)};
  }
  if (s.gpus_per_node < 1 || s.gpus_per_node > config.max_gpus_per_node) {
    return Error{"gpus_per_node",
                 "must be between 1 and " + std::to_string(config.max_gpus_per_node)};
  }
  if (s.gpu_milli < 1 || s.gpu_milli > kWholeGpu) {
    return Error{"gpu_milli", "must be between 1 and 1000 (thousandths of a GPU)"};
  }
  if (s.last_node_gpus < 0 || s.last_node_gpus >= s.gpus_per_node) {
    return Error{"last_node_gpus", "must be between 0 (an even gang) and gpus_per_node - 1 (" +
                                       std::to_string(s.gpus_per_node - 1) + ")"};
  }
  if (s.uneven() && s.nodes < 2) {
    return Error{"last_node_gpus", "an uneven gang spans at least 2 nodes"};
  }
  if (s.uneven() && s.fractional()) {
    return Error{"last_node_gpus", "an uneven gang asks for whole GPUs"};
  }
  if (s.fractional() && (s.nodes != 1 || s.gpus_per_node != 1)) {
    return Error{"gpu_milli", "a fraction of a GPU can only be asked for one GPU on one node"};
  }
  if (s.mig != 0 && !s.fractional()) {
    return Error{"mig", "a MIG profile is a fraction of one GPU (gpu_milli below 1000)"};
  }
  if (job.min_runtime < 0) return Error{"min_runtime", "must not be negative"};
  if (job.min_runtime > config.max_min_runtime) {
    return Error{"min_runtime",
                 "must be at most " + std::to_string(config.max_min_runtime) +
                     " s (the maximum "
                     "minimum runtime); a longer job runs on past it while its budget allows"};
  }
  if (job.kind == JobKind::Debug) {
    if (job.min_runtime > config.max_debug_min_runtime) {
      return Error{"min_runtime", "a debug job's minimum runtime must be at most " +
                                      std::to_string(config.max_debug_min_runtime) + " s"};
    }
    if (s.total_gpus() > config.max_debug_gpus) {
      return Error{"gpus", "a debug job asks for at most " + std::to_string(config.max_debug_gpus) +
                               " GPUs"};
    }
  }
  if (job.expected_duration && *job.expected_duration < 0) {
    return Error{"expected_duration", "must not be negative"};
  }
  if (job.earlier_starts < 0 || job.earlier_starts > 1'000'000) {
    return Error{"earlier_starts", "must be between 0 and 1000000"};
  }
  if (job.owner.size() > 256) return Error{"owner", "must be at most 256 characters"};
  if (job.models.size() > 64) return Error{"gpu_models", "at most 64 models"};
  if (job.clusters.size() > 256) return Error{"clusters", "at most 256 clusters"};
  return ok_status();
}

}  // namespace allot::core
