#include "server/event_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/event_loop.h"
#include "server/http_frame.h"

namespace allot::server {
namespace evloop {

void wake_loop(Loop& l) {
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(l.wake, &one, sizeof(one));
}

}  // namespace evloop

using evloop::Answer;
using evloop::Clock;
using evloop::Conn;
using evloop::Loop;
using evloop::StreamDue;

namespace {

constexpr std::uint64_t kListenId = 0;  // epoll data of the listening socket
constexpr std::uint64_t kWakeId = 1;    // and of a loop's eventfd
// How long, and how much, a closing connection is read after its last answer.
constexpr auto kLinger = std::chrono::seconds(2);
constexpr std::size_t kLingerBytes = 64 << 20;

struct Task {  // a request for the processor
  Loop* loop;
  std::uint64_t conn;
  std::string request;
  std::string ip;
  int port;
  bool close;
};

}  // namespace

struct EventServer::Impl {
  RequestProcessor& processor;
  EventServerOptions opts;
  Refusal refusal;
  Admission admission;
  std::map<std::pair<std::string, std::string>, Handler> handlers;  // (method, path)
  std::map<std::pair<std::string, std::string>, StreamHandler> stream_handlers;
  std::vector<std::pair<Match, HeldHandler>> held_handlers;

  int listen_fd = -1;
  // Held open to be given up when the process runs out of descriptors: a connection that cannot
  // be accepted stays ready on the listening socket and would wake the loops for ever, so one is
  // accepted with it and closed at once (the client sees its connection closed, not a hang).
  int spare_fd = -1;
  std::vector<std::unique_ptr<Loop>> loops;
  std::atomic<bool> draining{false};  // stop(): no new request is taken
  std::atomic<bool> stopping{false};  // and then the loops end
  std::atomic<std::size_t> next_loop{0};
  std::atomic<bool> started{false};
  std::atomic<std::uint64_t> next_id{2};
  std::atomic<std::size_t> connections{0};
  std::mutex per_address_mu;
  std::unordered_map<std::string, std::size_t> per_address;  // open connections by peer address
  std::atomic<long> in_flight{0};  // requests given to a handler or a worker, not yet answered

  std::mutex spare_mu;
  std::mutex work_mu;
  std::condition_variable work_cv;
  std::deque<Task> work;
  bool work_stop = false;
  std::vector<std::thread> workers;

  http::Limits limits() const { return {opts.max_head, opts.max_headers, opts.max_body}; }

  Impl(RequestProcessor& p, EventServerOptions o, Refusal r)
      : processor(p), opts(o), refusal(std::move(r)) {}

  static void wake(Loop& l) { wake_loop(l); }

  // The answer to a request whose handler threw: 500, and the connection closes (what the
  // handler had done is unknown).
  std::string failure() const {
    httplib::Response res;
    try {
      refusal(res, 500, "", "internal error");
    } catch (...) {
      res.status = 500;
      res.body.clear();
    }
    return http::serialize(res, true);
  }

  // From any thread: the answer to `conn`'s request, to be sent by its loop.
  void post(Loop& l, std::uint64_t conn, std::string bytes, bool close) {
    bool first = false;
    {
      std::lock_guard lk(l.mu);
      first = l.answers.empty() && l.arrivals.empty();  // else the loop has been woken already
      l.answers.push_back({conn, std::move(bytes), close});
    }
    if (first) wake(l);
    in_flight.fetch_sub(1);
  }

