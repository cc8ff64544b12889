// The agent's client given several servers (docs/store.md, "High availability"): it goes past an
// unreachable one, and follows a standby's 503 to the leader it names, on real HTTP on loopback.
#include "agent/server_client.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "agent/readiness.h"

namespace allot::agent {
namespace {

TEST(ServerList, SplitsTrimsAndGivesEachAScheme) {
  EXPECT_EQ(split_servers("a:1, http://b:2/ ,,https://c:3"),
            (std::vector<std::string>{"http://a:1", "http://b:2", "https://c:3"}));
  EXPECT_EQ(split_servers("http://one:7400"), (std::vector<std::string>{"http://one:7400"}));
  EXPECT_TRUE(split_servers(" , ").empty());
}

// A real server on loopback answering every GET with `status` and `body`.
class Fake {
 public:
  Fake(int status, std::string body) {
    svr_.Get(".*", [this, status, body](const httplib::Request&, httplib::Response& res) {
      ++hits;
      res.status = status;
      res.set_content(body, "application/json");
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::yield();
  }
  ~Fake() {
    svr_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  std::atomic<int> hits{0};

 private:
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
};

// A port nobody listens on: bound (not listening) to learn a free one, then closed.
int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A replica's HTTP readiness check (agent/readiness.h): 2xx is ready; anything else says why.
TEST(ReadyCheck, AnHttpCheckIsReadyOn2xxOnlyAndSaysWhyNot) {
  using std::chrono::milliseconds;
  Fake ok(204, "");
  Fake busy(503, "loading");
  auto r = http_ready_check(ok.port(), "/health", milliseconds(2000));
  EXPECT_TRUE(r.ok) << r.reason;
  EXPECT_EQ(ok.hits, 1);
  r = http_ready_check(busy.port(), "/health", milliseconds(2000));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.reason, "GET 127.0.0.1:" + std::to_string(busy.port()) + "/health: HTTP 503");
  const int dead = unused_port();
  r = http_ready_check(dead, "/health", milliseconds(500));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.reason.find("GET 127.0.0.1:" + std::to_string(dead) + "/health: "), std::string::npos)
      << r.reason;
  // What a report carries of a check's output: printable and bounded.
  EXPECT_EQ(printable("a\nb\x01\xc3\xa9z", 5), "a b??");
  EXPECT_EQ(printable("fine", 256), "fine");
}

TEST(ServerList, GoesPastAnUnreachableServerAndFollowsAStandbyToTheLeader) {
  Fake leader(200, R"({"ok": true})");
  Fake standby(503, R"({"error": {"field": "leader", "reason": "a standby"}, "leader": ")" +
                        leader.url() + R"(", "role": "standby"})");
  const std::string dead = "http://127.0.0.1:" + std::to_string(unused_port());
  ServerClient client({dead + "," + standby.url(), "token", "", false});

  auto first = client.get("/api/v1/x");
  EXPECT_EQ(first.status, 0) << "the first address is down";
  EXPECT_NE(first.error.find(dead), std::string::npos) << first.error;
  // The next one is a standby: it names the leader, and the request goes there at once.
  auto second = client.get("/api/v1/x");
  EXPECT_EQ(second.status, 200) << second.error;
  EXPECT_EQ(standby.hits, 1);
  EXPECT_EQ(leader.hits, 1);
  // From then on, straight to the leader.
  EXPECT_TRUE(client.get("/api/v1/x").ok());
  EXPECT_EQ(standby.hits, 1);
  EXPECT_EQ(leader.hits, 2);
}

TEST(ServerList, AStandbyWithoutALeaderSendsTheNextRequestToTheNextServer) {
  Fake other(200, R"({"ok": true})");
  Fake standby(503, R"({"leader": "", "role": "standby"})");
  ServerClient client({standby.url() + "," + other.url(), "token", "", false});
  auto first = client.get("/api/v1/x");
  EXPECT_EQ(first.status, 503);
  EXPECT_TRUE(client.get("/api/v1/x").ok());
  EXPECT_EQ(other.hits, 1);
}

// Something between the agent and the server (a proxy, a load balancer) may answer an error in
// any shape: the agent reads what it can and goes on (a string "error" once ended the agent).
TEST(ServerList, AnErrorInAnotherShapeIsReadWithoutEndingTheAgent) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"error": "refused by the proxy"})", "HTTP 403: refused by the proxy"},
      {R"({"error": {"field": 3, "reason": ["x"]}})", ": "},
      {R"({"error": {"field": "job", "reason": "ended"}})", "job: ended"},
      {R"({"error": null})", "HTTP 403"},
      {R"(["error"])", "HTTP 403"},
      {"<html>Forbidden</html>", "HTTP 403"}};
  for (const auto& [body, want] : cases) {
    Fake proxy(403, body);
    ServerClient client({proxy.url(), "token", "", false});
    const auto r = client.get("/api/v1/x");
    EXPECT_EQ(r.status, 403) << body;
    EXPECT_EQ(r.error, want) << body;
  }
}

// Over HTTPS a client cannot tell that the server closed its idle connection: a request sent on
// it failed ("Read"). The agent drops an https connection idle past 2 s, so a request after the
// server's keep-alive (3 s here) goes on a fresh one and is answered.
TEST(ServerClientTls, ARequestAfterTheServersKeepAliveIsAnswered) {
  char tmpl[] = "/tmp/allot-tls-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, cert = dir + "/cert.pem", key = dir + "/key.pem";
  ASSERT_EQ(
      std::system(("openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " + cert +
                   " -days 1 -subj /CN=127.0.0.1 -addext "
                   "subjectAltName=IP:127.0.0.1 >/dev/null 2>&1")
                      .c_str()),
      0);
  httplib::SSLServer svr(cert.c_str(), key.c_str());
  ASSERT_TRUE(svr.is_valid());
  std::atomic<int> hits{0};
  svr.Get(".*", [&](const httplib::Request&, httplib::Response& res) {
    ++hits;
    res.set_content(R"({"ok": true})", "application/json");
  });
  svr.set_keep_alive_timeout(3);
  const int port = svr.bind_to_any_port("127.0.0.1");
  std::thread t([&] { svr.listen_after_bind(); });
  while (!svr.is_running()) std::this_thread::yield();
  ServerClient client({"https://127.0.0.1:" + std::to_string(port), "token", cert, false});
  EXPECT_TRUE(client.get("/api/v1/x").ok());
  EXPECT_TRUE(client.get("/api/v1/x").ok()) << "at once: the same connection";
  std::this_thread::sleep_for(std::chrono::milliseconds(4000));  // the server closed it at 3 s
  const auto late = client.get("/api/v1/x");
  EXPECT_TRUE(late.ok()) << late.error;
  EXPECT_EQ(hits, 3);
  svr.stop();
  t.join();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace allot::agent
