#include "agent/server_client.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

namespace allot::agent {

using json = nlohmann::json;

struct ServerClient::Impl {
  ServerAddress addr;
  std::vector<std::string> urls;  // addr.url split at commas: the servers, one the leader
  std::size_t current = 0;
  std::chrono::seconds read_timeout{5};
  std::atomic<bool> cancelled{false};
  std::mutex mu;  // guards cli's replacement against cancel() from another thread
  std::unique_ptr<httplib::Client> cli;
  std::chrono::steady_clock::time_point last_answer{};

  // Over HTTPS the client cannot tell that the server closed an idle connection (the TLS close
  // alert reads as data to cpp-httplib's liveness check), and a request sent on it fails. So an
  // https connection idle longer than this goes, and the request takes a fresh one: the server
  // closes idle ones after 5 s (docs/api.md), and the heartbeat comes every 5 s.
  static constexpr std::chrono::seconds kTlsIdle{2};

  httplib::Client& client() {
    std::lock_guard lk(mu);
    if (cli && urls[current].rfind("https://", 0) == 0 &&
        std::chrono::steady_clock::now() - last_answer > kTlsIdle) {
      cli.reset();
    }
    if (!cli) {
      cli = std::make_unique<httplib::Client>(urls[current]);
      cli->set_connection_timeout(2);
      cli->set_read_timeout(read_timeout.count());
      cli->set_write_timeout(5);
      cli->set_keep_alive(true);
      // Without it a POST on a kept-alive connection waits ~40 ms: the body's segment is held by
      // Nagle's algorithm until the server's delayed ACK of the headers (docs/agent-protocol.md).
      cli->set_tcp_nodelay(true);
      if (!addr.cacert.empty()) cli->set_ca_cert_path(addr.cacert);
      if (addr.insecure) cli->enable_server_certificate_verification(false);
      cli->set_default_headers({{"Authorization", "Bearer " + addr.token}});
    }
    return *cli;
  }

  // The next server of the list, for the next request.
  void next_server() {
    reset();
    current = (current + 1) % urls.size();
  }
  // A standby's 503 names the leader: the next request goes there (added to the list if new).
  bool follow_leader(const Reply& out) {
    if (out.status != 503 || !out.body.is_object() || !out.body.contains("leader") ||
        !out.body["leader"].is_string()) {
      return false;
    }
    const auto leader = out.body["leader"].get<std::string>();
    reset();
    if (leader.empty() || urls.size() >= 64) {
      current = (current + 1) % urls.size();  // no leader now: try another in turn
      return false;
    }
    auto it = std::find(urls.begin(), urls.end(), leader);
    if (it == urls.end()) it = urls.insert(urls.end(), leader);
    current = static_cast<std::size_t>(it - urls.begin());
    return true;
  }

  void reset() {
    std::lock_guard lk(mu);
    cli.reset();
  }

  template <typename Send>
  Reply call(Send send) {
    if (cancelled) return Reply{0, {}, "cancelled"};
    Reply out = finish(send(client()));
    // A standby did not act on the request: send it to the leader it named, once.
    if (follow_leader(out)) out = finish(send(client()));
    last_answer = std::chrono::steady_clock::now();
    return out;
  }

  Reply finish(const httplib::Result& r) {
    Reply out;
    if (!r) {
      out.error = httplib::to_string(r.error());
      if (urls.size() > 1) out.error += " at " + urls[current];
      next_server();  // a fresh connection next time, to the next server of the list
      return out;
    }
    out.status = r->status;
    if (!r->body.empty()) {
      out.body = json::parse(r->body, nullptr, false);
      if (out.body.is_discarded()) out.body = json();
    }
    if (!out.ok()) {
      // The server's errors are {"error": {"field", "reason"}}; a proxy in between may answer
      // anything else, which must not end the agent.
      const json* e =
          out.body.is_object() && out.body.contains("error") ? &out.body["error"] : nullptr;
      auto text = [&](const char* key) {
        auto it = e->find(key);
        return it != e->end() && it->is_string() ? it->get<std::string>() : std::string();
      };
      if (e && e->is_object()) {
        out.error = text("field") + ": " + text("reason");
      } else if (e && e->is_string()) {
        out.error = "HTTP " + std::to_string(r->status) + ": " + e->get<std::string>();
      } else {
        out.error = "HTTP " + std::to_string(r->status);
      }
    }
    return out;
  }
};

ServerClient::ServerClient(ServerAddress addr) : impl_(std::make_unique<Impl>()) {
  impl_->addr = std::move(addr);
  impl_->urls = split_servers(impl_->addr.url);
  if (impl_->urls.empty()) impl_->urls.push_back(impl_->addr.url);
}

ServerClient::~ServerClient() = default;

Reply ServerClient::get(const std::string& path) {
  return impl_->call([&](httplib::Client& c) { return c.Get(path); });
}

Reply ServerClient::post(const std::string& path, const json& body) {
  const auto text = body.dump();
  return impl_->call([&](httplib::Client& c) { return c.Post(path, text, "application/json"); });
}

Reply ServerClient::post_bytes(const std::string& path, const std::string& bytes) {
  return impl_->call(
      [&](httplib::Client& c) { return c.Post(path, bytes, "application/octet-stream"); });
}

void ServerClient::set_read_timeout(std::chrono::seconds timeout) {
  impl_->read_timeout = timeout;
  impl_->reset();
}

void ServerClient::cancel(bool for_good) {
  if (for_good) impl_->cancelled = true;
  std::lock_guard lk(impl_->mu);
  if (impl_->cli) impl_->cli->stop();
}

std::vector<std::string> split_servers(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    auto comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string one = list.substr(start, comma - start);
    one.erase(0, one.find_first_not_of(" \t"));
    one.erase(one.find_last_not_of(" \t") + 1);
    if (!one.empty()) {
      if (one.find("://") == std::string::npos) one = "http://" + one;
      while (one.size() > 8 && one.back() == '/') one.pop_back();
      out.push_back(one);
    }
    start = comma + 1;
  }
  return out;
}

std::string node_path(const std::string& prefix, const std::string& node,
                      const std::string& suffix) {
  // Node names are [A-Za-z0-9._@-]: nothing to escape but '@'.
  std::string escaped;
  for (char c : node) escaped += c == '@' ? std::string("%40") : std::string(1, c);
  return prefix + escaped + suffix;
}

}  // namespace allot::agent
