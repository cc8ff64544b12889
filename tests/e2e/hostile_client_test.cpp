// The hostile-client suite (issue 12, docs/security.md): a real `allot server` and a real
// `allot agent`, and a client that means harm. Each phase throws one class of abuse at them —
// malformed framing, bytes that are not UTF-8 everywhere a string enters, pipelining without
// reading, clients that send one byte per 100 ms, a user submitting as fast as it can, an agent
// forging reports, logs and telemetry for runs it does not hold, reports over huge periods — and
// then checks the same four things: the server still answers; every answer it gave is an HTTP
// answer with a well-formed JSON body; a refusal changed nothing (jobs, their states, the audit
// trail); and the server's resident memory stays under kRssBound.
//
// One test, one server: ctest runs each test in its own process, and the whole suite is meant to
// cost a few seconds of wall time in scripts/test.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test_cluster.h"

namespace allot::e2e {
namespace {

// The stated bound on the server's resident memory (VmRSS) during the whole suite. The server
// starts at about 10 MiB here; the pipelining phase alone would cost hundreds of MiB without the
// bound on unsent output (issue 12 measured 0.5-1 GB), and a /report over 2^62 seconds as much
// before periods were bounded.
constexpr long kRssBoundKib = 96 * 1024;

// Under AddressSanitizer the server's RSS also holds shadow memory (it starts at about 230 MiB)
// and up to 256 MiB of freed blocks kept in quarantine, so there the bound is on growth: the
// starting RSS plus the quarantine plus 64 MiB. It says less; the release run holds the real one.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif
long rss_bound_kib(long start_kib) {
  return kSanitized ? start_kib + (256 + 64) * 1024 : kRssBoundKib;
}

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads until the server closes or nothing comes for `quiet`.
std::string read_until_closed(int fd, std::chrono::milliseconds quiet = 3000ms) {
  std::string in;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(quiet.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<std::size_t>(n));
  }
  return in;
}

struct Answer {
  int status = 0;
  std::string head;
  json body;
};

// Splits what a connection received into answers. Every one must be an HTTP/1.1 status line,
// headers with a Content-Length, and a body of that length that is a JSON object; anything else
// is reported in `malformed`.
std::vector<Answer> answers_in(const std::string& raw, std::string* malformed) {
  std::vector<Answer> out;
  std::size_t at = 0;
  while (at < raw.size()) {
    const auto end = raw.find("\r\n\r\n", at);
    if (raw.compare(at, 9, "HTTP/1.1 ") != 0 || end == std::string::npos) {
      *malformed = "not an HTTP answer: " + raw.substr(at, 80);
      return out;
    }
    Answer a;
    a.head = raw.substr(at, end - at);
    a.status = std::atoi(a.head.c_str() + 9);
    std::size_t length = 0;
    std::istringstream headers(a.head);
    bool sized = false;
    for (std::string line; std::getline(headers, line);) {
      if (line.rfind("Content-Length: ", 0) == 0) {
        length = std::stoul(line.substr(16));
        sized = true;
      }
    }
    if (!sized || end + 4 + length > raw.size()) {
      *malformed = "an answer without its whole body: " + a.head;
      return out;
    }
    a.body = json::parse(raw.substr(end + 4, length), nullptr, false);
    if (!a.body.is_object()) {
      *malformed = "a body that is not a JSON object: " +
                   raw.substr(end + 4, std::min<std::size_t>(length, 80));
      return out;
    }
    out.push_back(std::move(a));
    at = end + 4 + length;
  }
  return out;
}

// Sends `bytes` on a fresh connection, half-closes it, and returns every answer.
std::vector<Answer> send_raw(int port, const std::string& bytes, std::string* malformed) {
  const int fd = connect_to(port);
  if (fd < 0) {
    *malformed = "cannot connect";
    return {};
  }
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  auto raw = read_until_closed(fd);
  ::close(fd);
  return answers_in(raw, malformed);
}

std::string request(const std::string& method, const std::string& target, const std::string& token,
                    const std::string& body = "", const std::string& extra = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: x\r\n";
  if (!token.empty()) r += "Authorization: Bearer " + token + "\r\n";
  r += extra;
  if (method != "GET") r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

std::string field_of(const Answer& a) {
  return a.body.contains("error") ? a.body["error"].value("field", "") : "(no error)";
}

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    c.start_server();
    ASSERT_EQ(
        c.post("/api/v1/budgets", {{"path", "/lab"}, {"share", 1}, {"members", {"admin", "ann"}}})
            .status,
        200);
    auto t = c.post("/api/v1/tokens", {{"name", "ann"}, {"role", "user"}});
    ASSERT_EQ(t.status, 201) << t.raw;
    ann = t.body["token"].get<std::string>();
    c.start_agent("n1", 1);
    // The node's one GPU stays busy, so that ann's jobs wait; its run is the one the agent holds.
    blocker = c.submit({{"budget", "/lab"},
                        {"gpus_per_node", 1},
                        {"command", {"/bin/sh", "-c", "exec sleep 300 # " + c.dir()}}});
    ASSERT_TRUE(c.wait_state(blocker, "running")) << c.history(blocker);
    baseline_rss = rss_kib(c.server_pid());
    ASSERT_GT(baseline_rss, 0);
  }

