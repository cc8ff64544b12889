// The API server: its lifecycle (HTTP on the event loops, HTTPS on cpp-httplib's workers), the
// route table, and token creation. The routes themselves are in api_*.cpp, one file per group,
// registered by install() below.

#include "server/api.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>

#include "server/api_impl.h"
#include "server/http_server.h"

namespace allot::server {

using core::Error;

core::Result<std::string> create_token(store::Store& store, const std::string& name,
                                       const std::string& role, const std::string& subject,
                                       const std::string& scope, core::Time now) {
  std::string secret = new_token_secret();
  store::TokenRecord t;
  t.hash = sha256_hex(secret);
  t.name = name;
  t.role = role;
  t.subject = subject;
  t.scope = scope;
  t.created = now;
  auto st = store.write({op::PutToken{t}});
  if (!st.ok()) return st.error();
  return secret;
}

std::string to_regex(const std::string& path) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '{') {
      auto end = path.find('}', i);
      auto name = path.substr(i + 1, end - i - 1);
      out += name == "id" ? "(\\d{1,19})" : "([A-Za-z0-9._@-]{1,128})";
      i = end;
    } else if (path[i] == '.') {
      out += "\\.";
    } else {
      out += path[i];
    }
  }
  return out;
}

// One line per group of routes; the order is the order of ApiServer::routes().
void ApiServer::Impl::install() {
  install_identity_routes();
  install_job_routes();
  install_job_log_routes();
  install_budget_routes();
  install_node_routes();
  install_usage_routes();
  install_advice_routes();
  install_standing_routes();
  install_service_routes();
  install_agent_routes();
  install_agent_log_routes();
  install_token_routes();
  install_event_routes();
  install_dashboard_routes();
}

ApiServer::ApiServer(store::Store& store, Controller& controller, ApiOptions options)
    : impl_(std::make_unique<Impl>(&store, &controller, std::move(options))) {
  // The scrape counts the streams open on the change feed (it outlives this server).
  if (impl_->opts.prometheus && impl_->opts.changes) {
    impl_->opts.prometheus->count_open(
        "allot_event_streams", "Server-sent event streams open (GET /api/v1/events/stream).",
        [changes = impl_->opts.changes] { return changes->open_streams(); });
  }
}

ApiServer::~ApiServer() {
  stop();
}

std::vector<Route> ApiServer::routes() {
  // What install() registers is the list: an Impl without a server only records them.
  Impl listing(nullptr, nullptr, {});
  listing.install();
  return listing.routes;
}

