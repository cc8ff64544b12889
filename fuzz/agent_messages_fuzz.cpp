// Every message an agent sends the server (docs/agent-protocol.md: registration, heartbeat,
// reports, telemetry, logs), read by a real in-process server (SQLite in a temporary directory,
// the API on a loopback port) with the node's own agent token. The first byte picks the message;
// the rest is its body (for logs, a first line is the query). Contract, from docs/api.md:
// - the server answers every message and stays up; no answer is a 5xx;
// - every answer is JSON, and every refusal has the documented error shape naming a status,
//   field and reason;
// - a registration that is accepted is of the node the body names, with the GPU count it sent.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "../tests/server/harness.h"
#include "check.h"

namespace {

using allot::server::testing::Harness;
using allot::server::testing::json;
using allot::server::testing::TempDir;

struct World {
  TempDir dir;
  std::unique_ptr<Harness> h;
  std::string agent;  // node n01's agent token
  std::unique_ptr<httplib::Client> client;
  World() {
    allot::server::ApiOptions api;
    api.threads = 4;
    h = std::make_unique<Harness>(dir.file("allot.db"), api);
    h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"members", {"ann"}}});
    agent = h->token("agent-n01", "agent", "n01");
    h->post("/api/v1/nodes", {{"name", "n01"}, {"model", "H100"}, {"gpus", 8}}, agent);
    client = std::make_unique<httplib::Client>("127.0.0.1", h->port());
    client->set_keep_alive(true);
    client->set_tcp_nodelay(true);  // else each POST waits ~40 ms for a delayed ACK
    // httplib's 5 s default took a fuzzer run at nice 19 beside a build (its server threads
    // starved of CPU) for a server that was down; a minute without an answer is a wedge.
    client->set_read_timeout(60, 0);
    client->set_write_timeout(60, 0);
    start_job();
  }
  // A job running on n01, so that reports and logs reach a live run, not only the refusals.
  void start_job() {
    static int n = 0;
    h->post("/api/v1/jobs", allot::server::testing::job("k" + std::to_string(++n), "/lab/a", 1));
    h->sync();
  }
};

World& world() {
  static World* w = new World;  // never destroyed: the server outlives every input
  return *w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  World& w = world();
  static unsigned long inputs = 0;
  if (++inputs % 1000 == 0) w.start_job();

  std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string path;
  switch (data[0] % 5) {
    case 0:
      path = "/api/v1/nodes";
      break;
    case 1:
      path = "/api/v1/nodes/n01/heartbeat";
      break;
    case 2:
      path = "/api/v1/agent/nodes/n01/reports";
      break;
    case 3:
      path = "/api/v1/agent/nodes/n01/telemetry";
      break;
    default: {
      const auto eol = body.find('\n');
      path = "/api/v1/agent/nodes/n01/logs?" + body.substr(0, eol);
      body = eol == std::string::npos ? "" : body.substr(eol + 1);
      break;
    }
  }
  httplib::Headers headers{{"Authorization", "Bearer " + w.agent}};
  auto r = w.client->Post(path, headers, body, "application/json");
  FUZZ_CHECK(r, "no answer to %s (%s): the server is down", path.c_str(),
             httplib::to_string(r.error()).c_str());
  FUZZ_CHECK(r->status < 500, "%s answered %d: %s", path.c_str(), r->status, r->body.c_str());
  const json reply = json::parse(r->body, nullptr, false);
  FUZZ_CHECK(!reply.is_discarded() && reply.is_object(), "%s answered %d, not JSON: %s",
             path.c_str(), r->status, r->body.c_str());
  if (r->status >= 400) {
    const json& e = reply["error"];
    FUZZ_CHECK(e.is_object() && e["status"] == r->status && e["field"].is_string() &&
                   e["reason"].is_string() && !e["reason"].get<std::string>().empty(),
               "%s: refusal %d without the error shape: %s", path.c_str(), r->status,
               r->body.c_str());
  }
  if (data[0] % 5 == 0 && (r->status == 200 || r->status == 201)) {
    const json sent = json::parse(body, nullptr, false);
    FUZZ_CHECK(sent.is_object() && reply.value("name", "") == sent.value("name", "?") &&
                   reply["gpus"] == sent["gpus"],
               "registered %s as %s", body.c_str(), r->body.c_str());
  }
  return 0;
}
