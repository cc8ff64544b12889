// The API's edge (src/server/edge.cpp, docs/security.md): hostile bytes in the path, the query,
// the headers and the body are refused with 400 naming the field, the server stays up, and every
// answer is JSON; numbers are range-checked before they are narrowed; names and shares are what
// they say. Through the real server on loopback, over raw sockets where a client library would
// clean the request up.
#include "server/edge.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "harness.h"
#include "server/http_server.h"
#include "server/quota.h"

namespace allot::server {
namespace {

using testing::Harness;
using testing::job;
using testing::json;
using testing::TempDir;

struct RawReply {
  int status = 0;
  std::string head;
  json body;  // discarded if it is not JSON
};

// Sends `request` as is (it should ask for "Connection: close") and reads the answer to EOF.
RawReply raw_request(int port, const std::string& request) {
  RawReply out;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return out;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string in;
  char buf[65536];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    in.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  const auto end = in.find("\r\n\r\n");
  if (in.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return out;
  out.status = std::stoi(in.substr(9, 3));
  out.head = in.substr(0, end);
  out.body = json::parse(in.substr(end + 4), nullptr, false);
  return out;
}

std::string get_request(const std::string& target, const std::string& token,
                        const std::string& extra = "") {
  return "GET " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + "\r\n" +
         extra + "Connection: close\r\n\r\n";
}
std::string post_request(const std::string& target, const std::string& token,
                         const std::string& body, const std::string& extra = "") {
  return "POST " + target + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + "\r\n" +
         extra + "Content-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

std::string field_of(const RawReply& r) {
  return r.body.is_object() && r.body.contains("error") ? r.body["error"].value("field", "?")
                                                        : "(not a JSON error: " + r.head + ")";
}

class Edge : public ::testing::Test {
 protected:
  void SetUp() override {
    h = std::make_unique<Harness>(dir.file("allot.db"));
    ASSERT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 1}}).status, 200);
  }
  // The server still answers, with JSON.
  void still_up() {
    auto r = raw_request(h->port(), get_request("/api/v1/health", h->admin()));
    ASSERT_EQ(r.status, 200) << r.head;
    EXPECT_EQ(r.body.value("status", ""), "ok");
  }
  TempDir dir;
  std::unique_ptr<Harness> h;
};

