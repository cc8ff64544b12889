// GET /api/v1/events/stream (server/change_feed.h, api_events.cpp) on a real server, read through
// a raw socket as a browser's fetch() reads it: the head, then a "changed" message soon after a
// submission or a budget edit, heartbeats, the per-token limit (429 JSON), a slow reader held to
// bounded output, the stream ended when the server stops, the open streams as a gauge on
// GET /metrics, and the 501 JSON answer over HTTPS.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "harness.h"
#include "server/change_feed.h"
#include "server/prometheus.h"

namespace allot::server {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using testing::Harness;
using testing::job;
using testing::TempDir;

// A client socket on the server's port (with a receive buffer of its own size when asked: the
// slow-reader tests use 128 KiB; one far below loopback's 64 KiB segment size left the
// connection waiting on TCP's zero-window probes, seconds apart once backed off, after the
// client read again: 2 of 8 runs under ASan stalled that way, 0 of 20 with 128 KiB).
class Socket {
 public:
  explicit Socket(int port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~Socket() { close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  bool ok() const { return ok_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void send(const std::string& s) const {
    ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }
  void open_stream(const std::string& token) const {
    send("GET /api/v1/events/stream HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer " + token +
         "\r\nAccept: text/event-stream\r\n\r\n");
  }
  // Reads until `what` has come (true) or `ms` passed or the server closed (false).
  bool read_until(const std::string& what, int ms) {
    const auto end = Clock::now() + std::chrono::milliseconds(ms);
    while (got.find(what, seen_) == std::string::npos) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
      if (left <= 0 || !read_some(static_cast<int>(left))) return false;
    }
    seen_ = got.find(what, seen_) + what.size();
    return true;
  }
  // One read of what is there within `ms`; false at the end of the stream or on a timeout.
  bool read_some(int ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return false;
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      closed = true;
      return false;
    }
    got.append(buf, static_cast<std::size_t>(n));
    return true;
  }
  std::string got;
  bool closed = false;

 private:
  int fd_ = -1;
  bool ok_ = false;
  std::size_t seen_ = 0;
};

class EventStream : public ::testing::Test {
 protected:
  void start(ChangeFeedLimits limits = {}, ApiOptions api = {}) {
    feed = std::make_shared<ChangeFeed>(limits);
    ControllerOptions co;
    co.observers.push_back(feed);
    if (api.prometheus) co.observers.push_back(api.prometheus);
    api.changes = feed;
    h = std::make_unique<Harness>(dir.file("allot.db"), api, 1'000'000, co);
    h->add_sim_nodes(1);
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 1}}).status, 200);
  }
  TempDir dir;
  std::shared_ptr<ChangeFeed> feed;
  std::unique_ptr<Harness> h;
};

TEST_F(EventStream, ASubmissionIsAnnouncedWithinASecond) {
  start();
  Socket s(h->port());
  ASSERT_TRUE(s.ok());
  s.open_stream(h->admin());
  ASSERT_TRUE(s.read_until("\r\n\r\n", 2000)) << s.got;
  EXPECT_EQ(s.got.rfind("HTTP/1.1 200", 0), 0u) << s.got;
  EXPECT_NE(s.got.find("Content-Type: text/event-stream"), std::string::npos) << s.got;
  EXPECT_NE(s.got.find("Transfer-Encoding: chunked"), std::string::npos) << s.got;
  // The first message says everything changed: the page reads afresh.
  ASSERT_TRUE(s.read_until("\"topics\":[\"jobs\",\"nodes\",\"budgets\"]}\n\n", 2000)) << s.got;
  EXPECT_EQ(feed->open_streams(), 1u);

  const auto began = Clock::now();
  ASSERT_EQ(h->post("/api/v1/jobs", job("k1")).status, 201);
  ASSERT_TRUE(s.read_until("event: changed\n", 1000)) << s.got;
  ASSERT_TRUE(s.read_until("\"topics\":[\"jobs\"", 1000)) << s.got;
  EXPECT_LT(Clock::now() - began, std::chrono::seconds(1));

  // A budget edit names budgets.
  ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 2}}).status, 200);
  ASSERT_TRUE(s.read_until("\"budgets\"]}", 1000)) << s.got;
}

