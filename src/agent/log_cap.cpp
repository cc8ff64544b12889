#include "agent/log_cap.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace allot::agent {

namespace {

std::string size_words(std::int64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

}  // namespace

CappedLog::CappedLog(int fd, std::int64_t cap, std::size_t tail, std::string stream)
    : fd_(fd), cap_(cap), tail_(tail), stream_(std::move(stream)) {}

std::int64_t CappedLog::dropped() const {
  const std::int64_t past = seen_ - kept_;
  return past - std::min<std::int64_t>(past, static_cast<std::int64_t>(last_.size()));
}

void CappedLog::put(const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // a full disk: nothing better to do with the bytes than drop them
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

void CappedLog::write(const char* data, std::size_t n) {
  if (n == 0) return;
  seen_ += static_cast<std::int64_t>(n);
  if (cap_ <= 0 || kept_ < cap_) {
    const std::size_t room =
        cap_ <= 0 ? n : static_cast<std::size_t>(std::min<std::int64_t>(cap_ - kept_, n));
    put(data, room);
    kept_ += static_cast<std::int64_t>(room);
    data += room;
    n -= room;
    if (n == 0) return;
  }
  if (!marked_) {
    // The first byte past the cap: say so where the reader is.
    marked_ = true;
    const std::string marker = "\nallot: " + stream_ + " reached this node's cap of " +
                               size_words(cap_) + ": what follows is dropped, but for its last " +
                               size_words(static_cast<std::int64_t>(tail_)) +
                               ", written at the end\n";
    put(marker.data(), marker.size());
  }
  if (tail_ == 0) return;
  last_.append(data, n);
  if (last_.size() > 2 * tail_) last_.erase(0, last_.size() - tail_);
}

void CappedLog::finish() {
  if (finished_ || seen_ == kept_) return;
  finished_ = true;
  if (last_.size() > tail_) last_.erase(0, last_.size() - tail_);
  const std::string marker = "\nallot: " + std::to_string(dropped()) + " bytes of " + stream_ +
                             " were dropped here (this node's cap); the last " +
                             std::to_string(last_.size()) + " bytes follow\n";
  put(marker.data(), marker.size());
  put(last_.data(), last_.size());
}

}  // namespace allot::agent
