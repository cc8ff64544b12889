// The job lifecycle as the server records it:
//
//   pending ─▶ starting ─▶ running ─▶ succeeded | failed
//      │          │           │
//      │          └───────────┴─▶ preempting ─▶ requeued (resumable: back to the queue)
//      │                                      └▶ preempted (not resumable: ended)
//      └─▶ cancelled (from any non-terminal state)
//
// Every transition is persisted with its time and reason; an illegal one is refused.
#pragma once

#include <optional>
#include <string_view>

namespace allot::server {

enum class JobStatus {
  Pending,
  Starting,  // the scheduler placed it; its agent has not reported it started yet
  Running,
  Preempting,  // a stop was decided; waiting for the agent to confirm
  Requeued,    // stopped and back in the queue (resumable)
  Preempted,   // stopped for good (not resumable)
  Succeeded,
  Failed,
  Cancelled,
};

const char* to_string(JobStatus s);
std::optional<JobStatus> parse_job_status(std::string_view s);
bool is_terminal(JobStatus s);
// Waiting in the queue (pending or requeued).
bool is_queued(JobStatus s);
// Holding GPUs (starting, running, preempting).
bool holds_gpus(JobStatus s);
bool can_transition(JobStatus from, JobStatus to);

}  // namespace allot::server
