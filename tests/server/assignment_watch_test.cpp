// Agents watching their assignments (server/assignment_watch.h, api_agent.cpp) on a real server:
// a stale version is answered at once, a change answers the held request within milliseconds, the
// wait ends "unchanged", one watch per node and a total are enforced (429 naming the limit), a
// client that leaves frees its place, and stopping the server answers what it holds.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "harness.h"
#include "server/prometheus.h"

namespace allot::server {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Harness;
using testing::job;
using testing::json;
using testing::Reply;
using testing::TempDir;

// A raw connection: a request sent, and whatever comes back within a time.
class Raw {
 public:
  explicit Raw(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~Raw() { close(); }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;
  bool ok() const { return ok_; }
  void get(const std::string& target, const std::string& token) const {
    const std::string req =
        "GET " + target + " HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + token + "\r\n\r\n";
    ASSERT_EQ(::send(fd_, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  }
  // What arrives within `ms` (empty: nothing).
  std::string read(int ms) const {
    std::string got;
    const auto end = Clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
      pollfd p{fd_, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
      char buf[8192];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
      if (got.find("\r\n\r\n") != std::string::npos) break;
    }
    return got;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

class Watch : public ::testing::Test {
 protected:
  void start(ApiOptions api = {}) {
    h = std::make_unique<Harness>(dir.file("allot.db"), api);
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"members", {"ann"}}}).status, 200);
  }
  std::string node(const std::string& name) {
    json body = {{"name", name}, {"cluster", "c1"}, {"model", "H100"}, {"gpus", 8}};
    auto tok = h->token("agent-" + name, "agent", name);
    EXPECT_EQ(h->post("/api/v1/nodes", body, tok).status, 201);
    return tok;
  }
  static std::string path(const std::string& name) {
    return "/api/v1/agent/nodes/" + name + "/assignments";
  }
  static std::string watch_path(const std::string& name, const std::string& since, int wait) {
    return path(name) + "?wait=" + std::to_string(wait) + (since.empty() ? "" : "&since=" + since);
  }
  std::string version(const std::string& name, const std::string& tok) {
    auto r = h->get(path(name), tok);
    EXPECT_EQ(r.status, 200);
    return r.body.value("version", "");
  }
  static double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }
  TempDir dir;
  std::unique_ptr<Harness> h;
};

TEST_F(Watch, AStaleVersionIsAnsweredAtOnce) {
  start();
  const auto tok = node("n1");
  const auto v0 = version("n1", tok);
  ASSERT_EQ(v0.size(), 16u);
  ASSERT_EQ(h->post("/api/v1/jobs", job("j1", "/lab/a", 2)).status, 201);
  h->sync();
  const auto t = Clock::now();
  auto r = h->get(watch_path("n1", v0, 20), tok);
  EXPECT_LT(since(t), 2.0);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_TRUE(r.body["changed"].get<bool>());
  EXPECT_TRUE(r.body["watch"].get<bool>());
  EXPECT_NE(r.body["version"], v0);
  ASSERT_EQ(r.body["run"].size(), 1u);
  // No version at all: the first watch is answered at once too.
  auto first = h->get(watch_path("n1", "", 20), tok);
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.body["version"], r.body["version"]);
}