TEST(Utf8, WellFormedOnly) {
  EXPECT_TRUE(valid_utf8(""));
  EXPECT_TRUE(valid_utf8("plain"));
  EXPECT_TRUE(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_TRUE(valid_utf8("\xf4\x8f\xbf\xbf"));                           // U+10FFFF
  EXPECT_FALSE(valid_utf8("\xff"));
  EXPECT_FALSE(valid_utf8("\x80"));              // a continuation alone
  EXPECT_FALSE(valid_utf8("\xc3"));              // cut short
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(valid_utf8("\xe0\x80\xaf"));      // overlong '/'
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(valid_utf8("ok\xe2\x82"));        // cut short at the end
  EXPECT_EQ(utf8_or_replaced("a\xff"
                             "b"),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_EQ(dump_json(json("a\xff")), "\"a\xef\xbf\xbd\"");
  EXPECT_EQ(json_depth(R"({"a":[1,{"b":[]}],"c":"[[[{"})", 100), 4u);
  EXPECT_EQ(json_depth(R"(["\"[[["])", 100), 1u);  // an escaped quote does not end the string
  EXPECT_EQ(json_depth(std::string(1000, '['), 33), 33u);  // stops counting at `stop`
}

// The crash of issue 12: bytes that are not UTF-8 in the path reached a JSON encoder outside any
// try block (the 404's message names the path) and ended the process.
TEST_F(Edge, InvalidUtf8InThePathIsRefusedAndTheServerStaysUp) {
  for (const std::string target : {"/api/v1/\xff\xfe", "/api/v1/%ff%fe", "/\xc0\xaf",
                                   "/api/v1/jobs/1/\xed\xa0\x80", "/api/v1/%00"}) {
    SCOPED_TRACE(target);
    for (const std::string& token : {h->admin(), std::string("wrong")}) {
      auto r = raw_request(h->port(), get_request(target, token));
      EXPECT_EQ(r.status, 400) << r.head;
      EXPECT_EQ(field_of(r), "path");
    }
    still_up();
  }
  // Well-formed UTF-8 that no route serves is a 404 that names it.
  auto r = raw_request(h->port(), get_request("/api/v1/caf%C3%A9", h->admin()));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(field_of(r), "path");
}

TEST_F(Edge, InvalidUtf8InTheQueryIsRefusedNamingTheParameter) {
  auto r = raw_request(h->port(), get_request("/api/v1/jobs?owner=%ff", h->admin()));
  EXPECT_EQ(r.status, 400) << r.head;
  EXPECT_EQ(field_of(r), "owner");
  r = raw_request(h->port(), get_request("/api/v1/jobs?%ff=1", h->admin()));
  EXPECT_EQ(r.status, 400) << r.head;
  EXPECT_EQ(field_of(r), "query");
  r = raw_request(h->port(), get_request("/api/v1/usage?budget=%2Flab%0a", h->admin()));
  EXPECT_EQ(r.status, 400) << r.head;
  EXPECT_EQ(field_of(r), "budget");
  still_up();
}

TEST_F(Edge, HeaderValuesMustBeUtf8WithoutControls) {
  h->add_sim_nodes(1);
  const std::string body = job("k1").dump();
  // An idempotency key that is not UTF-8 was stored, and every later listing was not JSON.
  auto r = raw_request(
      h->port(), post_request("/api/v1/jobs", h->admin(), body, "Idempotency-Key: \xff\xfe\r\n"));
  EXPECT_EQ(r.status, 400) << r.head;
  EXPECT_EQ(field_of(r), "Idempotency-Key");
  // NUL (and the other controls) in any header value: refused as the request is read.
  r = raw_request(h->port(), post_request("/api/v1/jobs", h->admin(), body,
                                          std::string("X-Note: a\0b\r\n", 13)));
  EXPECT_EQ(r.status, 400) << r.head;
  EXPECT_EQ(field_of(r), "X-Note");
  r = raw_request(h->port(),
                  get_request("/api/v1/jobs", h->admin(), std::string("X-Note: a\x01z\r\n")));
  EXPECT_EQ(r.status, 400) << r.head;
  EXPECT_EQ(field_of(r), "X-Note");
  r = raw_request(h->port(), get_request("/api/v1/jobs", h->admin() + "\xff"));
  EXPECT_EQ(r.status, 400) << r.head;
  EXPECT_EQ(field_of(r), "Authorization");
  EXPECT_EQ(h->store().count_jobs(), 0);
  // A body that is not UTF-8 is not JSON.
  r = raw_request(h->port(), post_request("/api/v1/jobs", h->admin(),
                                          R"({"idempotency_key":"k)"
                                          "\xff"
                                          R"(","budget":"/lab/a"})"));
  EXPECT_EQ(r.status, 400) << r.head;
  EXPECT_EQ(field_of(r), "body");
  // Well-formed UTF-8 in the key is kept as it is.
  auto keyless = json{{"budget", "/lab/a"}};
  r = raw_request(h->port(), post_request("/api/v1/jobs", h->admin(), keyless.dump(),
                                          "Idempotency-Key: caf\xc3\xa9\r\n"));
  ASSERT_EQ(r.status, 201) << r.head;
  EXPECT_EQ(r.body.value("idempotency_key", ""), "caf\xc3\xa9");
  still_up();
}

// A body nested as deep as the size limit allows is refused before it is parsed (parsing it took
// half a second of a loop thread), naming the body.
TEST_F(Edge, DeeplyNestedBodiesAreRefused) {
  const std::string deep = std::string(500000, '[') + std::string(500000, ']');
  auto r = h->raw("POST", "/api/v1/jobs", deep, h->admin());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["field"], "body");
  const std::string deep_env = R"({"idempotency_key":"d","budget":"/lab/a","env":{"A":)" +
                               std::string(400000, '[') + std::string(400000, ']') + "}}";
  r = h->raw("POST", "/api/v1/jobs", deep_env, h->admin());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["field"], "body");
  // Brackets inside strings are text, and 32 levels are allowed.
  auto text = job("brackets");
  text["command"] = {std::string(4000, '[')};
  EXPECT_EQ(h->raw("POST", "/api/v1/jobs", text.dump(), h->admin()).status, 201);
  r = h->raw("POST", "/api/v1/jobs",
             R"({"idempotency_key":"d32","budget":"/lab/a","env":{"A":)" + std::string(30, '[') +
                 std::string(30, ']') + "}}",
             h->admin());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["field"], "env.A") << "within the depth: refused by its field";
  r = h->raw(
      "POST", "/api/v1/budgets",
      R"({"path":"/lab/x","share":)" + std::string(400000, '[') + std::string(400000, ']') + "}",
      h->admin());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(h->store().count_jobs(), 1);
  still_up();
}

// A database written before the edge checked keys may hold bytes that are not UTF-8: listing
// still answers JSON, with U+FFFD in their place.
TEST_F(Edge, StoredBytesThatAreNotUtf8ComeOutAsJson) {
  store::JobRecord rec;
  rec.id = h->ctl().next_job_id();
  rec.owner = "root";
  rec.idempotency_key = "old\xff\xfekey";
  rec.name = "n";
  rec.budget = "/lab/a";
  rec.spec_json = R"({"budget":"/lab/a"})";
  rec.state = "pending";
  rec.reason = "submitted\xc0";
  rec.submit_time = h->now();
  rec.updated_at = rec.submit_time;
  if (const char* b = std::getenv("ALLOT_TEST_STORE"); b && std::string(b) == "postgres") {
    // No PostgreSQL database (in UTF-8) holds such bytes: it refuses them, and says so.
    auto w = h->store().write({store::op::InsertJob{rec}});
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.error().field, "store");
    EXPECT_EQ(h->store().count_jobs(), 0);
    return;
  }
  ASSERT_TRUE(h->store().write({store::op::InsertJob{rec}}).ok());
  auto r = raw_request(h->port(), get_request("/api/v1/jobs", h->admin()));
  ASSERT_EQ(r.status, 200) << r.head;
  ASSERT_FALSE(r.body.is_discarded());
  ASSERT_EQ(r.body["jobs"].size(), 1u);
  EXPECT_EQ(r.body["jobs"][0]["idempotency_key"], "old\xef\xbf\xbd\xef\xbf\xbdkey");
  r = raw_request(h->port(), get_request("/api/v1/jobs/" + std::to_string(rec.id), h->admin()));
  ASSERT_EQ(r.status, 200) << r.head;
  EXPECT_EQ(r.body["reason"], "submitted\xef\xbf\xbd");
  r = raw_request(h->port(),
                  get_request("/api/v1/jobs/" + std::to_string(rec.id) + "/events", h->admin()));
  EXPECT_EQ(r.status, 200) << r.head;
  EXPECT_FALSE(r.body.is_discarded());
}

// Integers are compared with their range before they are narrowed: 2^32+8 is not 8.
TEST_F(Edge, IntegersAreRangeCheckedBeforeNarrowing) {
  for (const std::string gpus :
       {"4294967304", "18446744073709551615", "9223372036854775808", "-4294967288", "8.0", "1e1"}) {
    auto r = h->raw("POST", "/api/v1/nodes", R"({"name":"n1","model":"H100","gpus":)" + gpus + "}",
                    h->admin());
    EXPECT_EQ(r.status, 400) << gpus << " -> " << r.body.dump();
    EXPECT_EQ(r.body["error"]["field"], "gpus") << gpus;
  }
  EXPECT_TRUE(h->store().nodes().empty());
  for (const std::string field :
       {"gpus_per_node", "nodes", "gpu_milli", "min_runtime", "expected_duration", "memory_mib"}) {
    for (const std::string v : {"4294967297", "18446744073709551615", "9223372036854775808"}) {
      auto r = h->raw("POST", "/api/v1/jobs",
                      R"({"idempotency_key":"i","budget":"/lab/a",")" + field + "\":" + v + "}",
                      h->admin());
      EXPECT_EQ(r.status, 400) << field << "=" << v << " -> " << r.body.dump();
      EXPECT_EQ(r.body["error"]["field"], field);
    }
  }
  EXPECT_EQ(h->store().count_jobs(), 0);
  auto ok = h->raw("POST", "/api/v1/nodes", R"({"name":"n1","model":"H100","gpus":8})", h->admin());
  EXPECT_EQ(ok.status, 201) << ok.body.dump();
  EXPECT_EQ(ok.body["gpus"], 8);
}

