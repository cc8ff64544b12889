// Agents watching their node's assignments (GET /api/v1/agent/nodes/NAME/assignments?wait=S&
// since=VERSION, docs/agent-protocol.md): the request is held until the node's assignments
// differ from the version the agent last saw, or the wait ends, instead of the agent polling. A
// held request costs no thread: the plain-HTTP event loop holds its connection
// (EventServer::handle_held) and this hub answers it, from its own thread, when the controller
// publishes a snapshot that changes the node's version, or at its deadline.
//
// Bounded: one held request per node (a second one is refused, 429) and `total` in all.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "server/controller.h"

namespace allot::server {

struct WatchLimits {
  std::size_t total = 4096;   // held requests in the whole server
  int max_wait_seconds = 60;  // the longest `wait` a request may ask
};

// A node's assignments' version: a hash of its run and stop lists (each entry's job, run,
// state, GPUs, share, rank, nodes and rendezvous), as 16 hex digits. The same lists give the same
// version on any server (a new leader after a failover wakes no agent whose lists it keeps).
std::string assignment_version(const Snapshot& snap, const std::string& node);

class AssignmentWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // How a held request is answered, once: with the snapshot to answer from, and whether the
  // node's version changed (false: the wait ended, or the server is stopping).
  using Answer = std::function<void(const std::shared_ptr<const Snapshot>&, bool changed)>;

  explicit AssignmentWatch(WatchLimits limits = {});
  ~AssignmentWatch();
  AssignmentWatch(const AssignmentWatch&) = delete;
  AssignmentWatch& operator=(const AssignmentWatch&) = delete;

  struct Held {
    std::uint64_t id = 0;  // 0: not held (see the rest)
    bool changed = false;  // not held: the node's version differs already (answer now)
    std::string refused;   // not held: the limit reached, or closed (the reason, for a 429)
  };
  // Holds a request for `node`'s assignments, whose client saw version `since` in `snap` (read
  // just before) and waits until `deadline`. `answer` is called at most once, from the hub's
  // thread (never from within hold()).
  Held hold(const std::string& node, const std::string& since,
            const std::shared_ptr<const Snapshot>& snap, Clock::time_point deadline, Answer answer);
  // The client of held request `id` left: its place is freed and it is not answered (unless
  // the hub took it to answer already).
  void cancel(std::uint64_t id);
  // A new snapshot (the controller's publish hook): held requests whose node changed are
  // answered.
  void published(std::shared_ptr<const Snapshot> snap);
  // Answers every held request (unchanged) and refuses new ones; the server is stopping.
  void close();

  std::size_t held() const;
  const WatchLimits& limits() const { return limits_; }

 private:
  struct Waiter {
    std::string node;
    std::string since;
    Clock::time_point deadline;
    Answer answer;
  };
  void run();

  WatchLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_.
  std::map<std::uint64_t, Waiter> waiters_;
  std::map<std::string, std::uint64_t> by_node_;
  std::shared_ptr<const Snapshot> latest_;
  bool fresh_ = false;  // latest_ not yet compared with the waiters
  bool closed_ = false;
  std::uint64_t next_id_ = 1;
  std::thread thread_;
};

}  // namespace allot::server