  // What a refusal must not change: every job and its state, and the audit trail.
  std::string state() {
    auto jobs = c.get("/api/v1/jobs?limit=1000");
    auto audit = c.get("/api/v1/budgets/audit");
    std::string s;
    for (const auto& j : jobs.body["jobs"]) {
      s += std::to_string(j["id"].get<long>()) + ":" + j.value("state", "?") + " ";
    }
    return s + "| audit " + std::to_string(audit.body["entries"].size());
  }

  // The server answers, with JSON, and holds less than the bound.
  void still_well() {
    std::string bad;
    auto a = send_raw(c.port(), request("GET", "/api/v1/health", ""), &bad);
    ASSERT_EQ(bad, "");
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a[0].status, 200);
    auto jobs = c.get("/api/v1/jobs?limit=1000");
    EXPECT_EQ(jobs.status, 200);
    EXPECT_TRUE(jobs.body.is_object()) << "listing jobs is not JSON: " << jobs.raw.substr(0, 200);
    const long rss = rss_kib(c.server_pid());
    peak_rss = std::max(peak_rss, rss);
    EXPECT_GT(rss, 0) << "the server process is gone";
    EXPECT_LT(rss, rss_bound_kib(baseline_rss))
        << "VmRSS " << rss << " KiB (started at " << baseline_rss << ")";
  }

  // Small limits, so that one user reaches them in a few requests.
  TestCluster c{{"--submit-rate", "1", "--submit-burst", "5", "--max-waiting-jobs", "3",
                 "--max-connections-per-address", "32"}};
  std::string ann;
  std::uint64_t blocker = 0;
  long baseline_rss = 0;
  long peak_rss = 0;
};

// Not hostile, but free with this cluster: the agent said at registration what isolation it
// achieved, and GET /nodes shows it. These tests run it as --run-jobs-as agent; whether cgroup
// v2 limits apply depends on the machine, and the node must say why not when they do not.
TEST_F(Hostile, TheNodeReportsTheIsolationItAchieved) {
  auto n = c.get("/api/v1/nodes/n1");
  ASSERT_EQ(n.status, 200);
  const auto& h = n.body["agent"]["achieved"];
  ASSERT_TRUE(h.is_object()) << n.raw;
  EXPECT_EQ(h["jobs_as_owner"], false);
  EXPECT_EQ(h["gpu_devices"] == "none" || h["gpu_devices"] == "cgroup", true) << h.dump();
  if (h["cgroup_limits"] == false) {
    EXPECT_FALSE(h["cgroup_why_not"].get<std::string>().empty()) << h.dump();
    std::printf("this machine: no cgroup v2 limits for jobs: %s\n",
                h["cgroup_why_not"].get<std::string>().c_str());
  } else {
    EXPECT_EQ(h["cgroup_why_not"], "") << h.dump();
  }
  auto listed = c.get("/api/v1/nodes");
  ASSERT_EQ(listed.body["nodes"].size(), 1u);
  EXPECT_EQ(listed.body["nodes"][0]["agent"]["achieved"], h);
}