TEST_F(Edge, BudgetPathsAreNamesAndSharesArePositive) {
  for (const std::string& path :
       std::vector<std::string>{"/lab/..", "/lab/.", "/../x", "/lab//a", "/lab/a/",
                                "/" + std::string(129, 'x'), "/lab/a b"}) {
    auto r = h->post("/api/v1/budgets", {{"path", path}, {"share", 1}});
    EXPECT_EQ(r.status, 400) << path << " -> " << r.body.dump();
    EXPECT_EQ(r.body["error"]["field"], "path");
  }
  for (const std::string share :
       {"-0.0", "0", "1e-320", "5e-324", "1e-7", "-1", "1e7", "1e308", "\"1\""}) {
    auto r =
        h->raw("POST", "/api/v1/budgets", R"({"path":"/lab/b","share":)" + share + "}", h->admin());
    EXPECT_EQ(r.status, 400) << share << " -> " << r.body.dump();
    EXPECT_EQ(r.body["error"]["field"], "share");
  }
  // NaN and infinity are no JSON: the body is refused before the share is looked at.
  EXPECT_EQ(
      h->raw("POST", "/api/v1/budgets", R"({"path":"/lab/b","share":NaN})", h->admin()).status,
      400);
  auto budgets = h->get("/api/v1/budgets");
  for (const auto& b : budgets.body["budgets"]) EXPECT_NE(b["path"], "/lab/b");
  EXPECT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b"}, {"share", 1e-6}}).status, 200);
  EXPECT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b"}, {"share", 1e6}}).status, 200);
  EXPECT_EQ(h->post("/api/v1/budgets", {{"path", "/lab/b.c"}, {"share", 0.5}}).status, 200);
  // Names elsewhere: not "." or "..".
  auto r = h->post("/api/v1/tokens", {{"name", ".."}, {"role", "user"}});
  EXPECT_EQ(r.status, 400) << r.body.dump();
  r = h->post("/api/v1/nodes", {{"name", ".."}, {"model", "H100"}, {"gpus", 8}});
  EXPECT_EQ(r.status, 400) << r.body.dump();
}

