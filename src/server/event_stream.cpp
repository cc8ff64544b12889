// Server-sent-event streams on EventServer's loops: a stream's head, what is pushed to it (held
// to max_pending for a client that does not read), its heartbeats, stall and end.
#include <sys/socket.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "server/event_loop.h"
#include "server/event_server.h"
#include "server/http_frame.h"

namespace allot::server {
namespace evloop {
namespace {

// One HTTP chunk.
std::string chunk(const std::string& bytes) {
  char size[20];
  std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
  return size + bytes + "\r\n";
}

}  // namespace

std::shared_ptr<Stream> open_stream(Loop& l, Conn& c, const httplib::Response& head,
                                    StreamOptions options) {
  auto st = std::make_shared<Stream::State>();
  st->loop = &l;
  st->conn = c.id;
  st->opts = std::move(options);
  std::string out =
      "HTTP/1.1 " + std::to_string(head.status) + " " + http::reason_phrase(head.status) + "\r\n";
  for (const auto& [k, v] : head.headers) {
    if (k == "Content-Length" || k == "Connection" || k == "Transfer-Encoding") continue;
    out += k + ": " + v + "\r\n";
  }
  out += "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  c.out += out;
  c.stream = st;
  c.close_after = false;
  c.since = c.drained = Clock::now();
  return std::make_shared<Stream>(st);
}

void end_stream(Conn& c) {
  if (!c.stream) return;
  std::function<void()> on_end;
  {
    std::lock_guard lk(c.stream->mu);
    if (c.stream->ended) return;
    c.stream->ended = true;
    c.stream->pending.clear();
    on_end = std::move(c.stream->opts.on_end);
  }
  if (on_end) on_end();
}

bool pull(Conn& c) {
  auto& st = *c.stream;
  if (unsent(c) > st.opts.max_pending) return false;  // asked again once the output drains
  std::string taken;
  bool dropped = false;
  {
    std::lock_guard lk(st.mu);
    taken.swap(st.pending);
    dropped = std::exchange(st.dropped, false);
    st.queued = false;
  }
  if (!taken.empty()) c.out += chunk(taken);
  if (dropped && !st.opts.overflow.empty()) c.out += chunk(st.opts.overflow);
  if (taken.empty() && !(dropped && !st.opts.overflow.empty())) return false;
  c.since = Clock::now();
  return true;
}

StreamDue stream_due(const Conn& c, Clock::time_point now) {
  const auto& o = c.stream->opts;
  if (unsent(c) > 0 && now - c.drained > o.stalled) return StreamDue::kStalled;
  if (unsent(c) == 0 && now - c.since >= o.heartbeat) return StreamDue::kHeartbeat;
  return StreamDue::kNothing;
}

void heartbeat(Conn& c, Clock::time_point now) {
  c.out += chunk(c.stream->opts.heartbeat_bytes);
  c.since = now;
}

void finish_stream(Conn& c) {
  end_stream(c);
  const std::string last = "0\r\n\r\n";
  if (unsent(c) == 0) {
    [[maybe_unused]] auto n = ::send(c.fd, last.data(), last.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
}

}  // namespace evloop

bool Stream::push(const std::string& bytes) {
  auto& st = *state_;
  std::lock_guard lk(st.mu);
  if (st.ended) return false;
  if (st.pending.size() + bytes.size() > st.opts.max_pending) {
    st.dropped = true;
    return true;
  }
  st.pending += bytes;
  if (st.queued) return true;
  st.queued = true;
  // Under the stream's lock: the loop outlives every stream that has not ended (stop() ends them
  // all, taking this lock, before the loops go).
  bool first = false;
  {
    std::lock_guard ll(st.loop->mu);
    first = st.loop->answers.empty() && st.loop->arrivals.empty() && st.loop->streams.empty();
    st.loop->streams.push_back(st.conn);
  }
  if (first) evloop::wake_loop(*st.loop);
  return true;
}

bool Stream::ended() const {
  std::lock_guard lk(state_->mu);
  return state_->ended;
}

}  // namespace allot::server
