// The REST/JSON API under /api/v1 (see docs/api.md and docs/openapi.yaml). Reads are served from
// the store and the scheduling loop's latest snapshot, never waiting for a cycle; writes are
// validated in full before anything changes, then persisted (durably) before they are
// acknowledged. cpp-httplib stays inside the server folder.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/advice.h"
#include "server/assignment_watch.h"
#include "server/controller.h"
#include "server/quota.h"
#include "server/request_limits.h"
#include "store/store.h"

namespace allot::server {

class ServerMetrics;  // server/prometheus.h
class ChangeFeed;     // server/change_feed.h

struct ApiOptions {
  std::string host = "127.0.0.1";
  int port = 0;          // 0: any free port
  std::string tls_cert;  // PEM files; both set: HTTPS
  std::string tls_key;
  // Plain HTTP is served by epoll loops (event_server.h): submissions are answered on them, and
  // every other request by one of `threads` workers. HTTPS: a worker per connection, each closed
  // after keep_alive_requests requests so that more connections than workers are served in turn.
  int threads = 64;
  int keep_alive_requests = 100;
  std::size_t max_body = 1 << 20;
  // Job logs from the agents (server/logs.h); `allot server` uses "<database>.logs". Empty: the
  // log routes answer 503.
  std::string logs_dir;
  // Seconds after a run's end when its logs count as complete even without the agent's final
  // post.
  int logs_settle_seconds = 30;
  // How long after a run ends the nodes that held it may still upload its logs and report on it
  // (docs/agent.md, "Writing under a lease"); after that, 403 like any run it never held.
  int agent_write_grace_seconds = 300;
  // Per principal: submissions a second and jobs waiting (429 beyond; administrators are not
  // limited).
  SubmitLimits submit_limits;
  // Per principal on every authenticated route, and per address for requests without a valid
  // token (429 beyond; administrators are not limited).
  RequestLimits request_limits;
  // Open connections from one address (plain HTTP: event_server.h; HTTPS: tls_connections.h);
  // 0: no limit.
  std::size_t max_connections_per_address = 256;
  // Right-sizing advice from telemetry (server/advice.h): GET /advice, the job's telemetry and
  // the hint at submission.
  AdviceRules advice;
  // GET /metrics (server/prometheus.h), also told each request's route, status and latency.
  // Null: /metrics answers 503.
  std::shared_ptr<ServerMetrics> prometheus;
  // The leader lease's epoch this server holds (store/postgres_lease.h); GET /health then says
  // "role": "leader" and the epoch. 0: no lease (one server alone).
  std::int64_t leader_epoch = 0;
  // What changed, for GET /api/v1/events/stream (server/change_feed.h; the controller must have
  // it among its observers). Null: that route answers 503 and the dashboard polls.
  std::shared_ptr<ChangeFeed> changes;
  // Agents watching their assignments (server/assignment_watch.h): held requests in all, and the
  // longest wait one may ask. Plain HTTP only; over HTTPS a watch is answered at once.
  WatchLimits watch;
};

struct Route {
  std::string method;  // GET, POST, DELETE
  std::string path;    // OpenAPI form, e.g. /api/v1/jobs/{id}
};

// Serves the REST API for one store and controller. start() and stop() from one thread (the
// owner's); requests are answered on the server's own threads.
class ApiServer {
 public:
  ApiServer(store::Store& store, Controller& controller, ApiOptions options);
  ~ApiServer();
  // Binds and starts serving on a background thread; returns the bound port.
  core::Result<int> start();
  void stop();
  // Every route the server answers (for the OpenAPI check): exactly what start() registers, read
  // from the same install() code, so a route cannot be served without being listed.
  static std::vector<Route> routes();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Creates a token and stores its hash; returns the secret (shown once).
core::Result<std::string> create_token(store::Store& store, const std::string& name,
                                       const std::string& role, const std::string& subject,
                                       const std::string& scope, core::Time now);

}  // namespace allot::server