// A report keeps hourly series over its period: a huge one took hundreds of MB, then answered
// 500 (bad_alloc). Now the period is bounded, with a 400 that says so.
TEST_F(Edge, ReportPeriodsAreBounded) {
  h->add_sim_nodes(1);
  const auto now = std::to_string(h->now());
  for (const std::string q : {"from=0&to=4611686018427387903", "from=0&to=31708800",
                              "from=1000000000&to=4611686018427387903"}) {
    auto r = h->get("/api/v1/report?" + q);
    EXPECT_EQ(r.status, 400) << q << " -> " << r.body.dump();
    EXPECT_EQ(r.body["error"]["field"], "from") << q;
  }
  auto r = h->get("/api/v1/report?from=0&to=31622400");  // 366 days
  EXPECT_EQ(r.status, 200) << r.body.dump();
  r = h->get("/api/v1/report?from=0&to=" + now);
  EXPECT_EQ(r.status, 200) << r.body.dump();
  // /usage keeps no series: any period.
  r = h->get("/api/v1/usage?from=0&to=4611686018427387903");
  EXPECT_EQ(r.status, 200) << r.body.dump();
}

TEST(SubmitQuota, ABurstThenTheRate) {
  SubmitQuota q({2, 3, 0});  // 2 a second, 3 at once
  const auto t0 = SubmitQuota::Clock::now();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(q.take("ann", t0), 0) << i;
  EXPECT_EQ(q.take("ann", t0), 1);  // half a second to the next: Retry-After says 1
  EXPECT_EQ(q.take("bob", t0), 0) << "each principal has its own";
  EXPECT_EQ(q.take("ann", t0 + std::chrono::milliseconds(500)), 0);
  EXPECT_EQ(q.take("ann", t0 + std::chrono::milliseconds(500)), 1);
  EXPECT_EQ(q.take("ann", t0 + std::chrono::seconds(100)), 0);  // refilled, to the burst only
  for (int i = 0; i < 2; ++i) EXPECT_EQ(q.take("ann", t0 + std::chrono::seconds(100)), 0);
  EXPECT_GT(q.take("ann", t0 + std::chrono::seconds(100)), 0);
  SubmitQuota none({0, 1, 0});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(none.take("ann", t0), 0);
}

