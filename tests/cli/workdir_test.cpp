// `allot submit` refuses a working directory the job could never start in, before sending it.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_server.h"

namespace {

using cli_testing::Cli;
using json = nlohmann::json;

TEST_F(Cli, SubmitRefusesAMissingOrNonDirectoryWorkdir) {
  ASSERT_EQ(allot({"budget", "create", "/lab/wd", "--share", "1"}).code, 0);
  const auto jobs_before = [] {
    return json::parse(allot({"ls", "--all", "--budget", "/lab/wd", "--json"}).out).size();
  };
  const std::string missing = dir_ + "/no/such/dir";
  auto m = allot({"submit", "--budget", "/lab/wd", "--workdir", missing, "--", "true"});
  EXPECT_EQ(m.code, 2) << m.out;
  EXPECT_NE(m.err.find("--workdir: " + missing + ": no such directory"), std::string::npos)
      << m.err;
  const auto a_file = file("not-a-dir", "x");
  auto f = allot({"submit", "--budget", "/lab/wd", "--workdir", a_file, "--", "true"});
  EXPECT_EQ(f.code, 2) << f.out;
  EXPECT_NE(f.err.find("--workdir: " + a_file + ": not a directory"), std::string::npos) << f.err;
  // From a YAML spec too.
  const auto yaml = file("wd.yaml", "budget: /lab/wd\nworkdir: " + missing + "\n");
  auto y = allot({"submit", yaml});
  EXPECT_EQ(y.code, 2) << y.out;
  EXPECT_NE(y.err.find(yaml + ": workdir: " + missing + ": no such directory"), std::string::npos)
      << y.err;
  EXPECT_EQ(jobs_before(), 0u) << "nothing was sent";

  // A relative one is taken from the submit directory (the test's working directory).
  const auto here = std::filesystem::current_path();
  std::filesystem::create_directories(here / "allot-wd-test");
  auto r =
      allot({"submit", "--budget", "/lab/wd", "--workdir", "./allot-wd-test", "--hold", "--json"});
  std::filesystem::remove_all(here / "allot-wd-test");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["spec"]["workdir"], (here / "allot-wd-test").string());

  // The server refuses a relative workdir sent by any other client.
  httplib::Client http("127.0.0.1", port());
  const json body = {{"idempotency_key", "wd-rel"},
                     {"budget", "/lab/wd"},
                     {"workdir", "relative/dir"},
                     {"command", {"true"}}};
  auto res = http.Post("/api/v1/jobs", bearer(admin_), body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  EXPECT_NE(res->body.find("workdir"), std::string::npos) << res->body;
}

}  // namespace
