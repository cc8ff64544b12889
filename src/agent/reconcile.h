// Reconciliation: the server's assignments are the truth about what runs on this node. Given
// them and what the agent runs, decide what to start, stop, kill and report lost. Pure.
//
//   assigned, unknown here, state starting        -> launch
//   assigned, unknown here, state running         -> report lost (it ran here, the agent lost it)
//   in `stop`, running here                        -> stop with the order's grace
//   running here, neither assigned nor in `stop`   -> kill (fencing: the server gave it up)
//   a run already finished and reported (`done`) is never launched again, whatever a stale
//   snapshot of the server says.
//   a launch whose GPUs a live local run still holds (a run being stopped or killed, or one the
//   server forgot across its restart) waits: it is in `waiting`, and starts on a later poll once
//   those runs have exited. Two fractional runs may share a GPU; a whole-GPU run shares with none.
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
  std::vector<int> gpus;  // GPU indices the run holds on this node
  int gpu_milli = 1000;   // its part of each: below 1000, a fraction (MIG or shared)
};

struct Actions {
  std::vector<const Assignment*> launch;
  std::vector<StopOrder> stop;
  std::vector<RunKey> kill;
  std::vector<RunKey> lost;
  std::vector<const Assignment*> waiting;  // placed here, held back until its GPUs are free
};

Actions reconcile(const Assignments& assigned, const std::vector<LocalRun>& local,
                  const std::set<RunKey>& done);

}  // namespace allot::agent
