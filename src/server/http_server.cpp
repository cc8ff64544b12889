#include "server/http_server.h"

#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

namespace allot::server {
namespace {

// Reads through a buffer kept for the whole connection; writes are gathered and sent at the end
// of the response (or when a read must wait, or when they grow large), so a response is one send.
class BufferedStream final : public httplib::Stream {
 public:
  BufferedStream(socket_t sock, time_t read_sec, time_t read_usec, time_t write_sec,
                 time_t write_usec)
      : sock_(sock),
        read_ms_(static_cast<int>(read_sec * 1000 + read_usec / 1000)),
        write_ms_(static_cast<int>(write_sec * 1000 + write_usec / 1000)) {
    // Blocking recv and send time out as cpp-httplib's polls before them did.
    timeval rt{static_cast<time_t>(read_sec), static_cast<suseconds_t>(read_usec)};
    timeval wt{static_cast<time_t>(write_sec), static_cast<suseconds_t>(write_usec)};
    setsockopt(sock_, SOL_SOCKET, SO_RCVTIMEO, &rt, sizeof(rt));
    setsockopt(sock_, SOL_SOCKET, SO_SNDTIMEO, &wt, sizeof(wt));
  }

  bool is_readable() const override { return buffered() || wait(POLLIN, read_ms_) > 0; }
  bool is_writable() const override { return wait(POLLOUT, write_ms_) > 0; }

  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      if (!flush()) return -1;  // the peer may be waiting for what was written (100 Continue)
      ssize_t n = 0;
      do {
        n = ::recv(sock_, in_, sizeof(in_), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n < 0 ? -1 : 0;
      in_off_ = 0;
      in_len_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, in_len_ - in_off_);
    std::memcpy(ptr, in_ + in_off_, n);
    in_off_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    out_.append(ptr, size);
    if (out_.size() >= kFlushAt && !flush()) return -1;
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(false, ip, port);
  }
  socket_t socket() const override { return sock_; }

  // Sends what was written; false if the peer is gone or the write timed out.
  bool flush() {
    size_t off = 0;
    while (off < out_.size()) {
      ssize_t n = ::send(sock_, out_.data() + off, out_.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        out_.clear();
        return false;
      }
      off += static_cast<size_t>(n);
    }
    out_.clear();
    if (out_.capacity() > kFlushAt * 16) std::string().swap(out_);  // after a large response
    return true;
  }

  // Whether a next request arrives within the keep-alive timeout (cpp-httplib's keep_alive,
  // which also polls in steps of 10 ms); false as soon as the server stops.
  bool next_request(const std::atomic<socket_t>& listening, time_t timeout_sec) const {
    if (buffered()) return true;  // pipelined: already read
    const auto start = std::chrono::steady_clock::now();
    while (listening != INVALID_SOCKET) {
      const int r = wait(POLLIN, 10);
      if (r < 0) return false;
      if (r > 0) return true;
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(timeout_sec)) {
        return false;
      }
    }
    return false;
  }

 private:
  static constexpr size_t kFlushAt = 64 * 1024;

  bool buffered() const { return in_off_ < in_len_; }
  int wait(short events, int ms) const {
    pollfd p{sock_, events, 0};
    int r = 0;
    do {
      r = ::poll(&p, 1, ms);
    } while (r < 0 && errno == EINTR);
    return r;
  }
  // Both addresses are read once per connection (cpp-httplib asks on every request).
  void address(bool remote, std::string& ip, int& port) const {
    auto& a = remote ? remote_ : local_;
    if (!a.known) {
      a.known = true;
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      auto* sa = reinterpret_cast<sockaddr*>(&addr);
      if ((remote ? getpeername(sock_, sa, &len) : getsockname(sock_, sa, &len)) == 0) {
        char host[NI_MAXHOST];
        if (getnameinfo(sa, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) == 0) a.ip = host;
        if (addr.ss_family == AF_INET) {
          a.port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
        } else if (addr.ss_family == AF_INET6) {
          a.port = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
        }
      }
    }
    ip = a.ip;
    port = a.port;
  }

  struct Address {
    bool known = false;
    std::string ip;
    int port = -1;
  };

  socket_t sock_;
  int read_ms_;
  int write_ms_;
  char in_[4096];
  size_t in_off_ = 0;
  size_t in_len_ = 0;
  std::string out_;
  mutable Address remote_;
  mutable Address local_;
};

// Reaches cpp-httplib's protected listening socket on any Server (a pointer to a member of a
// derived class may name a protected member of its base).
struct ListeningSocket : httplib::Server {
  static socket_t of(const httplib::Server& s) { return s.*(&ListeningSocket::svr_sock_); }
};
}  // namespace

bool set_listen_backlog(httplib::Server& svr, int backlog) {
  const socket_t sock = ListeningSocket::of(svr);
  // listen() again on a listening socket only changes its backlog.
  return sock != INVALID_SOCKET && ::listen(sock, backlog) == 0;
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  // Named for top -H and per-thread CPU figures (docs/benchmarks.md).
  thread_local const bool named = (pthread_setname_np(pthread_self(), "allot-http"), true);
  (void)named;
  bool ret = false;
  {
    BufferedStream strm(sock, read_timeout_sec_, read_timeout_usec_, write_timeout_sec_,
                        write_timeout_usec_);
    // As cpp-httplib's process_server_socket: at most keep_alive_max_count_ requests, the last
    // one answered with "Connection: close".
    for (size_t count = keep_alive_max_count_;
         svr_sock_ != INVALID_SOCKET && count > 0 &&
         strm.next_request(svr_sock_, keep_alive_timeout_sec_);
         --count) {
      bool connection_closed = false;
      ret = process_request(strm, count == 1, connection_closed, nullptr);
      ret = strm.flush() && ret;
      if (!ret || connection_closed) break;
    }
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace allot::server
