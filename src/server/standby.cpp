#include "server/standby.h"

#include <httplib.h>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

namespace allot::server {

using json = nlohmann::json;

struct StandbyListener::Impl {
  std::string cert, key;
  std::unique_ptr<httplib::Server> svr;
  std::thread thread;
  std::mutex mu;
  std::string leader;
  std::int64_t epoch = 0;

  json state() {
    std::lock_guard lk(mu);
    return {{"status", "ok"}, {"role", "standby"}, {"leader", leader}, {"epoch", epoch}};
  }
  void refuse(httplib::Response& res) {
    auto j = state();
    const auto leader = j["leader"].get<std::string>();
    j["error"] = {
        {"field", "leader"},
        {"reason", leader.empty()
                       ? "this server is a standby and no server is the leader now: "
                         "try again in a few seconds"
                       : "this server is a standby: send requests to the leader at " + leader}};
    j.erase("status");
    res.status = 503;
    res.set_header("Retry-After", "1");
    res.set_content(j.dump(), "application/json");
  }
};

StandbyListener::StandbyListener(std::string tls_cert, std::string tls_key)
    : impl_(std::make_unique<Impl>()) {
  impl_->cert = std::move(tls_cert);
  impl_->key = std::move(tls_key);
}

StandbyListener::~StandbyListener() {
  stop();
}

core::Result<int> StandbyListener::start(const std::string& host, int port) {
  auto& m = *impl_;
  if (!m.cert.empty() || !m.key.empty()) {
    auto s = std::make_unique<httplib::SSLServer>(m.cert.c_str(), m.key.c_str());
    if (!s->is_valid()) return core::Error{"tls", "cannot load the certificate or key"};
    m.svr = std::move(s);
  } else {
    m.svr = std::make_unique<httplib::Server>();
  }
  // SO_REUSEADDR only (cpp-httplib's default adds SO_REUSEPORT, with which two processes could
  // listen on one port): binding fails while another server, the leader before, still listens.
  m.svr->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  m.svr->set_keep_alive_max_count(1);  // a client's next request may find the leader here
  m.svr->set_payload_max_length(1 << 20);
  m.svr->Get("/api/v1/health", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(impl_->state().dump(), "application/json");
  });
  auto refuse = [this](const httplib::Request&, httplib::Response& res) { impl_->refuse(res); };
  m.svr->Get(".*", refuse);
  m.svr->Post(".*", refuse);
  m.svr->Put(".*", refuse);
  m.svr->Patch(".*", refuse);
  m.svr->Delete(".*", refuse);
  int bound = -1;
  if (port == 0) {
    bound = m.svr->bind_to_any_port(host);
  } else if (m.svr->bind_to_port(host, port)) {
    bound = port;
  }
  if (bound < 0) {
    m.svr.reset();
    return core::Error{"listen", "cannot listen on " + host + ":" + std::to_string(port)};
  }
  return bound;
}

void StandbyListener::serve() {
  auto& m = *impl_;
  if (m.svr && !m.thread.joinable()) m.thread = std::thread([&m] { m.svr->listen_after_bind(); });
}

void StandbyListener::set_leader(const std::string& address, std::int64_t epoch) {
  std::lock_guard lk(impl_->mu);
  impl_->leader = address;
  impl_->epoch = epoch;
}

void StandbyListener::stop() {
  auto& m = *impl_;
  if (!m.svr) return;
  // cpp-httplib closes the bound socket only once it listens: serve first if it never did.
  serve();
  while (!m.svr->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  m.svr->stop();
  if (m.thread.joinable()) m.thread.join();
  m.svr.reset();
}

}  // namespace allot::server