  // Whether to read more from `c`. Not while its unsent answers exceed max_unsent (a client that
  // pipelines without reading is held to that much output), nor while a request is answered and
  // a whole one more is held already; both resume as answers go out.
  bool wants_input(const Conn& c) const {
    if (c.peer_closed) return false;
    if (c.stream) return true;                      // read and dropped: only its end matters
    if (c.lingering || c.close_after) return true;  // read and dropped: see flush()
    if (unsent(c) > opts.max_unsent) return false;
    return !(c.busy && c.in.size() > opts.max_head + opts.max_body);
  }
  // Waits for what `c` needs next: input it wants, and room to send what is unsent.
  void rearm(Loop& l, Conn& c) {
    set_events(l, c, (wants_input(c) ? EPOLLIN : 0u) | (unsent(c) > 0 ? EPOLLOUT : 0u));
  }
  // A client that half closed is done once nothing of its is being answered or unsent; true if
  // `c` was closed.
  bool close_if_done(Loop& l, Conn& c) {
    if (!c.peer_closed || c.busy || unsent(c) > 0) return false;
    close_conn(l, c);
    return true;
  }

  void set_events(Loop& l, Conn& c, std::uint32_t events) {
    if (c.events == events) return;
    c.events = events;
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = c.id;
    epoll_ctl(l.ep, EPOLL_CTL_MOD, c.fd, &ev);
  }

  // Counts a new connection from `ip`; false (nothing counted) when that address has its most.
  bool take_address(const std::string& ip) {
    if (opts.max_connections_per_address == 0) return true;
    std::lock_guard lk(per_address_mu);
    auto& n = per_address[ip];
    if (n >= opts.max_connections_per_address) return false;
    ++n;
    return true;
  }
  void give_back_address(const std::string& ip) {
    if (opts.max_connections_per_address == 0) return;
    std::lock_guard lk(per_address_mu);
    auto it = per_address.find(ip);
    if (it != per_address.end() && --it->second == 0) per_address.erase(it);
  }
  // Answers a connection refused at accept (429, the API's error form) as far as its socket
  // buffer takes it at once, and closes it: a new socket's buffer takes a small answer whole,
  // and nothing on the loop waits for this client.
  void refuse_connection(int fd, const std::string& ip) {
    httplib::Response res;
    try {
      refusal(res, 429, "connection",
              "too many connections from " + ip + " (at most " +
                  std::to_string(opts.max_connections_per_address) + " at once)");
    } catch (...) {
      res.status = 429;
      res.body.clear();
    }
    const std::string bytes = http::serialize(res, true);
    [[maybe_unused]] auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(fd, SHUT_WR);
    ::close(fd);
  }

  void close_conn(Loop& l, Conn& c) {
    end_stream(c);
    if (c.on_gone) std::exchange(c.on_gone, nullptr)();  // a held request's client left
    ::close(c.fd);                                       // also leaves the epoll set
    connections.fetch_sub(1);
    give_back_address(c.ip);
    l.conns.erase(c.id);  // c is gone
  }

