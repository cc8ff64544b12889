#pragma once
// What EventServer's epoll loops (event_server.cpp) and its server-sent-event streams
// (event_stream.cpp) share: a loop's connections and mailbox, and the stream's side of a
// connection. Internal to those two files.
#include <httplib.h>
#include <sys/epoll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/event_server.h"

namespace allot::server {
namespace evloop {

using Clock = std::chrono::steady_clock;

struct Conn {
  int fd = -1;
  std::uint64_t id = 0;
  std::string in;   // received and not yet answered
  std::string out;  // to send, from out_off
  std::size_t out_off = 0;
  bool busy = false;         // a request is being answered
  bool close_after = false;  // closes once `out` is sent
  bool continued = false;    // "100 Continue" sent for the request being read
  bool admitted = false;     // the admission let the request being read send its body
  bool lingering = false;    // answered and half closed: reading what the client still sends
  bool peer_closed = false;  // the client sent all it will (EOF): answer what came, then close
  std::size_t discarded = 0;
  std::uint32_t events = EPOLLIN;
  Clock::time_point since;  // the last request answered, or the connection's start
  std::string ip;
  int port = 0;
  std::shared_ptr<Stream::State> stream;  // set once the connection serves a stream
  std::function<void()> on_gone;          // a held request's: the client left before its answer
  Clock::time_point drained;              // a stream's output was last all sent
};

struct Answer {
  std::uint64_t conn;
  std::string bytes;
  bool close;
};

struct Loop {
  int ep = -1;
  int wake = -1;
  std::thread thread;
  std::unordered_map<std::uint64_t, std::unique_ptr<Conn>> conns;
  std::mutex mu;
  std::vector<Answer> answers;  // from handlers and workers, for this loop's connections
  std::vector<std::unique_ptr<Conn>> arrivals;  // accepted by another loop, served by this one
  std::vector<std::uint64_t> streams;           // streams with something pushed
};

void wake_loop(Loop& l);

inline std::size_t unsent(const Conn& c) {
  return c.out.size() - c.out_off;
}

// The stream's side of a connection (event_stream.cpp), all on the connection's loop thread.

// Queues the stream's head (`head`'s status and headers, sent chunked, closing at the end) on
// `c`, which serves the stream from now on.
std::shared_ptr<Stream> open_stream(Loop& l, Conn& c, const httplib::Response& head,
                                    StreamOptions options);
// A stream's end: nothing more is queued for it, and its owner hears once.
void end_stream(Conn& c);
// Moves what was pushed to a stream into its connection's output, unless the client has not
// read what is there already (then it waits, and pushes beyond max_pending are dropped); true if
// it added output. While it waits, the stream is not on its loop's list (pushes do not wake the
// loop): whoever sends the connection's output must pull again once that output drains, or the
// stream stalls until its next heartbeat (EventServer's pump()).
bool pull(Conn& c);
// What a stream's connection needs at `now`: to be closed (its client stopped reading for
// longer than `stalled`), a heartbeat (nothing sent for `heartbeat`), or nothing.
enum class StreamDue { kNothing, kStalled, kHeartbeat };
StreamDue stream_due(const Conn& c, Clock::time_point now);
// Queues a heartbeat on a stream's connection.
void heartbeat(Conn& c, Clock::time_point now);
// The stream's last chunk, sent as far as the socket takes it now (the server is stopping).
void finish_stream(Conn& c);

}  // namespace evloop

struct Stream::State {
  std::mutex mu;
  std::string pending;  // pushed, not yet taken by the loop (at most opts.max_pending)
  bool dropped = false;
  bool ended = false;
  bool queued = false;  // on the loop's list of streams with something pending
  evloop::Loop* loop = nullptr;
  std::uint64_t conn = 0;
  StreamOptions opts;
};

}  // namespace allot::server
