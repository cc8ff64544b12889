#include "server/assignment_watch.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

namespace allot::server {

namespace {

// FNV-1a, 64 bits: stable across processes and builds (std::hash is not).
struct Fnv {
  std::uint64_t h = 1469598103934665603ULL;
  void bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 1099511628211ULL;
    }
  }
  void num(std::int64_t v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    num(static_cast<std::int64_t>(s.size()));
    bytes(s.data(), s.size());
  }
};

}  // namespace

std::string assignment_version(const Snapshot& snap, const std::string& node) {
  Fnv f;
  if (auto it = snap.assignments.find(node); it != snap.assignments.end()) {
    f.num(static_cast<std::int64_t>(it->second.run.size()));
    for (const auto& r : it->second.run) {
      f.num(r.job);
      f.num(r.run);
      f.str(r.state);
      f.num(static_cast<std::int64_t>(r.gpus.size()));
      for (int g : r.gpus) f.num(g);
      f.num(r.milli);
      f.num(r.rank);
      f.num(r.nodes ? static_cast<std::int64_t>(r.nodes->size()) : -1);
      if (r.nodes) {
        for (const auto& n : *r.nodes) f.str(n);
      }
      f.str(r.rendezvous);
    }
    f.num(static_cast<std::int64_t>(it->second.stop.size()));
    for (const auto& s : it->second.stop) {
      f.num(s.job);
      f.num(s.run);
      f.num(s.notice_seconds);
    }
    for (const auto& m : it->second.mig_layouts) {
      f.num(m.gpu);
      f.num(static_cast<std::int64_t>(m.profiles.size()));
      for (const auto& p : m.profiles) f.str(p);
    }
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(f.h));
  return out;
}

AssignmentWatch::AssignmentWatch(WatchLimits limits) : limits_(limits) {
  thread_ = std::thread([this] { run(); });
}

AssignmentWatch::~AssignmentWatch() {
  close();
  {
    std::lock_guard lk(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

AssignmentWatch::Held AssignmentWatch::hold(const std::string& node, const std::string& since,
                                            const std::shared_ptr<const Snapshot>& snap,
                                            Clock::time_point deadline, Answer answer) {
  std::lock_guard lk(mu_);
  if (closed_) return {0, false, "the server is stopping"};
  // A snapshot published since `snap` was read, already compared with the waiters: this
  // request must be compared with it here, or its change would go unnoticed.
  if (latest_ && snap && latest_->version > snap->version &&
      assignment_version(*latest_, node) != since) {
    return {0, true, ""};
  }
  if (by_node_.count(node)) {
    return {0, false, "node " + node + " has a watch held already (at most 1 per node)"};
  }
  if (waiters_.size() >= limits_.total) {
    return {0, false,
            "too many watches held (at most " + std::to_string(limits_.total) +
                " in this server); poll instead"};
  }
  const std::uint64_t id = next_id_++;
  const bool sooner = waiters_.empty() || deadline < waiters_.begin()->second.deadline;
  waiters_.emplace(id, Waiter{node, since, deadline, std::move(answer)});
  by_node_[node] = id;
  if (sooner) cv_.notify_all();  // the hub's thread may sleep past this deadline
  return {id, false, ""};
}

void AssignmentWatch::cancel(std::uint64_t id) {
  std::lock_guard lk(mu_);
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;
  by_node_.erase(it->second.node);
  waiters_.erase(it);
}

void AssignmentWatch::published(std::shared_ptr<const Snapshot> snap) {
  {
    std::lock_guard lk(mu_);
    if (latest_ && snap && snap->version <= latest_->version) return;
    latest_ = std::move(snap);
    fresh_ = true;
  }
  cv_.notify_all();
}

void AssignmentWatch::close() {
  std::vector<Answer> all;
  std::shared_ptr<const Snapshot> snap;
  {
    std::lock_guard lk(mu_);
    closed_ = true;
    for (auto& [id, w] : waiters_) all.push_back(std::move(w.answer));
    waiters_.clear();
    by_node_.clear();
    snap = latest_;
  }
  cv_.notify_all();
  for (auto& a : all) a(snap, false);
}

std::size_t AssignmentWatch::held() const {
  std::lock_guard lk(mu_);
  return waiters_.size();
}

void AssignmentWatch::run() {
  pthread_setname_np(pthread_self(), "allot-watch");
  std::unique_lock lk(mu_);
  while (!closed_) {
    // The earliest deadline (a few hundred waiters at most per ms of work: a scan is fine).
    auto wake = Clock::now() + std::chrono::seconds(1);
    for (const auto& [id, w] : waiters_) wake = std::min(wake, w.deadline);
    cv_.wait_until(lk, wake, [&] { return closed_ || fresh_ || Clock::now() >= wake; });
    if (closed_) break;
    const auto now = Clock::now();
    std::vector<std::pair<Answer, bool>> due;
    std::map<std::string, std::string> versions;  // node -> version in latest_, this pass
    const bool compare = fresh_ && latest_;
    fresh_ = false;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      bool changed = false;
      if (compare) {
        auto v = versions.find(it->second.node);
        if (v == versions.end()) {
          v = versions.emplace(it->second.node, assignment_version(*latest_, it->second.node))
                  .first;
        }
        changed = v->second != it->second.since;
      }
      if (changed || now >= it->second.deadline) {
        due.emplace_back(std::move(it->second.answer), changed);
        by_node_.erase(it->second.node);
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    if (due.empty()) continue;
    auto snap = latest_;
    lk.unlock();
    for (auto& [answer, changed] : due) answer(snap, changed);
    lk.lock();
  }
}

}  // namespace allot::server
