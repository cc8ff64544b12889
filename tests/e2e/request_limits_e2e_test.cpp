// Request rate limits on every route (issue 12, docs/security.md "The API's edge"): a real
// `allot server` with small limits, and clients on loopback. A user over its rate is answered
// 429 with Retry-After on any route, /usage costs more than a plain read, requests without a
// valid token are limited per address, administrators are not limited, and a user is served
// again once its bucket refills.
#include <gtest/gtest.h>

#include "test_cluster.h"

namespace allot::e2e {
namespace {

struct Got {
  int status = 0;
  std::string retry_after;
  json body;
};

Got get_as(const Cluster& c, const std::string& token, const std::string& path) {
  httplib::Client http("127.0.0.1", c.port());
  http.set_read_timeout(10);
  auto r = http.Get(path.c_str(), {{"Authorization", "Bearer " + token}});
  Got g;
  if (!r) return g;
  g.status = r->status;
  g.retry_after = r->get_header_value("Retry-After");
  g.body = json::parse(r->body, nullptr, false);
  return g;
}

std::string reason(const Got& g) {
  return g.body.is_object() && g.body.contains("error") ? g.body["error"].value("reason", "")
                                                        : g.body.dump();
}

class RequestLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    c.start_server();
    ASSERT_EQ(c.post("/api/v1/budgets",
                     {{"path", "/lab"}, {"share", 1}, {"members", {"admin", "ann", "bob"}}})
                  .status,
              200);
    for (auto* who : {&ann, &bob}) {
      const std::string name = who == &ann ? "ann" : "bob";
      auto t = c.post("/api/v1/tokens", {{"name", name}, {"role", "user"}});
      ASSERT_EQ(t.status, 201) << t.raw;
      *who = t.body["token"].get<std::string>();
    }
  }

  // A burst of 10 and one a second per user; 5 and one a second per address without a token.
  TestCluster c{{"--request-rate", "1", "--request-burst", "10", "--unauthenticated-rate", "1",
                 "--unauthenticated-burst", "5"}};
  std::string ann, bob;
};

TEST_F(RequestLimits, AUserOverItsRateIsAnswered429OnEveryRouteAndServedAgainLater) {
  int ok = 0;
  Got refused;
  for (int i = 0; i < 14; ++i) {
    auto g = get_as(c, ann, i % 2 ? "/api/v1/jobs" : "/api/v1/whoami");
    if (g.status == 200) {
      ++ok;
    } else {
      refused = g;
      break;
    }
  }
  // The burst of 10, and at most one more refilled while they were asked.
  EXPECT_GE(ok, 10);
  EXPECT_LE(ok, 11);
  ASSERT_EQ(refused.status, 429) << refused.body.dump();
  EXPECT_GE(std::atoi(refused.retry_after.c_str()), 1) << "Retry-After: " << refused.retry_after;
  EXPECT_NE(reason(refused).find("ann is over the request rate"), std::string::npos)
      << reason(refused);
  // Other routes too, and writes: the bucket is the user's, not the route's.
  EXPECT_EQ(get_as(c, ann, "/api/v1/budgets").status, 429);
  // Another user and the administrator are served meanwhile.
  EXPECT_EQ(get_as(c, bob, "/api/v1/whoami").status, 200);
  for (int i = 0; i < 30; ++i) ASSERT_EQ(c.get("/api/v1/jobs").status, 200) << "admin, " << i;
  // Once Retry-After has passed, ann is served again.
  std::this_thread::sleep_for(std::chrono::seconds(std::atoi(refused.retry_after.c_str())) + 200ms);
  EXPECT_EQ(get_as(c, ann, "/api/v1/whoami").status, 200);
}

TEST_F(RequestLimits, UsageAndReportCostMoreThanAPlainRead) {
  // /usage takes 10 of bob's burst of 10 at once: the next read is refused.
  auto usage = get_as(c, bob, "/api/v1/usage?budget=/lab");
  ASSERT_EQ(usage.status, 200) << usage.body.dump();
  auto next = get_as(c, bob, "/api/v1/whoami");
  EXPECT_EQ(next.status, 429) << next.body.dump();
  auto report = get_as(c, bob, "/api/v1/report?budget=/lab");
  ASSERT_EQ(report.status, 429) << report.body.dump();
  EXPECT_NE(reason(report).find("this route costs 10"), std::string::npos) << reason(report);
  EXPECT_GE(std::atoi(report.retry_after.c_str()), 9) << "ten tokens at one a second";
}

TEST_F(RequestLimits, RequestsWithoutAValidTokenAreLimitedPerAddress) {
  int unauthorized = 0;
  Got refused;
  for (int i = 0; i < 10; ++i) {
    auto g = get_as(c, "not-a-token-" + std::to_string(i), "/api/v1/jobs");
    if (g.status == 401) {
      ++unauthorized;
    } else {
      refused = g;
      break;
    }
  }
  EXPECT_GE(unauthorized, 5);
  EXPECT_LE(unauthorized, 6);
  ASSERT_EQ(refused.status, 429) << refused.body.dump();
  EXPECT_FALSE(refused.retry_after.empty());
  EXPECT_NE(reason(refused).find("without a valid token"), std::string::npos) << reason(refused);
  // Holders of valid tokens from the same address are not held back by it.
  EXPECT_EQ(get_as(c, ann, "/api/v1/whoami").status, 200);
  EXPECT_EQ(c.get("/api/v1/health").status, 200);
}

}  // namespace
}  // namespace allot::e2e