  // Accepts every waiting connection and deals them to the loops in turn (one loop may take a
  // whole burst from the listening socket).
  void accept_all() {
    for (;;) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
        std::lock_guard lk(spare_mu);
        if (spare_fd < 0) return;  // another loop is using it
        ::close(spare_fd);
        const int dropped = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (dropped >= 0) ::close(dropped);
        spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        continue;
      }
      if (fd < 0) return;  // EAGAIN: another loop took it, or none is left
      if (connections.load() >= opts.max_connections) {
        ::close(fd);
        continue;
      }
      char host[NI_MAXHOST];
      std::string ip;
      if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), nullptr, 0,
                      NI_NUMERICHOST) == 0) {
        ip = host;
      }
      if (!take_address(ip)) {
        refuse_connection(fd, ip);
        continue;
      }
      connections.fetch_add(1);
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->id = next_id.fetch_add(1);
      c->since = Clock::now();
      c->ip = std::move(ip);
      if (addr.ss_family == AF_INET) {
        c->port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
      } else if (addr.ss_family == AF_INET6) {
        c->port = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
      }
      Loop& to = *loops[next_loop.fetch_add(1) % loops.size()];
      bool first = false;
      {
        std::lock_guard lk(to.mu);
        first = to.answers.empty() && to.arrivals.empty();
        to.arrivals.push_back(std::move(c));
      }
      if (first) wake(to);
    }
  }

  void adopt(Loop& l, std::unique_ptr<Conn> c) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = c->id;
    if (epoll_ctl(l.ep, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
      ::close(c->fd);
      connections.fetch_sub(1);
      give_back_address(c->ip);
      return;
    }
    l.conns.emplace(c->id, std::move(c));
  }

  // A stream's connection: what was pushed to it, sent as far as the socket takes it, pulling
  // again each time the output drains (pull() does not take what was pushed while the output
  // was full, and nothing else would ask again: EPOLLOUT is armed only while output is unsent).
  // A pull on drained output takes everything and puts the stream back where the next push
  // wakes the loop, so a few rounds are enough however fast pushes come. False if closed.
  bool pump(Loop& l, Conn& c) {
    pull(c);
    for (int round = 0; round < 4; ++round) {
      if (!flush(l, c)) return false;
      if (unsent(c) > 0 || !pull(c)) return true;  // EPOLLOUT, or the next push, brings it back
    }
    return flush(l, c);
  }

  // Sends what is queued; false if the connection is closed or closing (nothing more is served
  // on it).
  bool flush(Loop& l, Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n =
          ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        rearm(l, c);
        return true;
      }
      if (n <= 0) {
        close_conn(l, c);
        return false;
      }
      c.out_off += static_cast<std::size_t>(n);
    }
    c.out.clear();
    c.out_off = 0;
    c.drained = Clock::now();
    if (c.close_after && c.peer_closed) {  // nothing more will come either way
      close_conn(l, c);
      return false;
    }
    if (c.close_after) {
      // Closing now, with a body still coming (a refused upload), would reset the connection
      // and the client could lose the answer: send FIN, read on until the client closes too.
      ::shutdown(c.fd, SHUT_WR);
      c.lingering = true;
      c.since = Clock::now();
      rearm(l, c);
      return false;
    }
    rearm(l, c);
    return true;
  }

  // Answers with `res` what is being read, and closes: the rest of the input is not read.
  void answer_and_close(Loop& l, Conn& c, const httplib::Response& res) {
    c.in.clear();
    c.close_after = true;
    c.out += http::serialize(res, true);
    flush(l, c);
  }

  // Frames and dispatches the next request of `c`, if it is all there and none is being answered.
  // False if the connection was closed.
  bool serve(Loop& l, Conn& c) {
    if (c.busy || c.close_after || c.in.empty() || draining.load()) return true;
    if (unsent(c) > opts.max_unsent) return true;  // the client is not reading its answers
    http::Frame f = http::frame(c.in, limits());
    if (f.kind == http::Frame::kRefused) {
      httplib::Response res;
      refusal(res, f.status, f.field, f.reason);
      answer_and_close(l, c, res);
      return false;
    }
    if (f.kind == http::Frame::kIncomplete) {
      if (f.head > 0 && !c.admitted && admission) {
        httplib::Response res;
        if (!admission(f.headers, res)) {
          answer_and_close(l, c, res);
          return false;
        }
        c.admitted = true;
      }
      if (f.expect_continue && !c.continued) {  // the client waits for this before its body
        c.continued = true;
        c.out += "HTTP/1.1 100 Continue\r\n\r\n";
        return flush(l, c);
      }
      return true;
    }
    c.busy = true;
    c.continued = false;
    c.admitted = false;
    in_flight.fetch_add(1);
    const std::string_view path = f.target.substr(0, f.target.find('?'));
    auto h = path.size() == f.target.size()
                 ? handlers.find({std::string(f.method), std::string(path)})
                 : handlers.end();
    if (h != handlers.end()) {
      httplib::Request req = request_of(f, c, path);
      req.body = f.chunked ? std::move(f.body) : c.in.substr(f.head, f.total - f.head);
      c.in.erase(0, f.total);
      const std::uint64_t id = c.id;
      // Answered once: by the handler, or here if it throws before it answers.
      auto answered = std::make_shared<std::atomic<bool>>(false);
      guarded(l, id, answered, [&] { h->second(req, reply_once(l, id, f, answered)); });
      return true;
    }
    if (h == handlers.end() && path.size() == f.target.size()) {
      auto sh = stream_handlers.find({std::string(f.method), std::string(path)});
      if (sh != stream_handlers.end()) return serve_stream(l, c, f, sh->second);
    }
    for (const auto& [match, handler] : held_handlers) {
      if (match(f.method, f.target)) return serve_held(l, c, f, path, handler);
    }
    Task t{&l, c.id, http::for_processor(c.in, f), c.ip, c.port, f.close};
    c.in.erase(0, f.total);
    {
      std::lock_guard lk(work_mu);
      work.push_back(std::move(t));
    }
    work_cv.notify_one();
    return true;
  }

  // The request a handler sees for frame f on connection c (f's headers are moved into it; the
  // body is the caller's to set).
  static httplib::Request request_of(http::Frame& f, const Conn& c, std::string_view path) {
    httplib::Request req;
    req.method = f.method;
    req.target = f.target;
    req.path = path;
    req.version = "HTTP/1.1";
    req.headers = std::move(f.headers);
    req.remote_addr = c.ip;
    req.remote_port = c.port;
    return req;
  }

  // Runs a handler of connection `id`'s request; if it throws before it answered (`answered`),
  // the request gets the server's failure answer here.
  template <class Call>
  void guarded(Loop& l, std::uint64_t id, const std::shared_ptr<std::atomic<bool>>& answered,
               Call&& call) {
    try {
      call();
    } catch (...) {
      if (!answered->exchange(true)) post(l, id, failure(), true);
    }
  }

  // The handler's answer to frame f on connection `id` of loop l, sent once: `answered` says
  // whether an answer went (or a stream opened) already.
  Reply reply_once(Loop& l, std::uint64_t id, const http::Frame& f,
                   std::shared_ptr<std::atomic<bool>> answered) {
    Loop* lp = &l;
    const bool close = f.close, say_keep_alive = f.say_keep_alive;
    return [this, lp, id, close, say_keep_alive,
            answered = std::move(answered)](const httplib::Response& res) {
      if (answered->exchange(true)) return;
      post(*lp, id, http::serialize(res, close, say_keep_alive), close);
    };
  }

  // Gives a framed request (no body) to a held handler, which answers it now or later; until
  // then the connection is busy, and its end (the client gone) is the handler's to hear.
  bool serve_held(Loop& l, Conn& c, http::Frame& f, std::string_view path,
                  const HeldHandler& handler) {
    httplib::Request req = request_of(f, c, path);
    if (auto q = f.target.find('?'); q != std::string_view::npos) {
      httplib::detail::parse_query_text(std::string(f.target.substr(q + 1)), req.params);
    }
    c.in.erase(0, f.total);
    const std::uint64_t id = c.id;
    auto answered = std::make_shared<std::atomic<bool>>(false);
    Conn* cp = &c;
    OnGone on_gone = [cp](std::function<void()> fn) { cp->on_gone = std::move(fn); };
    guarded(l, id, answered,
            [&] { handler(req, reply_once(l, id, f, answered), std::move(on_gone)); });
    return true;
  }

  // Gives a framed request to a stream handler, which refuses it (an answer like any other) or
  // opens a stream on the connection: its head is queued here, and from then on the connection
  // is the stream's (busy until it closes; what the client sends is dropped).
  bool serve_stream(Loop& l, Conn& c, http::Frame& f, const StreamHandler& handler) {
    const httplib::Request req = request_of(f, c, f.target);
    c.in.erase(0, f.total);
    Loop* lp = &l;
    const std::uint64_t id = c.id;
    auto answered = std::make_shared<std::atomic<bool>>(false);
    Reply reply = reply_once(l, id, f, answered);
    Conn* cp = &c;
    StreamOpen open = [this, lp, cp, answered](const httplib::Response& head,
                                               StreamOptions options) -> std::shared_ptr<Stream> {
      if (answered->exchange(true)) return nullptr;
      auto stream = open_stream(*lp, *cp, head, std::move(options));
      in_flight.fetch_sub(1);  // answered: stop() does not wait for a stream to end
      return stream;
    };
    // (serve() made the connection busy and counted the request in flight.)
    guarded(l, id, answered, [&] { handler(req, std::move(reply), std::move(open)); });
    if (!answered->load()) post(l, id, failure(), true);  // neither answered nor opened
    return true;
  }

  void on_readable(Loop& l, Conn& c) {
    static thread_local char buf[64 << 10];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0 || (n == 0 && c.lingering)) {
        close_conn(l, c);  // an answer in flight is dropped when it comes
        return;
      }
      if (n == 0) {  // half closed (or closed): what came in full is still answered
        c.peer_closed = true;
        break;
      }
      c.in.append(buf, static_cast<std::size_t>(n));
      if (static_cast<std::size_t>(n) < sizeof(buf)) break;
      // A client sending faster than it is answered is read a bounded amount at a time.
      if (c.in.size() > opts.max_head + opts.max_body) break;
    }
    if (c.stream) {
      c.in.clear();
      if (c.peer_closed) {
        close_conn(l, c);  // the client left
      } else {
        rearm(l, c);
      }
      return;
    }
    if (c.peer_closed && c.on_gone) {
      close_conn(l, c);  // the client of a held request left: nothing will be sent
      return;
    }
    if (c.close_after) {
      c.discarded += c.in.size();
      c.in.clear();
      if (c.discarded > kLingerBytes) {
        close_conn(l, c);
      } else {
        rearm(l, c);  // the client half closed: only the refusal is left to send
      }
      return;
    }
    if (!serve(l, c) || close_if_done(l, c)) return;
    rearm(l, c);
  }

  // Takes the connections dealt to this loop and sends the answers posted for its connections.
  void deliver(Loop& l) {
    std::uint64_t count = 0;
    [[maybe_unused]] auto n = ::read(l.wake, &count, sizeof(count));
    std::vector<Answer> answers;
    std::vector<std::unique_ptr<Conn>> arrivals;
    std::vector<std::uint64_t> streams;
    {
      std::lock_guard lk(l.mu);
      answers.swap(l.answers);
      arrivals.swap(l.arrivals);
      streams.swap(l.streams);
    }
    for (auto id : streams) {
      auto it = l.conns.find(id);
      if (it == l.conns.end() || !it->second->stream) continue;
      Conn& c = *it->second;
      if (pump(l, c)) rearm(l, c);
    }
    for (auto& c : arrivals) adopt(l, std::move(c));
    for (auto& a : answers) {
      auto it = l.conns.find(a.conn);
      if (it == l.conns.end()) continue;  // the client left
      Conn& c = *it->second;
      c.busy = false;
      c.on_gone = nullptr;
      c.since = Clock::now();
      if (a.close) c.close_after = true;
      if (c.out.empty()) {
        c.out = std::move(a.bytes);
      } else {
        c.out += a.bytes;
      }
      if (flush(l, c) && serve(l, c) && !close_if_done(l, c)) rearm(l, c);
    }
  }

  // Closes connections idle past the keep-alive time and requests not read within the timeout.
  void sweep(Loop& l) {
    const auto now = Clock::now();
    std::vector<Conn*> expired;
    std::vector<Conn*> quiet;
    for (auto& [id, c] : l.conns) {
      if (c->stream) {
        const StreamDue due = stream_due(*c, now);
        if (due == StreamDue::kStalled) expired.push_back(c.get());  // its client stopped reading
        if (due == StreamDue::kHeartbeat) quiet.push_back(c.get());
        continue;
      }
      if (c->busy) continue;  // its answer is being made
      const auto limit = c->lingering    ? kLinger
                         : c->in.empty() ? std::chrono::seconds(opts.keep_alive_seconds)
                                         : std::chrono::seconds(opts.read_timeout_seconds);
      if (now - c->since > limit) expired.push_back(c.get());
    }
    for (Conn* c : expired) close_conn(l, *c);
    for (Conn* c : quiet) {
      heartbeat(*c, now);
      if (pump(l, *c)) rearm(l, *c);
    }
  }

  void run(Loop& l) {
    pthread_setname_np(pthread_self(), "allot-http");
    epoll_event events[256];
    auto last_sweep = Clock::now();
    while (!stopping.load()) {
      const int n = epoll_wait(l.ep, events, 256, 1000);
      for (int i = 0; i < n; ++i) {
        const auto id = events[i].data.u64;
        if (id == kListenId) {
          accept_all();
          continue;
        }
        if (id == kWakeId) {
          deliver(l);
          continue;
        }
        auto it = l.conns.find(id);
        if (it == l.conns.end()) continue;
        Conn& c = *it->second;
        const auto ev = events[i].events;
        if ((ev & (EPOLLERR | EPOLLHUP)) && !(ev & EPOLLIN)) {
          close_conn(l, c);
          continue;
        }
        if (ev & EPOLLOUT) {
          // Room to send: for a stream, what was pushed meanwhile may follow.
          if (c.stream && !pump(l, c)) continue;
          // Sent what was waiting: the next pipelined request may start.
          if (!flush(l, c) || !serve(l, c) || close_if_done(l, c)) continue;
          rearm(l, c);
        }
        if ((ev & EPOLLIN) && wants_input(c)) {
          // Reading before a request is answered: the partial request's time counts from here.
          if (c.in.empty() && !c.busy) c.since = Clock::now();
          on_readable(l, c);
        }
      }
      const auto now = Clock::now();
      if (now - last_sweep >= std::chrono::seconds(1)) {
        last_sweep = now;
        sweep(l);
      }
    }
  }

  void work_loop() {
    pthread_setname_np(pthread_self(), "allot-api");
    for (;;) {
      Task t;
      {
        std::unique_lock lk(work_mu);
        work_cv.wait(lk, [&] { return work_stop || !work.empty(); });
        if (work.empty()) return;
        t = std::move(work.front());
        work.pop_front();
      }
      bool close = t.close;
      std::string bytes;
      try {
        bytes = processor.process(t.request, t.ip, t.port, close);
      } catch (...) {  // cpp-httplib calls the error handler outside its own try block
        bytes = failure();
        close = true;
      }
      if (bytes.empty()) close = true;
      post(*t.loop, t.conn, std::move(bytes), close);
    }
  }
};

