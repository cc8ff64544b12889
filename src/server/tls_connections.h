// Open connections per address on the HTTPS server (docs/security.md, "The API's edge"). Plain
// HTTP counts them where it accepts (event_server.h); cpp-httplib's TLS server accepts and serves
// each connection inside its own private code, with no hook at accept. What it does expose: the
// task queue it hands each accepted connection to (run on one worker from the TLS handshake to
// the close) and the pre-routing handler (run on that same worker for each request, knowing the
// client's address). So a connection is counted against its address at its first request and
// given back when its worker is done with it; one over the limit is answered 429 ("connection")
// with Connection: close, as is every further request on it.
//
// What this does not count: connections still in their TLS handshake or that have sent no
// request yet (each bounded by the read timeout) and those queued for a worker.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

namespace allot::server {

class TlsConnections {
 public:
  explicit TlsConnections(std::size_t max_per_address) : max_(max_per_address) {}

  // Whether the connection the calling worker serves may go on (the first call on a connection
  // counts it against `address`). Called from the pre-routing handler; true on a thread that
  // serves no connection of this object's queue, and always when the limit is 0.
  bool admit(const std::string& address);

  // The task queue for cpp-httplib's server: `threads` workers, each connection's task counted
  // from its first request to its end.
  httplib::TaskQueue* new_queue(std::size_t threads);

  std::size_t open_from(const std::string& address) const;
  std::size_t limit() const { return max_; }

 private:
  class Queue;
  void give_back(const std::string& address);

  const std::size_t max_;
  mutable std::mutex mu_;
  // Guarded by mu_: open connections counted, by address (none listed at 0).
  std::unordered_map<std::string, std::size_t> open_;
};

}  // namespace allot::server