// Waiting jobs: the snapshot's count, plus those reserved and not yet handed to the scheduler,
// plus those handed over after the snapshot's submissions (never reset by a newer snapshot
// that has not taken them in: the count the hostile-client suite saw off by one).
TEST(SubmitQuota, WaitingJobsAreCountedUntilASnapshotHoldsThem) {
  constexpr int kReserved = SubmitQuota::kReserved;
  SubmitQuota w({0, 1, 3});
  using Caps = std::vector<SubmitQuota::WaitingCap>;
  const auto ann = [](std::int64_t waiting, std::int64_t most = 3) {
    return Caps{{"ann", waiting, most}};
  };
  EXPECT_EQ(w.reserve_waiting(ann(1), 1, 0), kReserved);  // 1 + 1
  w.handed_over({"ann"}, 1, 1);                           // submission 1, not in a snapshot yet
  EXPECT_EQ(w.reserve_waiting(ann(1), 1, 0), kReserved);  // 1 + 1 handed + 1
  EXPECT_EQ(w.reserve_waiting(ann(1), 1, 0), 0) << "3 waiting: the cap";
  EXPECT_EQ(w.reserve_waiting({{"bob", 0, 3}}, 3, 0), kReserved) << "each owner apart";
  // Refused after all (the write failed): given back.
  w.release_waiting({"ann"}, 1);
  EXPECT_EQ(w.reserve_waiting(ann(1), 1, 0), kReserved);
  w.handed_over({"ann"}, 1, 3);
  // A snapshot that has taken in submission 1 but not 3 counts only the first itself.
  EXPECT_EQ(w.reserve_waiting(ann(2), 1, 1), 0);
  EXPECT_EQ(w.reserve_waiting(ann(2), 1, 0), SubmitQuota::kStale) << "older than one seen";
  // Both taken in, one of them started: room for one more, not for an array of two.
  EXPECT_EQ(w.reserve_waiting(ann(2), 2, 3), 0);
  {
    WaitingHold held(w, {"ann"}, 1);
    ASSERT_EQ(w.reserve_waiting(ann(2), 1, 3), kReserved);
    EXPECT_EQ(w.reserve_waiting(ann(2), 1, 3), 0);
  }  // dropped without being handed over: given back
  // Two caps (within a budget, and over all budgets): all or none.
  EXPECT_EQ(w.reserve_waiting({{"ann /b", 0, 1}, {"ann", 2, 3}}, 2, 3), 0);
  EXPECT_EQ(w.reserve_waiting({{"ann /b", 0, 5}, {"ann", 2, 3}}, 2, 3), 1);
  EXPECT_EQ(w.reserve_waiting({{"ann /b", 0, 1}, {"ann", 2, 3}}, 1, 3), kReserved)
      << "nothing was reserved by the refusals";
  EXPECT_EQ(w.reserve_waiting({{"ann", 2, 3}}, 1, 3), 0);
}

// One user's token submitting as fast as it can (issue 12: 51k jobs in 15 s) is held to its
// rate and to a number of waiting jobs, with 429 and Retry-After; administrators are not.
TEST(SubmitLimitsApi, RateAndWaitingJobsPerUser) {
  TempDir dir;
  ApiOptions o;
  o.submit_limits = {1, 4, 6};  // a burst of 4, then one a second; 6 waiting
  Harness h(dir.file("allot.db"), o);
  ASSERT_EQ(
      h.post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 1}, {"members", {"ann"}}}).status,
      200);
  const auto ann = h.token("ann", "user");
  int i = 0;
  auto submit = [&](const std::string& tok) {
    return raw_request(h.port(),
                       post_request("/api/v1/jobs", tok, job("q" + std::to_string(++i)).dump()));
  };
  for (int k = 0; k < 4; ++k) ASSERT_EQ(submit(ann).status, 201) << k;
  auto r = submit(ann);
  EXPECT_EQ(r.status, 429) << r.head;
  EXPECT_NE(r.head.find("Retry-After: 1"), std::string::npos) << r.head;
  EXPECT_NE(r.body["error"]["reason"].get<std::string>().find(
                "ann is over the submission rate: 1 a second, bursts of 4"),
            std::string::npos)
      << r.body.dump();
  EXPECT_EQ(h.store().count_jobs(), 4);
  for (int k = 0; k < 20; ++k) EXPECT_EQ(submit(h.admin()).status, 201) << "admin " << k;
  // Waiting jobs: 4 of ann's; two more, then 429 however slowly they come.
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  EXPECT_EQ(submit(ann).status, 201);
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  EXPECT_EQ(submit(ann).status, 201);
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  r = submit(ann);
  EXPECT_EQ(r.status, 429) << r.head;
  EXPECT_NE(r.body["error"]["reason"].get<std::string>().find("jobs waiting"), std::string::npos)
      << r.body.dump();
  EXPECT_NE(r.head.find("Retry-After: "), std::string::npos) << r.head;
  // As they leave the queue (cancelled here), room comes back with the scheduler's next view.
  auto mine = h.get("/api/v1/jobs?owner=ann", ann);
  ASSERT_EQ(mine.body["jobs"].size(), 6u);
  const auto first = mine.body["jobs"][0]["id"].get<std::int64_t>();
  EXPECT_EQ(h.post("/api/v1/jobs/" + std::to_string(first) + "/cancel", json::object(), ann).status,
            200);
  h.sync();
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  EXPECT_EQ(submit(ann).status, 201);
}