TEST_F(Watch, AChangeAnswersTheHeldRequestAtOnce) {
  start();
  const auto tok = node("n1");
  const auto v0 = version("n1", tok);
  auto held = std::async(std::launch::async, [&] {
    return std::make_pair(h->get(watch_path("n1", v0, 20), tok), Clock::now());
  });
  // Held: nothing comes back while nothing changes.
  EXPECT_EQ(held.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  ASSERT_EQ(h->post("/api/v1/jobs", job("j1", "/lab/a", 2)).status, 201);
  h->sync();  // the cycle that places it publishes the snapshot
  const auto published = Clock::now();
  ASSERT_EQ(held.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto [r, answered] = held.get();
  // Within milliseconds of the publication (generous for a loaded CI machine; a poll would be
  // the wait's 20 s).
  EXPECT_LT(std::chrono::duration<double>(answered - published).count(), 0.5);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_TRUE(r.body["changed"].get<bool>());
  ASSERT_EQ(r.body["run"].size(), 1u);
  EXPECT_NE(r.body["version"], v0);
  // A cycle that changes nothing for the node does not answer a watch on the new version.
  const std::string v1 = r.body["version"];
  auto quiet = std::async(std::launch::async, [&] { return h->get(watch_path("n1", v1, 2), tok); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  h->sync();
  EXPECT_EQ(quiet.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  EXPECT_FALSE(quiet.get().body["changed"].get<bool>());
}

TEST_F(Watch, TheWaitEndsUnchanged) {
  start();
  const auto tok = node("n1");
  const auto v0 = version("n1", tok);
  const auto t = Clock::now();
  auto r = h->get(watch_path("n1", v0, 1), tok);
  const double took = since(t);
  ASSERT_EQ(r.status, 200) << r.body.dump();
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 3.0);
  EXPECT_FALSE(r.body["changed"].get<bool>());
  EXPECT_TRUE(r.body["watch"].get<bool>());
  EXPECT_EQ(r.body["version"], v0);
  EXPECT_TRUE(r.body["run"].empty());
}

TEST_F(Watch, LimitsAndBadQueriesAreRefusedNamingThem) {
  ApiOptions api;
  api.watch.total = 2;
  api.watch.max_wait_seconds = 30;
  start(api);
  const auto t1 = node("n1"), t2 = node("n2"), t3 = node("n3");
  Raw a(h->port()), b(h->port());
  ASSERT_TRUE(a.ok() && b.ok());
  a.get(watch_path("n1", version("n1", t1), 20), t1);
  b.get(watch_path("n2", version("n2", t2), 20), t2);
  EXPECT_EQ(a.read(300), "");  // both held
  EXPECT_EQ(b.read(10), "");
  // A second watch for n1: one per node.
  auto again = h->get(watch_path("n1", version("n1", t1), 20), t1);
  EXPECT_EQ(again.status, 429);
  EXPECT_NE(again.body["error"]["reason"].get<std::string>().find("at most 1 per node"),
            std::string::npos)
      << again.body.dump();
  // A third node: the server's total.
  auto full = h->get(watch_path("n3", version("n3", t3), 20), t3);
  EXPECT_EQ(full.status, 429);
  EXPECT_NE(full.body["error"]["reason"].get<std::string>().find("at most 2"), std::string::npos)
      << full.body.dump();
  // Polling still works meanwhile, and a held request blocks no other.
  EXPECT_EQ(h->get(path("n3"), t3).status, 200);
  // The wait's bound, the version's form, unknown parameters, another node's token.
  auto r = h->get(watch_path("n3", "", 31), t3);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["field"], "wait");
  r = h->get(watch_path("n3", "XYZ", 5), t3);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["field"], "since");
  r = h->get(watch_path("n3", "", 5) + "&color=red", t3);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["field"], "color");
  EXPECT_EQ(h->get(watch_path("n1", "", 5), t3).status, 403);
}

TEST_F(Watch, AClientThatLeavesFreesItsPlace) {
  start();
  const auto tok = node("n1");
  const auto v0 = version("n1", tok);
  {
    Raw a(h->port());
    a.get(watch_path("n1", v0, 20), tok);
    EXPECT_EQ(a.read(300), "");
    EXPECT_EQ(h->get(watch_path("n1", v0, 20), tok).status, 429);  // a's place is taken
  }                                                                // a leaves
  // Its place is free at once: the next watch is held, not refused.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  Raw b(h->port());
  b.get(watch_path("n1", v0, 20), tok);
  EXPECT_EQ(b.read(500), "");
}

// The held watches as a gauge on GET /metrics: up while one is held, down once its client left.
TEST_F(Watch, TheHeldWatchesAreAGaugeOnMetrics) {
  ApiOptions api;
  api.prometheus = std::make_shared<ServerMetrics>();
  start(api);
  const auto tok = node("n1");
  const auto v0 = version("n1", tok);
  httplib::Client cli("127.0.0.1", h->port());
  const auto gauge = [&]() -> std::string {
    auto r = cli.Get("/metrics", {{"Authorization", "Bearer " + h->admin()}});
    if (!r || r->status != 200) return "no scrape";
    const auto at = r->body.find("\nallot_agent_assignment_watches ");
    if (at == std::string::npos) return "no series";
    return r->body.substr(at + 1, r->body.find('\n', at + 1) - at - 1);
  };
  EXPECT_EQ(gauge(), "allot_agent_assignment_watches 0");
  {
    Raw a(h->port());
    a.get(watch_path("n1", v0, 20), tok);
    EXPECT_EQ(a.read(300), "");
    EXPECT_EQ(gauge(), "allot_agent_assignment_watches 1");
  }
  std::string now;
  for (int i = 0; i < 40 && (now = gauge()) != "allot_agent_assignment_watches 0"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(now, "allot_agent_assignment_watches 0");
}

TEST_F(Watch, StoppingTheServerAnswersWhatItHolds) {
  start();
  const auto tok = node("n1");
  Raw a(h->port());
  a.get(watch_path("n1", version("n1", tok), 30), tok);
  EXPECT_EQ(a.read(300), "");
  const auto t = Clock::now();
  h->close();
  EXPECT_LT(since(t), 5.0);
  const auto got = a.read(1000);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
}

// Over HTTPS (cpp-httplib's thread per connection) nothing is held: a watch is answered at once,
// saying so ("watch": false), and the agent polls.
TEST_F(Watch, OverHttpsAWatchIsAnsweredAtOnceSayingSo) {
  const auto cert = dir.file("cert.pem"), key = dir.file("key.pem");
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " +
                          cert + " -days 1 -subj /CN=127.0.0.1 >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ApiOptions api;
  api.tls_cert = cert;
  api.tls_key = key;
  h = std::make_unique<Harness>(dir.file("allot.db"), api);
  auto tok = h->token("agent-n1", "agent", "n1");
  httplib::SSLClient tls("127.0.0.1", h->port());
  tls.enable_server_certificate_verification(false);  // self-signed, CN=127.0.0.1
  const httplib::Headers auth = {{"Authorization", "Bearer " + tok}};
  auto reg =
      tls.Post("/api/v1/nodes", auth,
               json{{"name", "n1"}, {"cluster", "c1"}, {"model", "H100"}, {"gpus", 8}}.dump(),
               "application/json");
  ASSERT_TRUE(reg);
  ASSERT_EQ(reg->status, 201) << reg->body;
  auto plain = tls.Get(path("n1").c_str(), auth);
  ASSERT_TRUE(plain);
  const auto v0 = json::parse(plain->body)["version"].get<std::string>();
  const auto t = Clock::now();
  auto r = tls.Get(watch_path("n1", v0, 20).c_str(), auth);
  EXPECT_LT(since(t), 2.0);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto body = json::parse(r->body);
  EXPECT_FALSE(body["watch"].get<bool>());
  EXPECT_FALSE(body["changed"].get<bool>());
  EXPECT_EQ(body["version"], v0);
  // The same checks as over plain HTTP.
  auto bad = tls.Get(watch_path("n1", v0, 61).c_str(), auth);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
}

}  // namespace
}  // namespace allot::server
