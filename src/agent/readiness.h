// Readiness checks of service replicas (docs/agent.md "Readiness checks"): the HTTP kind (a GET
// of 127.0.0.1:PORT/PATH, 2xx meaning ready), and the bounded, printable reasons a failed check
// is reported with. The command kind runs through the runner (Runner::start_check), as the
// replica itself does.
#pragma once

#include <chrono>
#include <string>

#include "agent/runner.h"

namespace allot::agent {

// One GET on loopback, within `timeout` (connection and answer); its body is not read past what
// the HTTP client buffers. Blocking: the agent runs it off its loop thread.
Runner::CheckOutcome http_ready_check(int port, const std::string& path,
                                      std::chrono::milliseconds timeout);

// `s` with every byte that is not printable ASCII replaced by '?' and cut to `max` bytes: what a
// report may carry whatever a check printed.
std::string printable(const std::string& s, std::size_t max);

}  // namespace allot::agent
