// The agent's watch on its node's assignments (docs/agent-protocol.md, "Watching"): on its own
// connection and thread, GET .../assignments?wait=S&since=VERSION, which the server holds until
// the node's assignments change or the wait ends; each answer is handed to the agent's loop at
// once (it wakes), so a job starts within milliseconds of being placed instead of at the next
// poll. Heartbeats, reports and telemetry stay on the loop's connection and timers: a held
// request delays none of them.
//
// While the watch is live the loop does not poll. It is not live until the server holds it and
// after any failure, and then the loop polls as before: a server without watches (an older one:
// 400 for the unknown query; HTTPS: answered at once, "watch": false) is polled, and the watch is
// tried again a minute later; a full server (429) half a minute later; an unreachable one or a
// standby without a leader a second later.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "agent/server_client.h"

namespace allot::agent {

class AssignmentWatcher {
 public:
  // `path`: the node's assignments path; `on_news`: called (from the watcher's thread) after
  // each answer, for the loop to take().
  AssignmentWatcher(ServerAddress addr, std::string path, std::chrono::seconds wait,
                    std::function<void()> on_news);
  ~AssignmentWatcher();
  AssignmentWatcher(const AssignmentWatcher&) = delete;
  AssignmentWatcher& operator=(const AssignmentWatcher&) = delete;

  void start();
  void stop();
  // From any thread: the watch held now is dropped and started again (the loop polls
  // meanwhile). For when the server seemed unreachable: a held request on a connection that
  // silently died would otherwise be trusted until its read timeout.
  void interrupt();
  // Whether the server holds the watch now (the loop need not poll).
  bool live() const { return live_; }
  // The latest answer not yet taken.
  std::optional<Reply> take();

 private:
  void run();
  void pause(std::chrono::seconds s);

  ServerClient client_;
  std::string path_;
  std::chrono::seconds wait_;
  std::function<void()> on_news_;
  std::atomic<bool> live_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Reply> latest_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace allot::agent