// A server with these submission limits, a budget /lab/a, and ann, a member, with a token.
struct AnnsServer {
  explicit AnnsServer(SubmitLimits limits) : h(dir.file("allot.db"), with(limits)) {
    EXPECT_EQ(
        h.post("/api/v1/budgets", {{"path", "/lab/a"}, {"share", 1}, {"members", {"ann"}}}).status,
        200);
    ann = h.token("ann", "user");
  }
  static ApiOptions with(SubmitLimits limits) {
    ApiOptions o;
    o.submit_limits = limits;
    return o;
  }
  TempDir dir;
  Harness h;
  std::string ann;
};

// At the cap, a retry of an accepted submission (same idempotency key: its answer was lost) is
// answered with the job it made, not refused; a new submission is.
TEST(SubmitLimitsApi, ARetryAtTheWaitingCapGetsItsJob) {
  AnnsServer server({0, 1, 1});  // no rate limit; 1 waiting
  auto& h = server.h;
  const auto& ann = server.ann;
  const auto first = raw_request(h.port(), post_request("/api/v1/jobs", ann, job("once").dump()));
  ASSERT_EQ(first.status, 201) << first.head;
  const auto again = raw_request(h.port(), post_request("/api/v1/jobs", ann, job("once").dump()));
  EXPECT_EQ(again.status, 200) << again.head;
  EXPECT_EQ(again.body["id"], first.body["id"]);
  const auto other = raw_request(h.port(), post_request("/api/v1/jobs", ann, job("other").dump()));
  EXPECT_EQ(other.status, 429) << other.head;
  h.sync();
  EXPECT_EQ(h.store().count_jobs(), 1);
}

// Many connections of one user submitting at once, while the scheduler publishes new views:
// exactly the cap is accepted, never one more (the count once lagged by a job accepted while a
// view was being made).
TEST(SubmitLimitsApi, ConcurrentSubmissionsGetExactlyTheWaitingCap) {
  AnnsServer server({0, 1, 25});  // no rate limit; 25 waiting
  auto& h = server.h;
  const auto& ann = server.ann;
  std::atomic<int> accepted{0}, refused{0}, other{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      for (int k = 0; k < 12; ++k) {
        const auto key = "c" + std::to_string(t) + "-" + std::to_string(k);
        const auto r = raw_request(h.port(), post_request("/api/v1/jobs", ann, job(key).dump()));
        (r.status == 201 ? accepted : r.status == 429 ? refused : other)++;
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(accepted.load(), 25);
  EXPECT_EQ(refused.load(), 8 * 12 - 25);
  EXPECT_EQ(other.load(), 0);
  h.sync();
  EXPECT_EQ(h.store().count_jobs(), 25);
}

}  // namespace
}  // namespace allot::server