EventServer::EventServer(RequestProcessor& processor, EventServerOptions options, Refusal refusal)
    : impl_(std::make_unique<Impl>(processor, options, std::move(refusal))) {}

EventServer::~EventServer() {
  stop();
}

void EventServer::admit(Admission admission) {
  impl_->admission = std::move(admission);
}

void EventServer::handle(const std::string& method, const std::string& path, Handler handler) {
  impl_->handlers[{method, path}] = std::move(handler);
}

void EventServer::handle_held(Match match, HeldHandler handler) {
  impl_->held_handlers.emplace_back(std::move(match), std::move(handler));
}

void EventServer::handle_stream(const std::string& method, const std::string& path,
                                StreamHandler handler) {
  impl_->stream_handlers[{method, path}] = std::move(handler);
}

core::Result<int> EventServer::bind(const std::string& host, int port) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
    return core::Error{"port", "cannot resolve " + host};
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    // Clients reconnect in bursts (node agents, load generators): a short backlog drops SYNs,
    // and each dropped client waits a second for TCP to retry.
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return core::Error{"port", "cannot listen on " + where};
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int bound = addr.ss_family == AF_INET6
                        ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                        : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  impl_->listen_fd = fd;
  return bound;
}

std::size_t connection_cap(std::size_t wanted) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return wanted;
  // Raise the soft limit as far as the hard one allows: each connection is a descriptor.
  if (lim.rlim_cur != RLIM_INFINITY &&
      (lim.rlim_max == RLIM_INFINITY || lim.rlim_max > lim.rlim_cur)) {
    rlimit raised = lim;
    raised.rlim_cur =
        lim.rlim_max == RLIM_INFINITY ? std::max<rlim_t>(lim.rlim_cur, 1 << 20) : lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  if (lim.rlim_cur == RLIM_INFINITY) return wanted;
  // The rest of the process (the store, log files, TLS, the agents' tooling in `allot up`) keeps
  // a quarter of the limit, and at least 64 descriptors.
  const auto limit = static_cast<std::size_t>(lim.rlim_cur);
  const std::size_t reserve = std::max<std::size_t>(64, limit / 4);
  return std::min(wanted, limit > reserve ? limit - reserve : 1);
}

