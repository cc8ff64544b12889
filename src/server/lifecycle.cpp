#include "server/lifecycle.h"

namespace allot::server {

const char* to_string(JobStatus s) {
  switch (s) {
    case JobStatus::Pending:
      return "pending";
    case JobStatus::Starting:
      return "starting";
    case JobStatus::Running:
      return "running";
    case JobStatus::Preempting:
      return "preempting";
    case JobStatus::Requeued:
      return "requeued";
    case JobStatus::Preempted:
      return "preempted";
    case JobStatus::Succeeded:
      return "succeeded";
    case JobStatus::Failed:
      return "failed";
    case JobStatus::Cancelled:
      return "cancelled";
  }
  return "?";
}

std::optional<JobStatus> parse_job_status(std::string_view s) {
  for (int i = 0; i <= static_cast<int>(JobStatus::Cancelled); ++i) {
    auto st = static_cast<JobStatus>(i);
    if (s == to_string(st)) return st;
  }
  return std::nullopt;
}

bool is_terminal(JobStatus s) {
  return s == JobStatus::Preempted || s == JobStatus::Succeeded || s == JobStatus::Failed ||
         s == JobStatus::Cancelled;
}
bool is_queued(JobStatus s) {
  return s == JobStatus::Pending || s == JobStatus::Requeued;
}
bool holds_gpus(JobStatus s) {
  return s == JobStatus::Starting || s == JobStatus::Running || s == JobStatus::Preempting;
}

bool can_transition(JobStatus from, JobStatus to) {
  using S = JobStatus;
  if (is_terminal(from)) return false;
  if (to == S::Cancelled) return true;
  switch (from) {
    case S::Pending:
    case S::Requeued:
      return to == S::Starting || to == S::Failed;
    case S::Starting:
      return to == S::Running || to == S::Preempting || to == S::Succeeded || to == S::Failed;
    case S::Running:
      return to == S::Preempting || to == S::Succeeded || to == S::Failed;
    case S::Preempting:
      return to == S::Requeued || to == S::Preempted || to == S::Succeeded || to == S::Failed;
    default:
      return false;
  }
}

}  // namespace allot::server
