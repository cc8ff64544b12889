// What a standby server answers (docs/store.md, "High availability"): while another server holds
// the leader lease, GET /api/v1/health says {"status": "ok", "role": "standby", "leader": URL},
// and every other request gets 503 with the leader's address in the JSON body's "leader" field
// (and the usual {"error": {"field": "leader", "reason": ...}}), for clients to follow.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace allot::server {

// The exit status of a leader that learns another server took its lease (the lease watcher in
// cli/leadership.cpp, or a store write refused by the fence in the controller): its supervisor
// restarts it, and it stands by.
inline constexpr int kDeposedExit = 3;

class StandbyListener {
 public:
  // HTTPS when given a certificate and key, as the API would be.
  StandbyListener(std::string tls_cert, std::string tls_key);
  ~StandbyListener();
  StandbyListener(const StandbyListener&) = delete;
  StandbyListener& operator=(const StandbyListener&) = delete;

  // Binds (connections wait in the backlog until serve()); the bound port (0: any free one).
  core::Result<int> start(const std::string& host, int port);
  // Serves on a background thread, once the leader is known (set_leader).
  void serve();
  // The leader to name ("" while none holds the lease).
  void set_leader(const std::string& address, std::int64_t epoch);
  // Stops serving and closes the port (the API then binds it).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace allot::server
