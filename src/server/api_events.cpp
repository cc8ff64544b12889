// GET /api/v1/events/stream: what changes, as server-sent events (server/change_feed.h), for
// the dashboard's live updates. Served on the plain-HTTP event loops without holding a thread:
// the connection stays open and each change is pushed to it (event_server.h, Stream). Over
// HTTPS (cpp-httplib's own server, a thread per connection) it answers 501 and the dashboard
// polls instead.

#include "server/api_impl.h"

namespace allot::server {

namespace {
constexpr const char* kPath = "/api/v1/events/stream";
}

void ApiServer::Impl::install_event_routes() {
  // What cpp-httplib routes: over plain HTTP only what the event loop does not take (the path
  // with a query), over HTTPS every request for it.
  route("GET", kPath, [this](const httplib::Request& req, httplib::Response&) {
    auto p = authenticate(req);
    not_agent(p);
    check_query(req, {});
    throw HttpError{501, "", "the event stream is served over plain HTTP only; poll instead"};
  });
}

void ApiServer::Impl::serve_event_stream() {
  events->handle_stream(
      "GET", kPath,
      [this](const httplib::Request& req, const EventServer::Reply& reply,
             const EventServer::StreamOpen& open) {
        const auto began = std::chrono::steady_clock::now();
        httplib::Response res;
        Principal p;
        bool admitted = false;
        answering(res, [&] {
          refuse_at_edge(req);
          p = authenticate(req);
          not_agent(p);
          if (!opts.changes)
            throw HttpError{503, "", "this server has no event stream; poll instead"};
          if (auto why = opts.changes->reserve(p.token_id, req.remote_addr); !why.empty()) {
            throw HttpError{429, "stream", why};
          }
          admitted = true;
        });
        if (!admitted) {
          if (opts.prometheus)
            opts.prometheus->request("GET", kPath, res.status, seconds_since(began));
          return reply(std::move(res));
        }
        httplib::Response head;
        head.status = 200;
        head.set_header("Content-Type", "text/event-stream");
        head.set_header("Cache-Control", "no-store");
        head.set_header("X-Accel-Buffering", "no");  // a proxy in front must not hold messages back
        auto stream = open(head, opts.changes->stream_options(p.token_id, req.remote_addr));
        if (!stream) {
          opts.changes->release(p.token_id, req.remote_addr);
          return;
        }
        if (opts.prometheus) opts.prometheus->request("GET", kPath, 200, seconds_since(began));
        opts.changes->add(std::move(stream));
      });
}

}  // namespace allot::server
