#pragma once
// cpp-httplib's request handling (parsing, routing, limits, error handler) without its sockets:
// the event loop (event_server.h) reads a whole request, and this answers it.
#include <httplib.h>

#include <string>
#include <string_view>

namespace allot::server {

// Answers whole requests read by someone else with cpp-httplib's routing. Routes are registered
// before serving; process() is then safe from many threads at once.
class RequestProcessor final : public httplib::Server {
 public:
  // Answers one whole request (head and body, as read from the client) with the response's bytes.
  // `close` in: the connection closes after this response (sent as "Connection: close"); out: it
  // must close (the client asked, or the request could not be read).
  std::string process(std::string_view request, const std::string& remote_ip, int remote_port,
                      bool& close);
};

// cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when Debian built
// it): connections that arrive while the accept thread is not running are dropped beyond that, and
// each client's TCP retries only after a second. Sets the backlog of a bound server's listening
// socket (HTTPS, which cpp-httplib serves); false if it is not bound or listen() refuses.
bool set_listen_backlog(httplib::Server& svr, int backlog);

// An Accept-Encoding value without Brotli ("gzip, deflate, br" -> "gzip, deflate"). Debian's
// cpp-httplib compresses with Brotli at its default (slowest) quality whenever a client offers
// it, which every browser does: a 577 KB answer then took 5 s instead of 18 ms. Gzip is offered
// by the same clients and costs milliseconds, so the server answers with it instead.
std::string without_brotli(const std::string& accept_encoding);

}  // namespace allot::server
