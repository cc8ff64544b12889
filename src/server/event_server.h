#pragma once
// Plain HTTP/1.1 served by a few epoll loops instead of a thread per connection. A loop reads
// each connection's requests in full, then either hands one to a handler that answers later
// without holding a thread (a submission waits for its group commit on the store's thread, not on
// ours) or gives it to a worker thread, where cpp-httplib's own request handling answers it
// (RequestProcessor: every other route, unchanged). One request per connection is answered at a
// time, so pipelined requests are answered in order.
#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "server/http_server.h"

namespace allot::server {

struct EventServerOptions {
  int loops = 2;                    // epoll threads
  int workers = 64;                 // threads for the processor's requests (they may block)
  std::size_t max_body = 1 << 20;   // larger: 413
  std::size_t max_head = 64 << 10;  // request line and headers; larger: 431
  std::size_t max_headers = 100;    // more: 431
  // While more than this is waiting to be sent on a connection (its client does not read), the
  // connection's next request is not started and nothing more is read from it.
  std::size_t max_unsent = 1 << 20;
  // An idle connection closes after this: longer than an agent waits between its calls
  // (heartbeats every 5 s, telemetry every 10 s), so that a request is never sent on a
  // connection the server is closing (an idle connection costs only its descriptor here).
  int keep_alive_seconds = 15;
  int read_timeout_seconds = 30;  // a request still incomplete after this closes its connection
  // At most; start() lowers it to what the process's descriptor limit (RLIMIT_NOFILE, raised to
  // its hard limit) leaves after a quarter kept for the rest of the process.
  std::size_t max_connections = 16384;
  // Open connections from one address (0: no limit). One client must not take every connection
  // the process can hold; beyond it a new connection gets a 429 JSON answer and is closed.
  std::size_t max_connections_per_address = 256;
};

// A long-lived answer (server-sent events): after its head, whatever push() is given, sent as
// HTTP chunks, until the client leaves or the server stops. Thread-safe; see EventServer's
// handle_stream().
class Stream {
 public:
  struct State;
  explicit Stream(std::shared_ptr<State> state) : state_(std::move(state)) {}
  // Queues `bytes` for the client; false once the stream has ended. At most max_pending bytes
  // wait for a client that does not read: beyond that, what is pushed is dropped and the
  // stream's `overflow` is sent once the client has caught up (a slow reader costs bounded
  // memory and learns that it missed something).
  bool push(const std::string& bytes);
  bool ended() const;

 private:
  std::shared_ptr<State> state_;
};

struct StreamOptions {
  std::size_t max_pending = 64 << 10;     // bytes waiting, on top of what the socket holds
  std::string overflow;                   // sent once after bytes were dropped
  std::chrono::seconds heartbeat{15};     // sent after this long with nothing else sent
  std::string heartbeat_bytes = ":\n\n";  // (an SSE comment)
  std::chrono::seconds stalled{60};       // unsent bytes for this long: the stream ends
  std::function<void()> on_end;           // once, when it ends (client gone, stall, stop())
};

// What start() makes of `wanted` connections under this process's descriptor limit (raising the
// soft limit to the hard one first).
std::size_t connection_cap(std::size_t wanted);

// Serves plain HTTP on a few epoll loops, handing requests to a RequestProcessor's workers or to
// a handler on the loop. Set up (handle, admit, bind) from one thread before start(); stop() and
// max_connections() from any thread; replies from any thread.
class EventServer {
 public:
  // How a handler answers, once, from any thread.
  using Reply = std::function<void(httplib::Response)>;
  // Runs on a loop thread with the whole request; must not block (it answers through the reply).
  using Handler = std::function<void(const httplib::Request&, Reply)>;
  // Fills a response that refuses a request the loop could not read (the API's error form).
  using Refusal = std::function<void(httplib::Response&, int status, const std::string& field,
                                     const std::string& reason)>;

  // Whether a request whose body is still to come may send it (false: `res` is the answer, and
  // the connection closes). Bodies are what a client can make the server hold (up to max_body
  // each): a client that could not use any route is refused before its body is read.
  using Admission = std::function<bool(const httplib::Headers&, httplib::Response& res)>;

  EventServer(RequestProcessor& processor, EventServerOptions options, Refusal refusal);
  ~EventServer();
  EventServer(const EventServer&) = delete;
  EventServer& operator=(const EventServer&) = delete;

  // Before start(): requests with exactly this method and path (no query) go to `handler`.
  void handle(const std::string& method, const std::string& path, Handler handler);
  // Opens a stream answering the request given to a stream handler: `head`'s status and headers
  // (no body; sent chunked, the connection closing when the stream ends). Only from within the
  // handler, on its thread; at most once, and not after the handler's reply.
  using StreamOpen =
      std::function<std::shared_ptr<Stream>(const httplib::Response& head, StreamOptions options)>;
  // Runs on a loop thread and must not block: refuses through the reply, or opens a stream.
  using StreamHandler = std::function<void(const httplib::Request&, Reply, StreamOpen)>;
  // Before start(): requests with exactly this method and path (no query) go to `handler`.
  void handle_stream(const std::string& method, const std::string& path, StreamHandler handler);
  // A request held until something happens (a long poll): which requests go to a held handler
  // (any query allowed), the method and the whole target given.
  using Match = std::function<bool(std::string_view method, std::string_view target)>;
  // Registers what to run, on the loop's thread, if the client leaves (its connection ends or is
  // half closed) before the held request is answered: it must answer the request through its
  // reply (the answer goes nowhere), so that the request stops counting as in flight. Only from
  // within the handler, on its thread; at most once.
  using OnGone = std::function<void(std::function<void()>)>;
  // Runs on a loop thread and must not block: answers through the reply now or later.
  using HeldHandler = std::function<void(const httplib::Request&, Reply, OnGone)>;
  // Before start(): requests `match` takes (and that no exact handler takes) go to `handler`,
  // their query parsed into the request's params. stop() waits for them to be answered.
  void handle_held(Match match, HeldHandler handler);
  // Before start(): asked once per request, when its head has come and not all of its body.
  void admit(Admission admission);
  // Binds and listens (port 0: any free port); returns the bound port.
  core::Result<int> bind(const std::string& host, int port);
  void start();
  // The connection cap in force (after start(): sized from the descriptor limit).
  std::size_t max_connections() const;
  // Stops accepting, waits for the answers in flight (and sends them), then closes every
  // connection. Safe to call twice.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace allot::server
