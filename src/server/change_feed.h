// What changed, pushed to the dashboard as it happens (GET /api/v1/events/stream, server-sent
// events) so that a page reads again only what changed instead of polling. The scheduling loop
// tells it what each durable batch touched (jobs, nodes, budgets), and the API each submission
// once written; it sends each open stream one small "changed" message per change naming those
// topics. The message names no job, node or
// budget: it only says which kind of thing to read again, through the API and its permissions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/event_server.h"
#include "server/observer.h"

namespace allot::server {

struct ChangeFeedLimits {
  std::size_t per_token = 8;           // open streams one token may hold (tabs, reloads)
  std::size_t per_address = 32;        // and one client address
  std::size_t total = 1024;            // and the whole server
  int heartbeat_seconds = 15;          // an SSE comment after this long with nothing sent
  std::size_t max_pending = 16 << 10;  // bytes a slow reader may have waiting
};

class ChangeFeed : public ControllerObserver {
 public:
  enum Topic : unsigned { kJobs = 1, kNodes = 2, kBudgets = 4, kAll = 7 };

  explicit ChangeFeed(ChangeFeedLimits limits = {}) : limits_(limits) {}

  void committing(const store::WriteBatch& batch) override;
  void committed(double seconds) override;

  // Takes a place for a new stream of `token` (its id) from `address`; "" when taken, else why
  // not (the limit reached). Give it back with release() (the stream's on_end does).
  std::string reserve(std::int64_t token, const std::string& address);
  void release(std::int64_t token, const std::string& address);
  // The options for a stream reserve() let in: its heartbeat, bounds, and its release.
  StreamOptions stream_options(std::int64_t token, const std::string& address);
  // Starts sending `stream` what changes (its first message says everything changed: the page
  // reads afresh what it may have missed while connecting).
  void add(std::shared_ptr<Stream> stream);

  // Sends every stream a message naming `topics` (Topic bits).
  void publish(unsigned topics);
  std::size_t open_streams() const;
  const ChangeFeedLimits& limits() const { return limits_; }

  // The SSE message for `topics` (`seq`: this feed's count of messages).
  static std::string message(unsigned topics, std::uint64_t seq);

 private:
  ChangeFeedLimits limits_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Stream>> streams_;    // guarded by mu_
  std::map<std::int64_t, std::size_t> per_token_;   // guarded by mu_
  std::map<std::string, std::size_t> per_address_;  // guarded by mu_
  std::size_t reserved_ = 0;                        // guarded by mu_
  std::uint64_t seq_ = 0;                           // guarded by mu_
  unsigned held_ = 0;  // topics of the batch being committed (the loop's thread only)
};

}  // namespace allot::server