TEST_F(EventStream, HeartbeatsKeepAQuietStreamAlive) {
  ChangeFeedLimits l;
  l.heartbeat_seconds = 1;
  start(l);
  Socket s(h->port());
  s.open_stream(h->admin());
  ASSERT_TRUE(s.read_until("\"budgets\"]}\n\n", 2000)) << s.got;
  // A comment line (":"), as its own chunk: "3\r\n:\n\n\r\n".
  ASSERT_TRUE(s.read_until("3\r\n:\n\n\r\n", 3500)) << s.got;
  ASSERT_TRUE(s.read_until("3\r\n:\n\n\r\n", 3500)) << s.got;
}

TEST_F(EventStream, StreamsPerTokenAreLimitedAndGivenBack) {
  ChangeFeedLimits l;
  l.per_token = 2;
  start(l);
  const auto ann = h->token("ann", "user");
  Socket a(h->port()), b(h->port());
  a.open_stream(ann);
  b.open_stream(ann);
  ASSERT_TRUE(a.read_until("\n\n", 2000));
  ASSERT_TRUE(b.read_until("\n\n", 2000));
  // The third from the same token: 429 in the API's error form.
  httplib::Client cli("127.0.0.1", h->port());
  auto r = cli.Get("/api/v1/events/stream", {{"Authorization", "Bearer " + ann}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  auto e = json::parse(r->body, nullptr, false);
  EXPECT_EQ(e["error"]["field"], "stream") << r->body;
  EXPECT_NE(e["error"]["reason"].get<std::string>().find("2 event streams"), std::string::npos);
  // Another token is not held back by ann's.
  Socket admin(h->port());
  admin.open_stream(h->admin());
  ASSERT_TRUE(admin.read_until("HTTP/1.1 200", 2000)) << admin.got;
  // A query is not the stream: refused as an unknown field.
  auto query = cli.Get("/api/v1/events/stream?x=1", {{"Authorization", "Bearer " + h->admin()}});
  ASSERT_TRUE(query);
  EXPECT_EQ(query->status, 400);
  // One of ann's closes: its place is given back once the server sees it go.
  a.close();
  bool reopened = false;
  for (int i = 0; i < 20 && !reopened; ++i) {
    Socket c(h->port());
    c.open_stream(ann);
    c.read_until("\r\n", 1000);
    reopened = c.got.rfind("HTTP/1.1 200", 0) == 0;
    if (!reopened) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(reopened);
  // Without a token: 401, and no stream.
  auto anon = cli.Get("/api/v1/events/stream");
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 401);
}

TEST_F(EventStream, ASlowReaderCostsBoundedOutputAndLearnsItMissedSome) {
  ChangeFeedLimits l;
  l.max_pending = 4096;
  start(l);
  Socket s(h->port(), 128 << 10);
  s.open_stream(h->admin());
  ASSERT_TRUE(s.read_until("\"budgets\"]}\n\n", 2000));
  // 400,000 messages (about 25 MB) while the client reads nothing.
  std::size_t published = 0;
  for (int i = 0; i < 400000; ++i) {
    feed->publish(ChangeFeed::kJobs);
    published += ChangeFeed::message(ChangeFeed::kJobs, 100000).size();
  }
  // Then it reads everything there is: what the socket buffers held, the bounded backlog, and
  // the overflow message (seq 0, every topic) telling it to read everything again.
  const auto before = s.got.size();
  while (s.read_some(1500)) {
  }
  const auto received = s.got.size() - before;
  EXPECT_LT(received, published / 2) << "the server queued what the client did not read";
  EXPECT_NE(s.got.find("id: 0\ndata: {\"seq\":0,\"topics\":[\"jobs\",\"nodes\",\"budgets\"]}"),
            std::string::npos);
  // And the stream goes on afterwards.
  feed->publish(ChangeFeed::kNodes);
  ASSERT_TRUE(s.read_until("\"topics\":[\"nodes\"]}", 2000));
}

// A reader that reads while pushes keep coming, its output full one moment and drained the
// next: once it has read everything, a new message reaches it at once. (The server once left
// what was pushed while the output was full unsent when the output then drained in the same
// step, until the next heartbeat, 15 s later.)
TEST_F(EventStream, AReaderThatKeepsUpWithBurstsIsNeverLeftWaiting) {
  ChangeFeedLimits l;
  l.max_pending = 1024;
  start(l);
  Socket s(h->port(), 128 << 10);
  s.open_stream(h->admin());
  ASSERT_TRUE(s.read_until("\"budgets\"]}\n\n", 2000));
  std::atomic<bool> done{false};
  std::thread publisher([&] {
    for (int burst = 0; burst < 400; ++burst) {
      for (int i = 0; i < 200; ++i) feed->publish(ChangeFeed::kJobs);
      std::this_thread::sleep_for(std::chrono::microseconds(burst % 7 * 100));
    }
    done = true;
  });
  for (int i = 0; !done; ++i) {
    s.read_some(5);
    if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(i % 11 * 100));
  }
  publisher.join();
  while (s.read_some(300)) {
  }
  ASSERT_FALSE(s.closed);
  const auto asked = Clock::now();
  feed->publish(ChangeFeed::kNodes);
  ASSERT_TRUE(s.read_until("\"topics\":[\"nodes\"]}", 3000))
      << "nothing within 3 s; the stream waited for its heartbeat";
  EXPECT_LT(Clock::now() - asked, std::chrono::seconds(3));
}

TEST_F(EventStream, StopEndsEveryStream) {
  start();
  Socket s(h->port());
  s.open_stream(h->admin());
  ASSERT_TRUE(s.read_until("\"budgets\"]}\n\n", 2000));
  const auto began = Clock::now();
  h->close();
  while (!s.closed && s.read_some(2000)) {
  }
  EXPECT_TRUE(s.closed);
  EXPECT_LT(Clock::now() - began, std::chrono::seconds(5));
  EXPECT_NE(s.got.find("0\r\n\r\n"), std::string::npos) << "the last chunk";
  EXPECT_EQ(feed->open_streams(), 0u);
  EXPECT_EQ(feed->reserve(1, "x"), "");  // every place was given back
}

// The open streams as a gauge on GET /metrics: up with each stream, down once its client leaves.
TEST_F(EventStream, TheOpenStreamsAreAGaugeOnMetrics) {
  ApiOptions api;
  api.prometheus = std::make_shared<ServerMetrics>();
  start({}, api);
  httplib::Client cli("127.0.0.1", h->port());
  const auto gauge = [&]() -> std::string {
    auto r = cli.Get("/metrics", {{"Authorization", "Bearer " + h->admin()}});
    if (!r || r->status != 200) return "no scrape";
    const auto at = r->body.find("\nallot_event_streams ");
    if (at == std::string::npos) return "no series";
    return r->body.substr(at + 1, r->body.find('\n', at + 1) - at - 1);
  };
  EXPECT_EQ(gauge(), "allot_event_streams 0");
  auto a = std::make_unique<Socket>(h->port());
  Socket b(h->port());
  a->open_stream(h->admin());
  b.open_stream(h->admin());
  ASSERT_TRUE(a->read_until("\"budgets\"]}\n\n", 2000)) << a->got;
  ASSERT_TRUE(b.read_until("\"budgets\"]}\n\n", 2000)) << b.got;
  EXPECT_EQ(gauge(), "allot_event_streams 2");
  a.reset();  // its client leaves: the server sees it go within a loop turn
  std::string now;
  for (int i = 0; i < 40 && (now = gauge()) != "allot_event_streams 1"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(now, "allot_event_streams 1");
}

// Over HTTPS (cpp-httplib's thread per connection) the stream route is not served: 501 in the
// API's error form, after the token is checked.
TEST_F(EventStream, OverHttpsTheStreamAnswers501WithAJsonError) {
  const auto cert = dir.file("cert.pem"), key = dir.file("key.pem");
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " +
                          cert + " -days 1 -subj /CN=127.0.0.1 >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  feed = std::make_shared<ChangeFeed>();
  ControllerOptions co;
  co.observers.push_back(feed);
  ApiOptions api;
  api.changes = feed;
  api.tls_cert = cert;
  api.tls_key = key;
  h = std::make_unique<Harness>(dir.file("allot.db"), api, 1'000'000, co);
  httplib::SSLClient tls("127.0.0.1", h->port());
  tls.enable_server_certificate_verification(false);  // self-signed, CN=127.0.0.1
  auto r = tls.Get("/api/v1/events/stream",
                   {{"Authorization", "Bearer " + h->admin()}, {"Accept", "text/event-stream"}});
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 501);
  EXPECT_NE(r->get_header_value("Content-Type").find("application/json"), std::string::npos);
  auto e = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(e.is_object()) << r->body;
  EXPECT_NE(e["error"]["reason"].get<std::string>().find("plain HTTP only"), std::string::npos)
      << r->body;
  EXPECT_EQ(feed->open_streams(), 0u);
  // Without a token it is refused as any route is: 401, not 501.
  auto anon = tls.Get("/api/v1/events/stream");
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 401);
}

}  // namespace
}  // namespace allot::server
