// The agent's reader of the server's assignments (src/agent/protocol.cpp: the one protocol
// message an agent receives) on any answer body. An agent trusts nothing it is sent, so the
// contract is:
// - no exception escapes; a refusal names its field and can be sent back as JSON;
// - what is accepted is within the protocol's bounds (keys, states, GPU indices, grace), and
//   written back in the protocol's form (docs/agent-protocol.md) it reads as the same assignments.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/protocol.h"
#include "check.h"

namespace {

using allot::agent::Assignment;
using allot::agent::Assignments;
using nlohmann::json;

json key_json(const allot::agent::RunKey& k) {
  return {{"job", k.job}, {"run", k.run}};
}

// The server's side of the message, as docs/agent-protocol.md gives it.
json to_json(const Assignments& a) {
  json run = json::array();
  for (const Assignment& e : a.run) {
    json j = key_json(e.key);
    j.update(json{{"state", e.state},
                  {"gpus", e.gpus},
                  {"gpu_milli", e.gpu_milli},
                  {"command", e.command},
                  {"env", e.env},
                  {"workdir", e.workdir},
                  {"memory_mib", e.memory_mib},
                  {"cpus", e.cpus},
                  {"container", e.container},
                  {"owner", e.owner},
                  {"budget", e.budget},
                  {"name", e.name},
                  {"kind", e.kind},
                  {"resumable", e.resumable},
                  {"grace_seconds", e.grace_seconds},
                  {"rank", e.rank},
                  {"nodes", e.nodes},
                  {"rendezvous", e.rendezvous}});
    run.push_back(std::move(j));
  }
  json stop = json::array();
  for (const auto& s : a.stop) {
    json j = key_json(s.key);
    j["grace_seconds"] = s.grace_seconds;
    stop.push_back(std::move(j));
  }
  return {{"lease_seconds", a.lease_seconds},
          {"server_time", a.server_time},
          {"run", run},
          {"stop", stop}};
}

bool same(const Assignment& a, const Assignment& b) {
  return a.key == b.key && a.state == b.state && a.gpus == b.gpus && a.gpu_milli == b.gpu_milli &&
         a.command == b.command && a.env == b.env && a.workdir == b.workdir &&
         a.memory_mib == b.memory_mib && a.cpus == b.cpus && a.container == b.container &&
         a.owner == b.owner && a.budget == b.budget && a.name == b.name && a.kind == b.kind &&
         a.resumable == b.resumable && a.grace_seconds == b.grace_seconds && a.rank == b.rank &&
         a.nodes == b.nodes && a.rendezvous == b.rendezvous;
}

void check_bounds(const Assignments& a) {
  FUZZ_CHECK(a.lease_seconds >= 1 && a.lease_seconds <= 86400, "lease %d", a.lease_seconds);
  FUZZ_CHECK(a.server_time >= 0, "server_time %lld", static_cast<long long>(a.server_time));
  for (const Assignment& e : a.run) {
    FUZZ_CHECK(e.key.job >= 1 && e.key.run >= 1, "run key %llu/%d",
               static_cast<unsigned long long>(e.key.job), e.key.run);
    FUZZ_CHECK(e.state == "starting" || e.state == "running", "state '%s'", e.state.c_str());
    FUZZ_CHECK(!e.gpus.empty() && e.gpus.size() <= 64, "%zu GPUs", e.gpus.size());
    for (int g : e.gpus) FUZZ_CHECK(g >= 0 && g <= 63, "GPU index %d", g);
    FUZZ_CHECK(e.gpu_milli >= 1 && e.gpu_milli <= 1000, "gpu_milli %d", e.gpu_milli);
    FUZZ_CHECK(e.grace_seconds >= 0 && e.grace_seconds <= 86400, "grace %d", e.grace_seconds);
    FUZZ_CHECK(e.cpus >= 0 && e.cpus <= 4096, "cpus %f", e.cpus);
    FUZZ_CHECK(e.memory_mib >= 0, "memory_mib %lld", static_cast<long long>(e.memory_mib));
  }
  for (const auto& s : a.stop) {
    FUZZ_CHECK(s.key.job >= 1 && s.key.run >= 1, "stop key");
    FUZZ_CHECK(s.grace_seconds >= 0 && s.grace_seconds <= 86400, "stop grace %d", s.grace_seconds);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const json body = json::parse(data, data + size, nullptr, false);
  if (body.is_discarded()) return 0;  // the agent's client refuses it before the reader
  auto r = allot::agent::parse_assignments(body);
  if (!r.ok()) {
    allot::fuzz::check_error_json(r.error());
    return 0;
  }
  check_bounds(r.value());
  // GPU indices are taken as sent, never narrowed into another GPU's index.
  for (std::size_t i = 0; i < r.value().run.size(); ++i) {
    const json& sent = body["run"][i]["gpus"];
    for (std::size_t g = 0; g < sent.size(); ++g) {
      FUZZ_CHECK(sent[g].is_number_integer() && sent[g] == json(r.value().run[i].gpus[g]),
                 "GPU %s read as %d", sent[g].dump().c_str(), r.value().run[i].gpus[g]);
    }
  }
  const json written = to_json(r.value());
  auto again = allot::agent::parse_assignments(json::parse(written.dump()));
  FUZZ_CHECK(again.ok(), "written back, refused: %s",
             again.ok() ? "" : again.error().message().c_str());
  const Assignments& a = r.value();
  const Assignments& b = again.value();
  FUZZ_CHECK(a.lease_seconds == b.lease_seconds && a.server_time == b.server_time &&
                 a.run.size() == b.run.size() && a.stop.size() == b.stop.size(),
             "written back, reads otherwise: %s", written.dump().c_str());
  for (std::size_t i = 0; i < a.run.size(); ++i) {
    FUZZ_CHECK(same(a.run[i], b.run[i]), "run[%zu] reads otherwise", i);
  }
  for (std::size_t i = 0; i < a.stop.size(); ++i) {
    FUZZ_CHECK(a.stop[i].key == b.stop[i].key && a.stop[i].grace_seconds == b.stop[i].grace_seconds,
               "stop[%zu] reads otherwise", i);
  }
  return 0;
}
