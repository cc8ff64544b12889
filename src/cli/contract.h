// What the client commands say about a job's contract: whether it holds an allocated, protected
// run or runs unallocated (preemptible at any time), until when, and why it stopped. Pure
// functions of the API's job JSON and events, so that the words are tested without a server.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace allot::cli {

// 90 -> "1m30s", 6720 -> "1h52m", 200000 -> "2d07h".
std::string human_duration(long long seconds);
// A time as local wall-clock: "14:05:03" today, "Dec 02 14:05" on another day.
std::string local_time(long long t, long long now);

// The CLASS column: "allocated", "unallocated" or "debug" for a job that holds or held GPUs;
// for one still waiting, what it asked for ("asks 2h", or "unallocated" without a minimum
// runtime); "-" for one that never ran.
std::string job_class(const nlohmann::json& job);
// The PROTECTED column: the contract's time left ("1h52m"), "ended", "no" (unallocated) or "-".
std::string protection_left(const nlohmann::json& job, long long now);
// What `submit` promises before the job starts: its contract or the lack of one.
// asked_zero: the submission itself asked for minimum runtime 0 (not a missing --min-runtime).
std::string contract_promise(const nlohmann::json& job, bool asked_zero = false);
// Why a started job runs unallocated, from its last start event ("/lab/nlp is over its burst
// limit"); "" if it runs allocated or the events do not say.
std::string unallocated_cause(const nlohmann::json& events);
// When the current run's interactive allowance protection ends (docs/policy.md section 6), from its
// start event; 0 when it started outside the allowance.
long long allowance_end(const nlohmann::json& job, const nlohmann::json& events);
// `why` for a job holding GPUs: its class, protection and risk, class changes since it started.
std::vector<std::string> running_story(const nlohmann::json& job, const nlohmann::json& events,
                                       long long now);
// The reason of the job's last stop (preempted, drained, node down), "" if it never stopped.
std::string last_stop(const nlohmann::json& events);
// When the run on a draining node will be stopped: once it has run its minimum runtime (or, if
// promoted later, its protected period), now if it has already.
long long drain_stop_time(const nlohmann::json& job, long long now);
// What `why` and `show` say of a job on a draining (or unhealthy) node: "node n1 is draining
// (fan): this job will be stopped at 14:30:00 (in 29m; its protection ends then)".
std::string drain_sentence(const nlohmann::json& job, const std::string& node,
                           const std::string& health, const std::string& reason, long long now);

}  // namespace allot::cli
