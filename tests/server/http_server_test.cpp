// The plain-HTTP connection loop (src/server/http_server.cpp): what cpp-httplib's own loop did,
// over raw sockets so that the bytes on the wire are seen.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

namespace {

struct Served {
  allot::server::HttpServer svr;
  std::thread thread;
  int port = 0;
  explicit Served(std::size_t keep_alive = 100) {
    svr.set_keep_alive_max_count(keep_alive);
    svr.set_payload_max_length(1024);
    svr.Get("/hello", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content("hello " + req.remote_addr, "text/plain");
    });
    svr.Get("/big", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(1 << 20, 'x'), "text/plain");
    });
    svr.Post("/echo", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(req.body, "text/plain");
    });
    port = svr.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { svr.listen_after_bind(); });
    while (!svr.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Served() {
    svr.stop();
    thread.join();
  }
};

int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}
void send_all(int fd, const std::string& s) {
  ASSERT_EQ(send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
}
// Reads until `count` responses (each with its Content-Length body) have come, or EOF.
std::string read_responses(int fd, int count) {
  std::string in;
  int done = 0;
  std::size_t at = 0;
  char buf[65536];
  while (done < count) {
    auto head_end = in.find("\r\n\r\n", at);
    if (head_end != std::string::npos) {
      auto cl = in.find("Content-Length: ", at);
      std::size_t len =
          cl != std::string::npos && cl < head_end ? std::stoul(in.substr(cl + 16)) : 0;
      if (in.size() >= head_end + 4 + len) {
        at = head_end + 4 + len;
        ++done;
        continue;
      }
    }
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    in.append(buf, static_cast<std::size_t>(n));
  }
  return in;
}
int occurrences(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(HttpServer, ServesAndKnowsThePeer) {
  Served s;
  httplib::Client c("127.0.0.1", s.port);
  auto r = c.Get("/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello 127.0.0.1");
  auto big = c.Get("/big");  // larger than what is gathered before a send
  ASSERT_TRUE(big);
  EXPECT_EQ(big->body, std::string(1 << 20, 'x'));
  auto missing = c.Get("/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST(HttpServer, PipelinedRequestsAreAllAnswered) {
  Served s;
  int fd = connect_to(s.port);
  const std::string get = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
  send_all(fd, get + get + get);
  auto out = read_responses(fd, 3);
  EXPECT_EQ(occurrences(out, "HTTP/1.1 200 OK"), 3) << out;
  close(fd);
}

TEST(HttpServer, ClosesAfterTheKeepAliveCount) {
  Served s(3);
  int fd = connect_to(s.port);
  std::string out;
  for (int i = 0; i < 3; ++i) {
    send_all(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    out += read_responses(fd, 1);
  }
  EXPECT_EQ(occurrences(out, "HTTP/1.1 200 OK"), 3);
  EXPECT_EQ(occurrences(out, "Connection: close"), 1) << out;
  char b;
  EXPECT_EQ(recv(fd, &b, 1, 0), 0);  // then the server closed it
  close(fd);
}

TEST(HttpServer, ExpectContinueAndBodyLimit) {
  Served s;
  int fd = connect_to(s.port);
  // The client waits for "100 Continue" before sending the body: it must not stay buffered.
  send_all(fd,
           "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  char buf[256];
  ssize_t n = recv(fd, buf, sizeof(buf), 0);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<std::size_t>(n)).rfind("HTTP/1.1 100 Continue", 0), 0u);
  send_all(fd, "hello");
  auto out = read_responses(fd, 1);
  EXPECT_NE(out.find("HTTP/1.1 200 OK"), std::string::npos) << out;
  EXPECT_NE(out.find("\r\n\r\nhello"), std::string::npos) << out;
  close(fd);
  httplib::Client c("127.0.0.1", s.port);
  auto big = c.Post("/echo", std::string(2048, 'x'), "text/plain");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
}

TEST(HttpServer, StopsWhileAClientKeepsItsConnectionIdle) {
  auto s = std::make_unique<Served>();
  int fd = connect_to(s->port);
  send_all(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  read_responses(fd, 1);
  const auto t0 = std::chrono::steady_clock::now();
  s.reset();  // the worker waits for a next request on fd
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  close(fd);
}

// Connections completed by the kernel within `wait` out of `n` opened at once to `port` on a socket
// nothing accepts from: those its listen backlog has room for.
int handshakes_completed(int port, int n, std::chrono::milliseconds wait) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));  // EINPROGRESS
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(wait);
  int done = 0;
  for (int fd : fds) {
    pollfd p{fd, POLLOUT, 0};
    int err = -1;
    socklen_t len = sizeof(err);
    if (poll(&p, 1, 0) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
      ++done;
    }
    close(fd);
  }
  return done;
}

// cpp-httplib listens with a backlog of 5: a burst of reconnecting clients (agents, or any client
// after keep_alive_requests) beyond it had its SYNs dropped and waited a second for TCP to retry.
TEST(HttpServer, TheListenBacklogTakesABurstOfConnections) {
  for (int backlog : {4, 256}) {
    allot::server::HttpServer svr;
    const int port = svr.bind_to_any_port("127.0.0.1");  // bound and listening; nothing accepts
    ASSERT_GT(port, 0);
    ASSERT_TRUE(allot::server::set_listen_backlog(svr, backlog));
    const int done = handshakes_completed(port, 100, std::chrono::milliseconds(300));
    if (backlog == 4) {
      EXPECT_LT(done, 100) << "a small backlog should drop part of the burst";
    } else {
      EXPECT_EQ(done, 100);
    }
  }
  allot::server::HttpServer unbound;
  EXPECT_FALSE(allot::server::set_listen_backlog(unbound, 64));
}

}  // namespace
