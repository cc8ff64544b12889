// Reconciliation: the server's assignments are the truth about what runs on this node. Given
// them and what the agent runs, decide what to start, stop, kill and report lost. Pure.
//
//   assigned, unknown here, state starting        -> launch
//   assigned, unknown here, state running         -> report lost (it ran here, the agent lost it)
//   in `stop`, running here                        -> stop with the order's grace
//   running here, neither assigned nor in `stop`   -> kill (fencing: the server gave it up)
//   a run already finished and reported (`done`) is never launched again, whatever a stale
//   snapshot of the server says.
#pragma once

#include <set>
#include <vector>

#include "agent/protocol.h"
#include "agent/runner.h"

namespace allot::agent {

struct LocalRun {
  RunKey key;
  RunPhase phase = RunPhase::Running;
  bool stop_requested = false;
};

struct Actions {
  std::vector<const Assignment*> launch;
  std::vector<StopOrder> stop;
  std::vector<RunKey> kill;
  std::vector<RunKey> lost;
};

Actions reconcile(const Assignments& assigned, const std::vector<LocalRun>& local,
                  const std::set<RunKey>& done);

}  // namespace allot::agent
