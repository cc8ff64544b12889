// A submit storm for crash tests: client threads post jobs to a server that a test kills and
// restarts under them. Each client retries the same idempotency key until it is acknowledged
// (201 or 200), then moves to the next one, so that afterwards `acked()` lists every job the
// server promised to keep (key -> id), to be looked for in the store. Used by
// tests/cli/crash_test.cpp (SQLite) and tests/e2e/postgres_e2e_test.cpp (PostgreSQL).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace allot::e2e {

class SubmitStorm {
 public:
  struct Options {
    int clients = 4;
    int jobs_per_client = INT_MAX;       // a client stops once this many are acknowledged
    std::chrono::milliseconds pause{0};  // after each acknowledged job
  };
  // `port` is asked before each request (a restarted server may listen elsewhere); `body` makes
  // a job's request for a key (the storm adds the key itself).
  SubmitStorm(std::function<int()> port, const std::string& token,
              std::function<nlohmann::json(const std::string& key)> body, Options opts)
      : port_(std::move(port)), body_(std::move(body)) {
    auth_ = {{"Authorization", "Bearer " + token}};
    for (int t = 0; t < opts.clients; ++t) {
      clients_.emplace_back([this, t, opts] { client(t, opts); });
    }
  }
  SubmitStorm(const SubmitStorm&) = delete;
  SubmitStorm& operator=(const SubmitStorm&) = delete;
  ~SubmitStorm() { stop(); }

  // Stops the clients and waits for them (an unacknowledged try in flight is dropped).
  void stop() {
    stop_ = true;
    for (auto& c : clients_) {
      if (c.joinable()) c.join();
    }
  }
  std::map<std::string, std::uint64_t> acked() const {
    std::lock_guard lk(mu_);
    return acked_;
  }
  std::size_t count() const {
    std::lock_guard lk(mu_);
    return acked_.size();
  }

 private:
  void client(int t, const Options& opts) {
    int i = 0;
    std::string key;
    while (!stop_) {
      if (key.empty()) {
        if (i == opts.jobs_per_client) break;
        key = "t" + std::to_string(t) + "-" + std::to_string(i++);
      }
      auto body = body_(key);
      body["idempotency_key"] = key;
      httplib::Client c("127.0.0.1", port_());
      c.set_connection_timeout(0, 200000);
      auto r = c.Post("/api/v1/jobs", auth_, body.dump(), "application/json");
      if (r && (r->status == 201 || r->status == 200)) {
        const auto id = nlohmann::json::parse(r->body)["id"].get<std::uint64_t>();
        {
          std::lock_guard lk(mu_);
          auto [it, fresh] = acked_.emplace(key, id);
          // The same key answered twice must name the same job.
          if (!fresh) {
            EXPECT_EQ(it->second, id) << key;
          }
        }
        key.clear();  // acknowledged: the next job; otherwise the same key again
        std::this_thread::sleep_for(opts.pause);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }

  std::function<int()> port_;
  std::function<nlohmann::json(const std::string&)> body_;
  httplib::Headers auth_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::map<std::string, std::uint64_t> acked_;
  std::vector<std::thread> clients_;
};

}  // namespace allot::e2e
