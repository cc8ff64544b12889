// docs/openapi.yaml documents exactly the routes the server serves: every (method, path) in
// ApiServer::routes() is in the file and nothing else is, so a route added without documentation
// (or documentation left for a removed route) fails here.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <iterator>
#include <set>
#include <string>
#include <utility>

#include "server/api.h"

namespace allot::server {
namespace {

using Pair = std::pair<std::string, std::string>;

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

// Path parameters as "{}" whatever they are called ("{id}", "{name}", ":id").
std::string normalise(const std::string& path) {
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '{') {
      auto end = path.find('}', i);
      if (end == std::string::npos) return path;
      out += "{}";
      i = end;
    } else if (path[i] == ':' && (i == 0 || path[i - 1] == '/')) {
      auto end = path.find('/', i);
      out += "{}";
      if (end == std::string::npos) break;
      i = end - 1;
    } else {
      out += path[i];
    }
  }
  return out;
}

std::string show(const std::set<Pair>& s) {
  std::string out;
  for (const auto& [m, p] : s) out += "  " + m + " " + p + "\n";
  return out;
}

TEST(OpenApi, DocumentsExactlyTheServedRoutes) {
  const std::string file = std::string(ALLOT_SOURCE_DIR) + "/docs/openapi.yaml";
  YAML::Node doc;
  ASSERT_NO_THROW(doc = YAML::LoadFile(file)) << file;
  ASSERT_TRUE(doc["openapi"]) << "not an OpenAPI document";
  EXPECT_EQ(doc["openapi"].as<std::string>().rfind("3.", 0), 0u);
  const auto paths = doc["paths"];
  ASSERT_TRUE(paths && paths.IsMap());

  static const std::set<std::string> methods = {"GET",  "PUT",     "POST",  "DELETE",
                                                "HEAD", "OPTIONS", "PATCH", "TRACE"};
  std::set<Pair> documented;
  for (const auto& p : paths) {
    const auto path = p.first.as<std::string>();
    ASSERT_TRUE(p.second.IsMap()) << path;
    for (const auto& op : p.second) {
      const auto m = upper(op.first.as<std::string>());
      if (!methods.count(m)) continue;  // "parameters", "summary", ...
      EXPECT_TRUE(op.second["summary"]) << m << " " << path << " has no summary";
      EXPECT_TRUE(op.second["responses"]) << m << " " << path << " has no responses";
      EXPECT_TRUE(documented.insert({m, normalise(path)}).second) << m << " " << path;
    }
  }

  std::set<Pair> served;
  for (const auto& r : ApiServer::routes()) {
    EXPECT_TRUE(served.insert({upper(r.method), normalise(r.path)}).second)
        << "routes() lists " << r.method << " " << r.path << " twice";
  }
  ASSERT_FALSE(served.empty());

  std::set<Pair> undocumented;
  std::set<Pair> not_served;
  std::set_difference(served.begin(), served.end(), documented.begin(), documented.end(),
                      std::inserter(undocumented, undocumented.end()));
  std::set_difference(documented.begin(), documented.end(), served.begin(), served.end(),
                      std::inserter(not_served, not_served.end()));
  EXPECT_TRUE(undocumented.empty()) << "served but not in docs/openapi.yaml:\n"
                                    << show(undocumented);
  EXPECT_TRUE(not_served.empty()) << "in docs/openapi.yaml but not served:\n" << show(not_served);
}

TEST(OpenApi, NormalisesParameterSyntax) {
  EXPECT_EQ(normalise("/api/v1/jobs/{id}/cancel"), "/api/v1/jobs/{}/cancel");
  EXPECT_EQ(normalise("/api/v1/jobs/:id/cancel"), "/api/v1/jobs/{}/cancel");
  EXPECT_EQ(normalise("/api/v1/nodes/:name"), "/api/v1/nodes/{}");
  EXPECT_EQ(normalise("/api/v1/health"), "/api/v1/health");
}

}  // namespace
}  // namespace allot::server
