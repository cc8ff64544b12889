// The agent's HTTP calls to the server (docs/agent-protocol.md), on one keep-alive connection.
// cpp-httplib stays inside server_client.cpp. Not thread-safe: one thread uses it (the agent's
// loop, or its assignment watcher), and only cancel() may come from another.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace allot::agent {

struct Reply {     // NOLINT(bugprone-exception-escape): misreads nlohmann::json's noexcept move
  int status = 0;  // 0: no answer (unreachable, timed out)
  nlohmann::json body;
  std::string error;  // transport error, or the server's error reason
  bool ok() const { return status >= 200 && status < 300; }
};

struct ServerAddress {
  // http://host:port or https://host:port, or several separated by commas: the servers sharing
  // one PostgreSQL database, tried in turn until the leader answers; a standby's 503 names it.
  std::string url;
  std::string token;
  std::string cacert;     // PEM file to verify the server with (https)
  bool insecure = false;  // https without verifying the certificate
};

class ServerClient {
 public:
  explicit ServerClient(ServerAddress addr);
  ~ServerClient();
  ServerClient(const ServerClient&) = delete;
  ServerClient& operator=(const ServerClient&) = delete;

  Reply get(const std::string& path);
  Reply post(const std::string& path, const nlohmann::json& body);
  // Raw bytes (logs).
  Reply post_bytes(const std::string& path, const std::string& bytes);
  // How long a reply may take (default 5 s): a watch the server holds takes longer.
  void set_read_timeout(std::chrono::seconds timeout);
  // From any thread: ends the call in progress (it fails, status 0) and, for_good, every later
  // one.
  void cancel(bool for_good = true);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "a,b" -> {"http://a", "http://b"}: a list of server addresses, each given a scheme if it has none
// and stripped of blanks and trailing slashes.
std::vector<std::string> split_servers(const std::string& list);

// "/api/v1/agent/nodes/n01/assignments" with the node name escaped.
std::string node_path(const std::string& prefix, const std::string& node,
                      const std::string& suffix);

}  // namespace allot::agent