namespace allot::server {
namespace {

// Administrators raise (or lower) the submission limits per budget: stored, audited, listed, and
// applied to submissions there and below with a bucket of their own; nobody else may set them.
TEST(SubmitLimitsApi, AdministratorsSetThemPerBudget) {
  TempDir dir;
  ApiOptions o;
  o.submit_limits = {1, 2, 3};  // the server's: a burst of 2, one a second, 3 waiting
  Harness h(dir.file("allot.db"), o);
  for (const char* path : {"/lab/a", "/lab/big"}) {
    ASSERT_EQ(
        h.post("/api/v1/budgets", {{"path", path}, {"share", 1}, {"members", {"ann"}}}).status,
        200);
  }
  ASSERT_EQ(h.post("/api/v1/budgets", {{"path", "/lab"}, {"owners", {"mo"}}}).status, 200);
  const auto ann = h.token("ann", "user");
  const auto mo = h.token("mo", "user");
  // As stored: rates and bursts are numbers with fractions, the waiting count a whole one.
  const json raised = {{"rate", 100.0}, {"burst", 50.0}, {"max_waiting", 40}};

  // Not a manager of /lab, not its owner, not a user.
  for (const auto& tok : {ann, mo}) {
    auto r = h.post("/api/v1/budgets", {{"path", "/lab/big"}, {"submit_limits", raised}}, tok);
    EXPECT_EQ(r.status, 403) << r.body.dump();
    EXPECT_EQ(r.body["error"]["field"], "submit_limits");
  }
  for (const json& bad : {json("fast"), json::object(), json({{"rate", -1}}), json({{"burst", 0}}),
                          json({{"max_waiting", 1.5}}), json({{"colour", 1}})}) {
    auto r = h.post("/api/v1/budgets", {{"path", "/lab/big"}, {"submit_limits", bad}});
    EXPECT_EQ(r.status, 400) << bad.dump();
    EXPECT_EQ(r.body["error"]["field"].get<std::string>().rfind("submit_limits", 0), 0u)
        << r.body.dump();
  }
  auto set = h.post("/api/v1/budgets", {{"path", "/lab/big"}, {"submit_limits", raised}});
  ASSERT_EQ(set.status, 200) << set.body.dump();
  EXPECT_EQ(set.body["submit_limits"], raised);
  h.sync();
  bool listed = false;
  const auto budgets = h.get("/api/v1/budgets");
  for (const auto& b : budgets.body["budgets"]) {
    if (b["path"] == "/lab/big") listed = b.value("submit_limits", json()).dump() == raised.dump();
    if (b["path"] == "/lab/a") {
      EXPECT_FALSE(b.contains("submit_limits")) << b.dump();
    }
  }
  EXPECT_TRUE(listed) << budgets.body.dump();
  auto audit = h.get("/api/v1/budgets/audit?path=/lab/big").body["entries"];
  bool audited = false;
  for (const auto& e : audit) {
    if (e["field"] == "submit_limits" && e["new"] == raised.dump() && e["old"] == "" &&
        e["actor"] == "root") {
      audited = true;
    }
  }
  EXPECT_TRUE(audited) << audit.dump();

  int i = 0;
  auto submit = [&](const std::string& budget) {
    return raw_request(
        h.port(), post_request("/api/v1/jobs", ann, job("p" + std::to_string(++i), budget).dump()));
  };
  // The server's limits in /lab/a: two at once.
  EXPECT_EQ(submit("/lab/a").status, 201);
  EXPECT_EQ(submit("/lab/a").status, 201);
  auto r = submit("/lab/a");
  EXPECT_EQ(r.status, 429);
  EXPECT_NE(r.body["error"]["reason"].get<std::string>().find(
                "ann is over the submission rate: 1 a second"),
            std::string::npos)
      << r.body.dump();
  // The budget's own in /lab/big: its own bucket, and 40 waiting.
  for (int k = 0; k < 10; ++k) EXPECT_EQ(submit("/lab/big").status, 201) << k;
  EXPECT_EQ(h.store().count_jobs(), 12);

  // Dropped again (null): the server's limits, in the user's own bucket, which is empty.
  auto cleared = h.post("/api/v1/budgets", {{"path", "/lab/big"}, {"submit_limits", nullptr}});
  ASSERT_EQ(cleared.status, 200);
  EXPECT_FALSE(cleared.body.contains("submit_limits"));
  h.sync();
  r = submit("/lab/big");
  EXPECT_EQ(r.status, 429) << r.body.dump();
}

}  // namespace
}  // namespace allot::server

