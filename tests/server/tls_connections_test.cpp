// Open connections per address on the HTTPS server (server/tls_connections.h): a real server on
// loopback with TLS and clients that keep their connections open.
#include "server/tls_connections.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "harness.h"

namespace allot::server {
namespace {

using testing::Harness;
using testing::TempDir;

TEST(TlsConnections, OneAddressHasAtMostItsLimitOfConnectionsOpen) {
  TempDir dir;
  const auto cert = dir.file("cert.pem"), key = dir.file("key.pem");
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key + " -out " +
                          cert + " -days 1 -subj /CN=127.0.0.1 >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  ApiOptions o;
  o.tls_cert = cert;
  o.tls_key = key;
  o.max_connections_per_address = 3;
  Harness h(dir.file("a.db"), o);
  auto client = [&] {
    auto c = std::make_unique<httplib::SSLClient>("127.0.0.1", h.port());
    c->enable_server_certificate_verification(false);
    c->set_keep_alive(true);  // the connection stays open after each answer
    return c;
  };
  std::vector<std::unique_ptr<httplib::SSLClient>> open;
  for (int i = 0; i < 3; ++i) {
    open.push_back(client());
    auto r = Harness::send(*open.back(), "GET", "/api/v1/whoami", "", h.admin());
    ASSERT_EQ(r.status, 200) << i << " " << r.body.dump();
  }
  // A fourth, and a fifth, from the same address while those stay open: refused.
  for (int i = 0; i < 2; ++i) {
    auto extra = client();
    auto r = Harness::send(*extra, "GET", "/api/v1/whoami", "", h.admin());
    EXPECT_EQ(r.status, 429) << r.body.dump();
    EXPECT_EQ(r.body["error"]["field"], "connection") << r.body.dump();
    EXPECT_NE(r.body["error"]["reason"].get<std::string>().find("at most 3"), std::string::npos);
  }
  // The open ones are still served on their connections.
  for (auto& c : open) EXPECT_EQ(Harness::send(*c, "GET", "/api/v1/health", "", "-").status, 200);
  // Once one closes, the address is served again.
  open.front()->stop();
  open.erase(open.begin());
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    auto again = client();
    served = Harness::send(*again, "GET", "/api/v1/health", "", "-").status == 200;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(served);
}

TEST(TlsConnections, AThreadServingNoConnectionIsNotCounted) {
  TlsConnections t(1);
  EXPECT_TRUE(t.admit("10.0.0.1"));
  EXPECT_TRUE(t.admit("10.0.0.1"));
  EXPECT_EQ(t.open_from("10.0.0.1"), 0u);
}

}  // namespace
}  // namespace allot::server
