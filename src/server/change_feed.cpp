#include "server/change_feed.h"

#include <algorithm>
#include <variant>

namespace allot::server {

std::string ChangeFeed::message(unsigned topics, std::uint64_t seq) {
  std::string names;
  for (const auto& [bit, name] :
       {std::pair{kJobs, "jobs"}, std::pair{kNodes, "nodes"}, std::pair{kBudgets, "budgets"}}) {
    if (!(topics & bit)) continue;
    names += names.empty() ? "\"" : ",\"";
    names += name;
    names += '"';
  }
  return "event: changed\nid: " + std::to_string(seq) + "\ndata: {\"seq\":" + std::to_string(seq) +
         ",\"topics\":[" + names + "]}\n\n";
}

void ChangeFeed::committing(const store::WriteBatch& batch) {
  for (const auto& op : batch) {
    if (std::holds_alternative<store::op::InsertJob>(op) ||
        std::holds_alternative<store::op::UpdateJob>(op) ||
        std::holds_alternative<store::op::AddEvent>(op)) {
      held_ |= kJobs;
    } else if (std::holds_alternative<store::op::PutNode>(op) ||
               std::holds_alternative<store::op::AddNodeHealth>(op)) {
      held_ |= kNodes;  // not TouchNode: a heartbeat changes nothing a page shows
    } else if (std::holds_alternative<store::op::PutBudget>(op) ||
               std::holds_alternative<store::op::AddAudit>(op)) {
      held_ |= kBudgets;
    }
  }
}

void ChangeFeed::committed(double /*seconds*/) {
  // Only once it is durable: a page that reads again sees what the message announced.
  const unsigned topics = std::exchange(held_, 0u);
  if (topics) publish(topics);
}

std::string ChangeFeed::reserve(std::int64_t token, const std::string& address) {
  std::lock_guard lk(mu_);
  if (reserved_ >= limits_.total) {
    return "the server has " + std::to_string(limits_.total) + " event streams open, its most";
  }
  if (per_token_[token] >= limits_.per_token) {
    return "this token has " + std::to_string(limits_.per_token) +
           " event streams open, its most (close a dashboard tab)";
  }
  if (per_address_[address] >= limits_.per_address) {
    return address + " has " + std::to_string(limits_.per_address) +
           " event streams open, its most";
  }
  ++per_token_[token];
  ++per_address_[address];
  ++reserved_;
  return "";
}

void ChangeFeed::release(std::int64_t token, const std::string& address) {
  std::lock_guard lk(mu_);
  if (auto it = per_token_.find(token); it != per_token_.end() && --it->second == 0) {
    per_token_.erase(it);
  }
  if (auto it = per_address_.find(address); it != per_address_.end() && --it->second == 0) {
    per_address_.erase(it);
  }
  if (reserved_ > 0) --reserved_;
}

StreamOptions ChangeFeed::stream_options(std::int64_t token, const std::string& address) {
  StreamOptions o;
  o.max_pending = limits_.max_pending;
  o.heartbeat = std::chrono::seconds(limits_.heartbeat_seconds);
  o.heartbeat_bytes = ":\n\n";
  // What a reader too slow to take every message gets instead: read everything again.
  o.overflow = message(kAll, 0);
  // The feed outlives the API server's streams (stop() ends them all first).
  o.on_end = [this, token, address] { release(token, address); };
  return o;
}

void ChangeFeed::add(std::shared_ptr<Stream> stream) {
  std::lock_guard lk(mu_);
  // "retry": how long a browser's EventSource waits before reconnecting (the dashboard's own
  // reader uses the same).
  stream->push("retry: 3000\n" + message(kAll, seq_));
  streams_.push_back(std::move(stream));
}

void ChangeFeed::publish(unsigned topics) {
  std::lock_guard lk(mu_);
  const std::string m = message(topics, ++seq_);
  std::erase_if(streams_, [&](const std::shared_ptr<Stream>& s) { return !s->push(m); });
}

std::size_t ChangeFeed::open_streams() const {
  std::lock_guard lk(mu_);
  std::size_t n = 0;
  for (const auto& s : streams_) n += s->ended() ? 0 : 1;
  return n;
}

}  // namespace allot::server