core::Result<int> ApiServer::start() {
  auto& o = impl_->opts;
  const bool tls = !o.tls_cert.empty() || !o.tls_key.empty();
  if (tls) {
    if (o.tls_cert.empty() || o.tls_key.empty()) {
      return Error{"tls", "give both a certificate and a key"};
    }
    auto s = std::make_unique<httplib::SSLServer>(o.tls_cert.c_str(), o.tls_key.c_str());
    if (!s->is_valid()) return Error{"tls", "cannot load the certificate or key"};
    impl_->svr = std::move(s);
  } else {
    impl_->svr = std::make_unique<RequestProcessor>();
  }
  auto& svr = *impl_->svr;
  svr.set_payload_max_length(o.max_body);
  impl_->install();
  // Before any route: what the edge refuses (edge.h) never reaches a handler or an error message.
  if (tls) impl_->tls_connections = std::make_unique<TlsConnections>(o.max_connections_per_address);
  svr.set_pre_routing_handler(
      [tc = impl_->tls_connections.get()](const httplib::Request& req, httplib::Response& res) {
        // HTTPS: the connection counts against its address (tls_connections.h); plain HTTP counted
        // it at accept.
        if (tc && !tc->admit(req.remote_addr)) {
          // cpp-httplib answers "Connection: close" when the request asked for it.
          // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast)
          auto& headers = const_cast<httplib::Request&>(req).headers;
          headers.erase("Connection");
          headers.emplace("Connection", "close");
          Impl::send_error(res, 429, "connection",
                           "too many connections from " + req.remote_addr + " (at most " +
                               std::to_string(tc->limit()) + " at once)");
          return httplib::Server::HandlerResponse::Handled;
        }
        auto why = check_request(req);
        if (!why) {
          // Answers are compressed with gzip, never Brotli (http_server.h: without_brotli). The
          // request is cpp-httplib's own non-const object, handed to this handler as const.
          if (req.has_header("Accept-Encoding")) {
            // NOLINTNEXTLINE(cppcoreguidelines-pro-type-const-cast)
            auto& headers = const_cast<httplib::Request&>(req).headers;
            auto [lo, hi] = headers.equal_range("Accept-Encoding");
            for (auto it = lo; it != hi; ++it) it->second = without_brotli(it->second);
          }
          return httplib::Server::HandlerResponse::Unhandled;
        }
        Impl::send_error(res, 400, why->field, why->reason);
        return httplib::Server::HandlerResponse::Handled;
      });
  // Everything under /api/v1 that matched no route, and any method not served.
  // cpp-httplib calls it outside its own try block (over HTTPS, on a thread of its own): it must
  // not throw.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    try {
      if (res.status == 404 && res.body.empty()) {
        Impl::send_error(res, 404, "path", "no route " + req.method + " " + req.path);
      } else if (res.status == 413) {
        Impl::send_error(res, 413, "body", "too large");
      } else if (res.body.empty()) {
        Impl::send_error(res, res.status, "", "request refused");
      }
    } catch (...) {
      res.body.clear();
    }
  });
  if (!tls) {
    EventServerOptions eo;
    eo.loops = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
    eo.workers = o.threads;
    eo.max_body = o.max_body;
    eo.max_connections_per_address = o.max_connections_per_address;
    impl_->events =
        std::make_unique<EventServer>(static_cast<RequestProcessor&>(svr), eo, &Impl::send_error);
    // Every route needs a token: without a usable one a body is not waited for.
    impl_->events->admit([m = impl_.get()](const httplib::Headers& h, httplib::Response& res) {
      httplib::Request req;
      req.headers = h;
      try {
        m->authenticate(req, Impl::Narrow::Any, false);  // the route says what a metrics or
        // service token may not do, and charges the request
      } catch (const HttpError& e) {
        Impl::send_error(res, e.status, e.field, e.reason);
        return false;
      } catch (...) {  // the store: the route will say so
      }
      return true;
    });
    impl_->events->handle(
        "POST", "/api/v1/jobs",
        [m = impl_.get()](const httplib::Request& req, EventServer::Reply r) {
          if (!m->opts.prometheus) return m->submit(req, std::move(r));
          m->submit(req, [m, r = std::move(r),
                          began = std::chrono::steady_clock::now()](httplib::Response res) {
            m->opts.prometheus->request("POST", "/api/v1/jobs", res.status, seconds_since(began));
            r(std::move(res));
          });
        });
    impl_->serve_event_stream();
    // Agents' watches are held on the loops; the hub hears of each snapshot the controller
    // publishes (the first one now).
    impl_->watch = std::make_shared<AssignmentWatch>(o.watch);
    impl_->watch->published(impl_->ctl->snapshot());
    impl_->ctl->on_publish(
        [w = impl_->watch](std::shared_ptr<const Snapshot> s) { w->published(std::move(s)); });
    impl_->serve_assignment_watch();
    if (o.prometheus) {
      o.prometheus->count_open(
          "allot_agent_assignment_watches",
          "Agents' assignment requests held until their node's assignments change "
          "(GET /api/v1/agent/nodes/NAME/assignments?wait=).",
          [w = std::weak_ptr<AssignmentWatch>(impl_->watch)] {
            auto held = w.lock();
            return held ? held->held() : 0;
          });
    }
    auto port = impl_->events->bind(o.host, o.port);
    if (!port.ok()) return port.error();
    impl_->events->start();
    return port;
  }
  // HTTPS: cpp-httplib's own server, a worker per connection (the rest of these settings are its
  // connection handling's; the event loop has its own).
  const int threads = o.threads;
  // Each connection's worker counts it against its address (tls_connections.h).
  svr.new_task_queue = [threads, tc = impl_->tls_connections.get()] {
    return tc->new_queue(static_cast<std::size_t>(threads));
  };
  // cpp-httplib serves a kept-alive connection on one worker until it closes: a connection is
  // closed after this many requests (the client reconnects and queues again) so that more
  // connections than workers (node agents polling every second) are all served in turn.
  svr.set_keep_alive_max_count(o.keep_alive_requests);
  // An idle connection holds a worker here, so it closes soon. (A client cannot see that a TLS
  // connection was closed: the agent drops its own after 2 s idle, ServerClient.)
  svr.set_keep_alive_timeout(5);
  svr.set_read_timeout(30, 0);
  svr.set_tcp_nodelay(true);
  int port =
      o.port == 0 ? svr.bind_to_any_port(o.host) : (svr.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port <= 0) return Error{"port", "cannot listen on " + o.host + ":" + std::to_string(o.port)};
  // Agents and clients reconnect in bursts (a connection closes after keep_alive_requests): a
  // backlog of 5 dropped some, which then waited a second for TCP to retry.
  if (!set_listen_backlog(svr, SOMAXCONN)) {
    return Error{"port", "cannot set the listen backlog on " + o.host + ":" + std::to_string(port)};
  }
  impl_->thread = std::thread([this] {
    pthread_setname_np(pthread_self(), "allot-accept");
    impl_->svr->listen_after_bind();
  });
  // cpp-httplib's stop() before the listening thread reached accept() is lost and leaves it
  // blocked there: return only once it listens.
  while (!impl_->svr->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return port;
}

void ApiServer::stop() {
  if (impl_->watch && !impl_->watch_closed) {
    // Held watches are answered first: the loops wait for every request in flight.
    impl_->ctl->on_publish(nullptr);
    impl_->watch->close();
    impl_->watch_closed = true;
  }
  if (impl_->events) impl_->events->stop();
  if (impl_->svr) impl_->svr->stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace allot::server
