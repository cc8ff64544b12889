#include "agent/watcher.h"

#include <pthread.h>

#include <utility>

namespace allot::agent {

AssignmentWatcher::AssignmentWatcher(ServerAddress addr, std::string path,
                                     std::chrono::seconds wait, std::function<void()> on_news)
    : client_(std::move(addr)), path_(std::move(path)), wait_(wait), on_news_(std::move(on_news)) {
  // The server answers by the end of the wait: a reply later than that (and some slack) means
  // the connection is gone.
  client_.set_read_timeout(wait_ + std::chrono::seconds(10));
}

AssignmentWatcher::~AssignmentWatcher() {
  stop();
}

void AssignmentWatcher::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

void AssignmentWatcher::stop() {
  stopping_ = true;
  cv_.notify_all();
  // A cancel just before the call connects could be missed: repeated until the thread ends.
  while (thread_.joinable() && !done_) {
    client_.cancel();
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::chrono::milliseconds(20), [&] { return done_.load(); });
  }
  if (thread_.joinable()) thread_.join();
}

void AssignmentWatcher::interrupt() {
  if (!live_) return;
  live_ = false;
  client_.cancel(false);
}

std::optional<Reply> AssignmentWatcher::take() {
  std::lock_guard lk(mu_);
  return std::exchange(latest_, std::nullopt);
}

void AssignmentWatcher::pause(std::chrono::seconds s) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, s, [&] { return stopping_.load(); });
}

void AssignmentWatcher::run() {
  pthread_setname_np(pthread_self(), "allot-watch");
  std::string since;
  while (!stopping_) {
    std::string target = path_ + "?wait=" + std::to_string(wait_.count());
    if (!since.empty()) target += "&since=" + since;
    Reply r = client_.get(target);
    if (stopping_) break;
    const bool held = r.ok() && r.body.is_object() && r.body.contains("watch") &&
                      r.body["watch"].is_boolean() && r.body["watch"].get<bool>() &&
                      r.body.contains("version") && r.body["version"].is_string();
    if (held) {
      since = r.body["version"].get<std::string>();
      live_ = true;
      {
        std::lock_guard lk(mu_);
        latest_ = std::move(r);
      }
      if (on_news_) on_news_();
      continue;
    }
    // Not watching: the loop polls meanwhile; the next watch starts afresh.
    live_ = false;
    since.clear();
    if (r.status == 0 || r.status == 503 || r.status == 404) {  // 404: the loop registers
      pause(std::chrono::seconds(1));
    } else if (r.status == 429) {
      pause(std::chrono::seconds(30));
    } else {
      pause(std::chrono::seconds(60));  // not held here (HTTPS, an older server), or refused
    }
  }
  live_ = false;
  done_ = true;
  cv_.notify_all();
}

}  // namespace allot::agent
