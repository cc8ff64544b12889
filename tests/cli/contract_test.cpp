// What the CLI says about a job's contract, from the API's job JSON and events.
#include "cli/contract.h"

#include <gtest/gtest.h>

namespace allot::cli {
namespace {

using json = nlohmann::json;

json job(const std::string& state, bool allocated, long long min_runtime, long long runs = 1,
         long long protected_until = 0) {
  return {{"state", state},
          {"allocated", allocated},
          {"runs", runs},
          {"run_start", 1000},
          {"protected_until", protected_until},
          {"spec", {{"min_runtime", min_runtime}, {"kind", "batch"}}}};
}

TEST(Contract, Durations) {
  EXPECT_EQ(human_duration(0), "0s");
  EXPECT_EQ(human_duration(59), "59s");
  EXPECT_EQ(human_duration(90), "1m30s");
  EXPECT_EQ(human_duration(300), "5m");
  EXPECT_EQ(human_duration(6720), "1h52m");
  EXPECT_EQ(human_duration(7200), "2h");
  EXPECT_EQ(human_duration(200000), "2d07h");
  EXPECT_EQ(human_duration(172800), "2d");
  EXPECT_EQ(human_duration(-5), "0s");
}

TEST(Contract, ClassAndProtectionColumns) {
  const long long now = 5000;
  EXPECT_EQ(job_class(job("running", true, 3600)), "allocated");
  EXPECT_EQ(job_class(job("running", false, 3600)), "unallocated");
  EXPECT_EQ(job_class(job("pending", false, 7200, 0)), "asks 2h");
  EXPECT_EQ(job_class(job("pending", false, 0, 0)), "unallocated");
  EXPECT_EQ(job_class(job("cancelled", false, 60, 0)), "-");
  auto debug = job("running", true, 600);
  debug["spec"]["kind"] = "debug";
  EXPECT_EQ(job_class(debug), "debug");

  EXPECT_EQ(protection_left(job("running", true, 3600, 1, now + 6720), now), "1h52m");
  EXPECT_EQ(protection_left(job("running", true, 3600, 1, now - 1), now), "ended");
  EXPECT_EQ(protection_left(job("running", false, 0, 1, now), now), "no");
  EXPECT_EQ(protection_left(job("pending", false, 3600, 0), now), "-");
}

TEST(Contract, SubmitSaysWhetherTheJobIsProtected) {
  const auto free = contract_promise(job("pending", false, 0, 0));
  EXPECT_EQ(free.rfind("UNALLOCATED", 0), 0u) << free;
  EXPECT_NE(free.find("--min-runtime"), std::string::npos) << free;
  const auto asked = contract_promise(job("pending", false, 1800, 0));
  EXPECT_NE(asked.find("protected for 30m once started"), std::string::npos) << asked;
  const auto chosen = contract_promise(job("pending", false, 0, 0), /*asked_zero=*/true);
  EXPECT_EQ(chosen.rfind("UNALLOCATED by choice (--min-runtime 0)", 0), 0u) << chosen;
  EXPECT_EQ(chosen.find("no --min-runtime"), std::string::npos) << chosen;
}

TEST(Contract, InteractiveSessions) {
  auto session = job("pending", false, 3600, 0);
  session["spec"]["kind"] = "interactive";
  // A server with the rules off (the default) promises nothing more than the contract.
  EXPECT_EQ(contract_promise(session).find("interactive"), std::string::npos);
  session["interactive"] = {
      {"allowance_gpus", 0}, {"protection_seconds", 28800}, {"stop_grace_seconds", 0}};
  EXPECT_EQ(contract_promise(session).find("interactive"), std::string::npos);
  // Submit's reply from a server that gives the allowance and the notice says what they are.
  session["interactive"] = {
      {"allowance_gpus", 8}, {"protection_seconds", 28800}, {"stop_grace_seconds", 300}};
  const auto promise = contract_promise(session);
  EXPECT_NE(promise.find("inside your interactive allowance (8 GPUs per person"), std::string::npos)
      << promise;
  EXPECT_NE(promise.find("preempted for 8h"), std::string::npos) << promise;
  EXPECT_NE(promise.find("$ALLOT_STOP_NOTICE) and 5m to save"), std::string::npos) << promise;
  EXPECT_EQ(contract_promise(job("pending", false, 3600, 0)).find("interactive"),
            std::string::npos);

  const long long now = 1000 + 2 * 3600;  // its 1 h contract is over, its 8 h allowance is not
  const json events = json::array({
      {{"time", 1000},
       {"from", "pending"},
       {"to", "starting"},
       {"reason",
        "allocated, inside alice's interactive allowance: neither demoted nor preempted for "
        "8h00m, placed"}},
  });
  EXPECT_EQ(allowance_end(session, events), 1000 + 8 * 3600);
  auto running = job("running", true, 3600, 1, 1000 + 3600);
  running["spec"]["kind"] = "interactive";
  const auto story = running_story(running, events, now);
  ASSERT_FALSE(story.empty());
  EXPECT_NE(story[0].find("inside its owner's interactive allowance"), std::string::npos)
      << story[0];
  EXPECT_NE(story[0].find("(6h left)"), std::string::npos) << story[0];
  // Past the allowance's end: an ordinary allocated job past its contract.
  EXPECT_NE(running_story(running, events, 1000 + 9 * 3600)[0].find("may now be preempted"),
            std::string::npos);
  EXPECT_EQ(allowance_end(running, json::array()), 0);
}

TEST(Contract, WhyARunningJobIsUnprotected) {
  const long long now = 5000;
  const json events = json::array({
      {{"time", 900}, {"from", ""}, {"to", "pending"}, {"reason", "submitted"}},
      {{"time", 1000},
       {"from", "pending"},
       {"to", "starting"},
       {"reason", "unallocated (/lab/nlp is over its burst limit), placed"}},
      {{"time", 1001}, {"from", "starting"}, {"to", "running"}, {"reason", "started on n1"}},
  });
  EXPECT_EQ(unallocated_cause(events), "/lab/nlp is over its burst limit");
  // A note on the starting run (its node drains) is no new start.
  json noted = events;
  noted.insert(noted.begin() + 2,
               {{"time", 1000},
                {"from", "starting"},
                {"to", "starting"},
                {"reason", "node n1 is draining: this job will be stopped now"}});
  EXPECT_EQ(unallocated_cause(noted), "/lab/nlp is over its burst limit");
  auto story = running_story(job("running", false, 1800), events, now);
  ASSERT_FALSE(story.empty());
  EXPECT_EQ(story[0].rfind("UNALLOCATED (/lab/nlp is over its burst limit)", 0), 0u) << story[0];

  auto protected_story = running_story(job("running", true, 7200, 1, now + 600), events, now);
  EXPECT_NE(protected_story[0].find("protected until"), std::string::npos);
  EXPECT_NE(protected_story[0].find("(10m left)"), std::string::npos) << protected_story[0];

  // A demotion after the start is the latest word, and is listed.
  json demoted = events;
  demoted.push_back({{"time", 2000},
                     {"from", "running"},
                     {"to", "running"},
                     {"reason", "demoted: now unallocated (budget over allocation)"}});
  EXPECT_EQ(unallocated_cause(demoted), "budget over allocation");
  story = running_story(job("running", false, 1800), demoted, now);
  EXPECT_NE(story.back().find("demoted: now unallocated"), std::string::npos) << story.back();
  // No minimum runtime asked: say how to get one.
  story = running_story(job("running", false, 0), json::array(), now);
  EXPECT_NE(story.back().find("--min-runtime"), std::string::npos);
}

TEST(Contract, StopsAndDrains) {
  const json events = json::array({
      {{"time", 1}, {"from", "running"}, {"to", "preempting"}, {"reason", "preempted for job 24"}},
      {{"time", 2},
       {"from", "preempting"},
       {"to", "requeued"},
       {"reason", "preempted for job 24; stopped on n1 (killed by signal 15)"}},
      {{"time", 3}, {"from", "requeued"}, {"to", "pending"}, {"reason", "requeued"}},
  });
  EXPECT_EQ(last_stop(events), "preempted for job 24; stopped on n1 (killed by signal 15)");
  EXPECT_EQ(last_stop(json::array()), "");
  // Placed at 1000: free work stops at once, a contract is honoured, also one that started
  // unallocated (its minimum runtime from the placement).
  EXPECT_EQ(drain_stop_time(job("running", false, 0, 1, 1000), 5000), 5000);
  EXPECT_EQ(drain_stop_time(job("running", true, 4900, 1, 5900), 5000), 5900);
  EXPECT_EQ(drain_stop_time(job("running", false, 7200, 1, 1000), 5000), 8200);
  EXPECT_EQ(drain_stop_time(job("running", true, 600, 1, 1600), 5000), 5000);
  // What why and show say: the node, its reason, and when and why then.
  EXPECT_EQ(drain_sentence(job("running", false, 0, 1, 1000), "n1", "draining", "fan", 5000),
            "node n1 is draining (fan): this job will be stopped now (it is not protected)");
  auto s = drain_sentence(job("running", true, 4900, 1, 5900), "n1", "draining", "", 5000);
  EXPECT_EQ(s.rfind("node n1 is draining: this job will be stopped at ", 0), 0u) << s;
  EXPECT_NE(s.find("(in 15m; its protection ends then)"), std::string::npos) << s;
  s = drain_sentence(job("running", false, 7200, 1, 1000), "n2", "unhealthy", "xid 79", 5000);
  EXPECT_EQ(s.rfind("node n2 is unhealthy (xid 79): this job will be stopped at ", 0), 0u) << s;
  EXPECT_NE(s.find("(in 53m20s; it has run its minimum runtime then)"), std::string::npos) << s;
}

}  // namespace
}  // namespace allot::cli