namespace allot::server {
namespace {

// A budget's own max_waiting counts the user's jobs in that budget (and below); the server's
// max_waiting_total bounds the user's waiting jobs over all budgets whatever a budget allows.
TEST(SubmitLimitsApi, WaitingJobsAreBoundedPerBudgetAndOverAllBudgets) {
  TempDir dir;
  ApiOptions o;
  o.submit_limits = {1000, 1000, 3, 5};  // 3 waiting by default, 5 over all budgets
  Harness h(dir.file("allot.db"), o);
  for (const char* path : {"/lab/a", "/lab/big"}) {
    ASSERT_EQ(
        h.post("/api/v1/budgets", {{"path", path}, {"share", 1}, {"members", {"ann"}}}).status,
        200);
  }
  ASSERT_EQ(
      h.post("/api/v1/budgets", {{"path", "/lab/big"}, {"submit_limits", {{"max_waiting", 40}}}})
          .status,
      200);
  h.sync();
  const auto ann = h.token("ann", "user");
  int i = 0;
  auto submit = [&](const std::string& budget) {
    return raw_request(
        h.port(), post_request("/api/v1/jobs", ann, job("w" + std::to_string(++i), budget).dump()));
  };
  auto reason = [](const RawReply& r) { return r.body["error"].value("reason", ""); };
  // The server's 3 in /lab/a.
  for (int k = 0; k < 3; ++k) ASSERT_EQ(submit("/lab/a").status, 201) << k;
  auto r = submit("/lab/a");
  EXPECT_EQ(r.status, 429) << r.body.dump();
  EXPECT_NE(reason(r).find("ann has 3 jobs waiting, the most allowed"), std::string::npos)
      << r.body.dump();
  // /lab/big allows 40 of its own, but ann has 3 elsewhere: 2 more make the 5 over all budgets.
  EXPECT_EQ(submit("/lab/big").status, 201);
  EXPECT_EQ(submit("/lab/big").status, 201);
  r = submit("/lab/big");
  EXPECT_EQ(r.status, 429) << r.body.dump();
  EXPECT_NE(r.head.find("Retry-After: "), std::string::npos) << r.head;
  EXPECT_NE(reason(r).find("ann has 5 jobs waiting over all budgets"), std::string::npos)
      << r.body.dump();
  EXPECT_EQ(h.store().count_jobs(), 5) << "refusals left no job";
  // The same after the scheduler's next view counts them itself.
  h.sync();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(submit("/lab/big").status, 429);
  // A cancelled job in /lab/a makes room over all budgets, which /lab/big may take.
  auto mine = h.get("/api/v1/jobs?owner=ann", ann);
  ASSERT_EQ(mine.body["jobs"].size(), 5u);
  std::int64_t in_a = 0;
  for (const auto& j : mine.body["jobs"]) {
    if (j["budget"] == "/lab/a") in_a = j["id"].get<std::int64_t>();
  }
  ASSERT_EQ(h.post("/api/v1/jobs/" + std::to_string(in_a) + "/cancel", json::object(), ann).status,
            200);
  h.sync();
  EXPECT_EQ(submit("/lab/big").status, 201);
  EXPECT_EQ(h.store().count_jobs(), 6);
}

}  // namespace
}  // namespace allot::server

namespace allot::server {
namespace {

TEST(AcceptEncoding, BrotliIsDroppedOtherCodingsKept) {
  EXPECT_EQ(without_brotli("gzip, deflate, br"), "gzip, deflate");
  EXPECT_EQ(without_brotli("br;q=1.0, gzip;q=0.8"), "gzip;q=0.8");
  EXPECT_EQ(without_brotli("br"), "");
  EXPECT_EQ(without_brotli("gzip, deflate, br, zstd"), "gzip, deflate, zstd");
  EXPECT_EQ(without_brotli("brotli-ish"), "brotli-ish");  // not the token "br"
  EXPECT_EQ(without_brotli(""), "");
}

TEST_F(Edge, BrowsersGetGzipNeverBrotli) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(h->post("/api/v1/jobs", job("k" + std::to_string(i))).status, 201);
  }
  auto r = raw_request(
      h->port(), get_request("/api/v1/jobs", h->admin(), "Accept-Encoding: gzip, deflate, br\r\n"));
  ASSERT_EQ(r.status, 200) << r.head;
  EXPECT_EQ(r.head.find("Content-Encoding: br"), std::string::npos) << r.head;
  EXPECT_NE(r.head.find("Content-Encoding: gzip"), std::string::npos) << r.head;
  // Only Brotli offered: the answer is not compressed.
  auto plain =
      raw_request(h->port(), get_request("/api/v1/jobs", h->admin(), "Accept-Encoding: br\r\n"));
  ASSERT_EQ(plain.status, 200) << plain.head;
  EXPECT_EQ(plain.head.find("Content-Encoding"), std::string::npos) << plain.head;
  EXPECT_EQ(plain.body["jobs"].size(), 3u);
}

}  // namespace
}  // namespace allot::server