std::size_t EventServer::max_connections() const {
  return impl_->opts.max_connections;
}

void EventServer::start() {
  auto& m = *impl_;
  if (m.listen_fd < 0 || m.started.exchange(true)) return;
  m.opts.max_connections = connection_cap(m.opts.max_connections);
  if (m.spare_fd < 0) m.spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (int i = 0; i < std::max(1, m.opts.loops); ++i) {
    auto l = std::make_unique<Loop>();
    l->ep = epoll_create1(EPOLL_CLOEXEC);
    l->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLEXCLUSIVE;  // one loop wakes per new connection
    ev.data.u64 = kListenId;
    epoll_ctl(l->ep, EPOLL_CTL_ADD, m.listen_fd, &ev);
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeId;
    epoll_ctl(l->ep, EPOLL_CTL_ADD, l->wake, &ev);
    m.loops.push_back(std::move(l));
  }
  for (auto& l : m.loops) l->thread = std::thread([&m, lp = l.get()] { m.run(*lp); });
  for (int i = 0; i < std::max(1, m.opts.workers); ++i) {
    m.workers.emplace_back([&m] { m.work_loop(); });
  }
}

void EventServer::stop() {
  auto& m = *impl_;
  if (!m.started.exchange(false)) {
    if (m.listen_fd >= 0) ::close(m.listen_fd);
    m.listen_fd = -1;
    return;
  }
  for (auto& l : m.loops) epoll_ctl(l->ep, EPOLL_CTL_DEL, m.listen_fd, nullptr);
  // Every request taken is answered (a submission's commit is waited for, not abandoned); no
  // new one is taken meanwhile.
  m.draining = true;
  while (m.in_flight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  m.stopping = true;
  for (auto& l : m.loops) Impl::wake(*l);
  for (auto& l : m.loops) l->thread.join();
  for (auto& l : m.loops) {
    m.deliver(*l);  // answers posted after the loop's last look
    for (auto& [id, c] : l->conns) {
      if (c->stream) finish_stream(*c);  // ended cleanly
      ::close(c->fd);
    }
    l->conns.clear();
    ::close(l->ep);
    ::close(l->wake);
  }
  m.loops.clear();
  {
    std::lock_guard lk(m.work_mu);
    m.work_stop = true;
  }
  m.work_cv.notify_all();
  for (auto& t : m.workers) t.join();
  m.workers.clear();
  ::close(m.listen_fd);
  m.listen_fd = -1;
  if (m.spare_fd >= 0) ::close(m.spare_fd);
  m.spare_fd = -1;
  m.connections = 0;
  m.draining = false;
  m.stopping = false;
}

}  // namespace allot::server
