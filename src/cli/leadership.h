// `allot server --store postgres://...` with other servers on the same database (docs/store.md,
// "High availability"; docs/design/0009-leader-lease.md): the server stands by, answering as a
// standby (server/standby.h), until it takes the leader lease; then it keeps the lease, renewing
// it every second. A leader that finds its lease taken by another server, or that cannot renew it
// before it would expire, says so on stderr and exits with status 3 at once (its store's writes
// are fenced meanwhile): restarted (systemd's Restart=always), it stands by.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace allot::cli {

struct LeadershipOptions {
  std::string uri;  // the PostgreSQL database
  std::string host;
  int port = 0;
  std::string tls_cert, tls_key;
  std::string advertise;  // the URL clients reach this server at ("": scheme://host:port)
  std::chrono::milliseconds expiry{5000};
  std::chrono::milliseconds renew_every{1000};
  std::chrono::milliseconds poll_every{500};  // a standby's look at the lease
};

class Leadership {
 public:
  // Stands by on host:port until the lease is taken (then the listener is closed and the lease
  // renewed from here on) or one of `signals` comes (nullptr; `sig` says which). `port` out: the
  // port bound, for the API to take over.
  static core::Result<std::unique_ptr<Leadership>> stand_by(const LeadershipOptions& o,
                                                            const sigset_t& signals, int& sig,
                                                            int& port);
  ~Leadership();
  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  std::int64_t epoch() const;
  const std::string& address() const;
  // A clean stop: lets the lease expire now, so that a standby takes over at once.
  void release();

 private:
  struct Impl;
  explicit Leadership(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace allot::cli