TEST_F(Hostile, TheServerStandsAndChangesNothingOnRefusal) {
  const int port = c.port();
  const std::string admin = c.admin();
  const std::string agent = c.agent_token("n1");
  std::string before = state();

  {
    SCOPED_TRACE("malformed framing");
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"binary noise", std::string("\x00\x01\x02\xff\xfe garbage\r\n\r\n", 17)},
        {"no version", "GET /api/v1/health\r\n\r\n"},
        {"unknown version", "GET /api/v1/health HTTP/9.9\r\nHost: x\r\n\r\n"},
        {"header without colon", "GET /api/v1/health HTTP/1.1\r\nHost x\r\n\r\n"},
        {"bare LF", "GET /api/v1/health HTTP/1.1\nHost: x\n\n"},
        {"head past 64 KiB",
         "GET /api/v1/health HTTP/1.1\r\nX-Big: " + std::string(70 * 1024, 'a') + "\r\n\r\n"},
        {"too many headers",
         [] {
           std::string r = "GET /api/v1/health HTTP/1.1\r\n";
           for (int i = 0; i < 150; ++i) r += "X-" + std::to_string(i) + ": v\r\n";
           return r + "\r\n";
         }()},
        {"negative length", request("POST", "/api/v1/jobs", admin, "", "Content-Length: -5\r\n")},
        {"length not a number",
         "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 12abc\r\n\r\n{}"},
        {"length and chunked",
         "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: "
         "chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"},
        {"two lengths",
         "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: "
         "3\r\n\r\n{}"},
        {"bad chunk size",
         "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
        {"chunk size overflow",
         "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
         "chunked\r\n\r\nfffffffffffffffffffff\r\n"},
        {"body past 1 MiB declared",
         "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n"},
        {"chunk extensions past the limit",
         [] {
           std::string r =
               "POST /api/v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
           for (int i = 0; i < 300; ++i) r += "1;" + std::string(4000, 'e') + "\r\nx\r\n";
           return r;
         }()},
        {"NUL in a header", std::string("GET /api/v1/health HTTP/1.1\r\nX-A: a\0b\r\n\r\n", 41)},
        {"truncated body", request("POST", "/api/v1/jobs", admin, "", "").substr(0, 30)},
    };
    for (const auto& [name, bytes] : cases) {
      std::string bad;
      auto answers = send_raw(port, bytes, &bad);
      EXPECT_EQ(bad, "") << name;
      for (const auto& a : answers) {
        // A refusal: 4xx, or 505 for a version it does not speak.
        EXPECT_TRUE((a.status >= 400 && a.status < 500) || a.status == 505)
            << name << ": " << a.head;
        EXPECT_TRUE(a.body.contains("error")) << name << ": " << a.body.dump();
      }
    }
    still_well();
    EXPECT_EQ(state(), before);
  }

  {
    SCOPED_TRACE("bytes that are not UTF-8");
    const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
        {"path, raw", request("GET", "/api/v1/jobs/\xff\xfe", admin), "path"},
        {"path, escaped", request("GET", "/api/v1/nodes/%ff%c0%af", admin), "path"},
        {"path, a surrogate", request("GET", "/api/v1/nodes/%ed%a0%80", admin), "path"},
        {"query value", request("GET", "/api/v1/jobs?owner=%c0%af", admin), "owner"},
        {"query name", request("GET", "/api/v1/jobs?%ff=1", admin), "query"},
        {"a header", request("GET", "/api/v1/jobs", admin, "", "X-Note: caf\xe9\r\n"), "X-Note"},
        {"the token", request("GET", "/api/v1/jobs", admin + "\xff"), "Authorization"},
        {"Idempotency-Key",
         request("POST", "/api/v1/jobs", admin,
                 R"({"budget":"/lab","gpus_per_node":1,"command":["true"]})",
                 "Idempotency-Key: k\xed\xa0\x80\r\n"),
         "Idempotency-Key"},
        {"a body field",
         request("POST", "/api/v1/jobs", admin,
                 R"({"budget":"/lab","gpus_per_node":1,"command":["true"],"name":"n\xff"})"),
         "body"},
        {"a body key", request("POST", "/api/v1/jobs", admin, "{\"\xff\":1}"), "body"},
        {"a budget path",
         request("POST", "/api/v1/budgets", admin, "{\"path\":\"/lab/\xc3\",\"share\":1}"), "body"},
        {"an agent's node name",
         request("POST", "/api/v1/agent/nodes/n%ff/reports", agent, R"({"reports":[]})"), "path"},
        {"an agent's log stream",
         request("POST", "/api/v1/agent/nodes/n1/logs?job=1&run=1&offset=0&stream=%ff", agent, "x"),
         "stream"},
        {"valid, for contrast", request("GET", "/api/v1/nodes/n1", admin), ""},
    };
    for (const auto& [name, bytes, field] : cases) {
      std::string bad;
      auto answers = send_raw(port, bytes, &bad);
      EXPECT_EQ(bad, "") << name;
      ASSERT_EQ(answers.size(), 1u) << name;
      if (field.empty()) {
        EXPECT_EQ(answers[0].status, 200) << name;
        continue;
      }
      EXPECT_EQ(answers[0].status, 400) << name << ": " << answers[0].body.dump();
      EXPECT_EQ(field_of(answers[0]), field) << name << ": " << answers[0].body.dump();
    }
    still_well();
    EXPECT_EQ(state(), before);
  }

  {
    SCOPED_TRACE("pipelining without reading");
    // Four connections each write requests for as long as the server reads them (1 s), and
    // never read an answer. The server must stop reading them, not buffer without end.
    const std::string one = request("GET", "/api/v1/jobs?limit=1000", admin);
    std::vector<int> fds;
    std::size_t sent = 0;
    for (int k = 0; k < 4; ++k) {
      const int fd = connect_to(port);
      ASSERT_GE(fd, 0);
      ::fcntl(fd, F_SETFL, O_NONBLOCK);
      fds.push_back(fd);
    }
    std::string burst;
    for (int i = 0; i < 200; ++i) burst += one;
    const auto end = std::chrono::steady_clock::now() + 1000ms;
    while (std::chrono::steady_clock::now() < end) {
      bool any = false;
      for (int fd : fds) {
        const ssize_t n = ::send(fd, burst.data(), burst.size(), MSG_NOSIGNAL);
        if (n > 0) {
          sent += static_cast<std::size_t>(n);
          any = true;
        }
      }
      if (!any) std::this_thread::sleep_for(20ms);
    }
    // Meanwhile, everyone else is served.
    still_well();
    for (int fd : fds) ::close(fd);
    EXPECT_GT(sent, 1u << 20) << "the test should have sent more than the server may hold";
    EXPECT_EQ(state(), before);
  }

  {
    SCOPED_TRACE("slow clients: one byte per 100 ms");
    const std::string slow = request("GET", "/api/v1/jobs", admin);
    std::vector<int> fds;
    for (int k = 0; k < 16; ++k) {
      const int fd = connect_to(port);
      ASSERT_GE(fd, 0);
      fds.push_back(fd);
    }
    for (std::size_t i = 0; i < 15; ++i) {
      for (int fd : fds) ::send(fd, &slow[i], 1, MSG_NOSIGNAL);
      // Others are not kept waiting behind them.
      const auto t0 = std::chrono::steady_clock::now();
      auto r = c.get("/api/v1/health");
      EXPECT_EQ(r.status, 200);
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);
      std::this_thread::sleep_for(100ms);
    }
    for (int fd : fds) ::close(fd);
    still_well();
    EXPECT_EQ(state(), before);
  }

  {
    SCOPED_TRACE("one address opening connections without end");
    // The server takes 32 from one address (this test's, which its agent shares); the rest are
    // answered 429 and closed at once, not held open.
    std::vector<int> fds;
    int refused = 0;
    for (int k = 0; k < 48; ++k) {
      const int fd = connect_to(port);
      ASSERT_GE(fd, 0);
      fds.push_back(fd);
    }
    std::this_thread::sleep_for(300ms);  // refusals are sent as the server accepts
    for (int fd : fds) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) continue;  // held open, waiting for a request
      std::string bad;
      auto answers = answers_in(read_until_closed(fd, 1000ms), &bad);
      EXPECT_EQ(bad, "");
      ASSERT_EQ(answers.size(), 1u);
      EXPECT_EQ(answers[0].status, 429);
      EXPECT_EQ(field_of(answers[0]), "connection") << answers[0].body.dump();
      ++refused;
    }
    EXPECT_GE(refused, 48 - 32);
    EXPECT_LE(refused, 48 - 32 + 4) << "the agent holds a few of the 32";
    for (int fd : fds) ::close(fd);
    // Once they are closed, this address is served again.
    EXPECT_TRUE(eventually([&] { return c.get("/api/v1/health").status == 200; }, 5000ms));
    still_well();
    EXPECT_EQ(state(), before);
  }

  {
    SCOPED_TRACE("quota abuse: one user submitting as fast as it can");
    // The server runs with a burst of 5, one a second, 3 waiting jobs per user.
    int accepted = 0, waiting = 0, rate = 0;
    for (int i = 0; i < 40; ++i) {
      std::string bad;
      const json spec = {{"budget", "/lab"},
                         {"gpus_per_node", 1},
                         {"idempotency_key", "q" + std::to_string(i)},
                         {"command", {"/bin/sh", "-c", "exec sleep 300 # " + c.dir()}}};
      auto a = send_raw(port, request("POST", "/api/v1/jobs", ann, spec.dump()), &bad);
      ASSERT_EQ(bad, "");
      ASSERT_EQ(a.size(), 1u);
      if (a[0].status == 201) {
        ++accepted;
        continue;
      }
      EXPECT_EQ(a[0].status, 429) << a[0].body.dump();
      EXPECT_NE(a[0].head.find("\r\nRetry-After: "), std::string::npos) << a[0].head;
      const auto why = a[0].body["error"].value("reason", "");
      if (why.find("jobs waiting") != std::string::npos) ++waiting;
      if (why.find("submission rate") != std::string::npos) ++rate;
    }
    // Exactly the cap: the scheduler's latest view plus what was accepted and not yet in a view
    // (quota.h), however far behind the view is.
    EXPECT_EQ(accepted, 3) << "the waiting-job quota";
    EXPECT_GE(waiting, 1);
    EXPECT_GE(rate, 30) << "the rate: 5 at once, then one a second";
    EXPECT_EQ(accepted + waiting + rate, 40);
    auto jobs = c.get("/api/v1/jobs?owner=ann");
    EXPECT_EQ(jobs.body["jobs"].size(), static_cast<std::size_t>(accepted))
        << "refused submissions left no job";
    still_well();
    before = state();
  }

  {
    SCOPED_TRACE("forged agent reports, logs and telemetry");
    auto mine = c.get("/api/v1/jobs?owner=ann");
    ASSERT_FALSE(mine.body["jobs"].empty());
    const auto waiting_job = mine.body["jobs"][0]["id"].get<std::uint64_t>();
    const std::string w = std::to_string(waiting_job);
    const std::string b = std::to_string(blocker);
    const auto post = [&](const std::string& path, const std::string& body) {
      std::string bad;
      auto a = send_raw(port, request("POST", path, agent, body), &bad);
      EXPECT_EQ(bad, "") << path;
      return a.empty() ? Answer{} : a[0];
    };
    // A job the node never held, its own job's run that does not exist, a job that does not
    // exist: no log is taken, and all three get the same answer.
    for (const std::string& q :
         {"job=" + w + "&run=1", "job=" + b + "&run=2", std::string("job=99999999&run=1")}) {
      auto a = post("/api/v1/agent/nodes/n1/logs?" + q + "&stream=stdout&offset=0", "forged\n");
      EXPECT_EQ(a.status, 403) << q << ": " << a.body.dump();
      EXPECT_EQ(field_of(a), "job") << q;
    }
    EXPECT_EQ(c.get("/api/v1/jobs/" + w + "/logs?stream=stdout").raw, "");
    // Acting for another node.
    auto other =
        post("/api/v1/agent/nodes/n2/reports",
             R"({"reports":[{"job":)" + b + R"(,"run":1,"event":"exited","exit_code":0}]})");
    EXPECT_EQ(other.status, 403) << other.body.dump();
    // Reports that would end a job the node does not hold, or another run of its own.
    auto reps = post("/api/v1/agent/nodes/n1/reports",
                     R"({"reports":[{"job":)" + w + R"(,"run":1,"event":"exited","exit_code":0},)" +
                         R"({"job":)" + b + R"(,"run":7,"event":"exited","exit_code":1},)" +
                         R"({"job":)" + w + R"(,"run":1,"event":"started"},)" +
                         R"({"job":4611686018427387904,"run":1073741824,"event":"lost"}]})");
    ASSERT_EQ(reps.status, 200) << reps.body.dump();
    for (const auto& r : reps.body["results"]) {
      EXPECT_TRUE(r.contains("error")) << r.dump();
      EXPECT_FALSE(r.contains("state")) << "an agent learns no other job's state: " << r.dump();
    }
    // Telemetry for a job it does not hold counts for nothing.
    auto tel = post("/api/v1/agent/nodes/n1/telemetry",
                    R"({"time":1,"jobs":[{"job":)" + w +
                        R"(,"run":1,"samples":100,"seconds":100,"gpu_util_mean":100}]})");
    ASSERT_EQ(tel.status, 200) << tel.body.dump();
    EXPECT_EQ(tel.body["accepted"], 0);
    auto seen = c.get("/api/v1/jobs/" + w + "/telemetry");
    EXPECT_EQ(seen.status, 200);
    EXPECT_TRUE(seen.body["current"].is_null()) << seen.raw;
    EXPECT_TRUE(seen.body["total"].is_null()) << seen.raw;
    // Malformed agent messages.
    for (const std::string& body :
         {std::string(R"({"reports":"all"})"), std::string(R"({"reports":[{"job":-1}]})"),
          std::string(R"({"reports":[{"job":1,"run":1,"event":"exited","exit_code":1e300}]})"),
          std::string(R"({"time":1,"gpus":[{"index":4294967296}]})")}) {
      auto a = post(body.find("gpus") != std::string::npos ? "/api/v1/agent/nodes/n1/telemetry"
                                                           : "/api/v1/agent/nodes/n1/reports",
                    body);
      EXPECT_EQ(a.status, 400) << body << ": " << a.body.dump();
    }
    EXPECT_EQ(c.state(blocker), "running");
    still_well();
    EXPECT_EQ(state(), before);
  }

  {
    SCOPED_TRACE("reports over huge periods");
    for (const std::string& q :
         {std::string("from=0&to=4611686018427387903"), std::string("from=0"),
          std::string("from=1&to=99999999999999999999"), std::string("from=-5"),
          std::string("from=10&to=5")}) {
      for (const std::string& tok : {admin, ann}) {
        std::string bad;
        auto a = send_raw(port, request("GET", "/api/v1/report?budget=/lab&" + q, tok), &bad);
        EXPECT_EQ(bad, "") << q;
        ASSERT_EQ(a.size(), 1u) << q;
        EXPECT_EQ(a[0].status, 400) << q << ": " << a[0].body.dump();
        const auto f = field_of(a[0]);
        EXPECT_TRUE(f == "from" || f == "to") << q << ": " << a[0].body.dump();
      }
    }
    still_well();
    EXPECT_EQ(state(), before);
  }

  RecordProperty("server_rss_kib_start", std::to_string(baseline_rss));
  RecordProperty("server_rss_kib_peak", std::to_string(peak_rss));
  std::printf("server VmRSS: %ld KiB at start, %ld KiB at most (bound %ld KiB)\n", baseline_rss,
              peak_rss, rss_bound_kib(baseline_rss));
}

}  // namespace
}  // namespace allot::e2e
