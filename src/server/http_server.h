#pragma once
// cpp-httplib's plain-HTTP server with a cheaper connection loop: the same parsing, routing,
// limits and timeouts (cpp-httplib's own process_request), over a stream that keeps one read
// buffer per connection and sends each response in one send.
#include <httplib.h>

namespace allot::server {

class HttpServer final : public httplib::Server {
 private:
  // Replaces cpp-httplib's loop, which per request polls before each recv and each send, asks
  // the kernel for both addresses, allocates a 4 KiB read buffer and sends the head and the body
  // apart: here one poll (while waiting for the next request), one recv and one send.
  bool process_and_close_socket(socket_t sock) override;
};

// cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed when Debian built
// it): connections that arrive while the accept thread is not running are dropped beyond that, and
// each client's TCP retries only after a second. Sets the backlog of a bound server's listening
// socket (HTTP or TLS); false if it is not bound or listen() refuses.
bool set_listen_backlog(httplib::Server& svr, int backlog);

}  // namespace allot::server
