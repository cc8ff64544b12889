// A TCP proxy on loopback that a test can cut and restore: a network partition between one agent
// and the server, with both processes alive.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace allot::e2e {

class Proxy {
 public:
  explicit Proxy(int target_port) : target_(target_port) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(listen_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(listen_, 64);
    thread_ = std::thread([this] { accept_loop(); });
  }
  ~Proxy() {
    stop_ = true;
    ::shutdown(listen_, SHUT_RDWR);
    ::close(listen_);
    thread_.join();
    cut();
    for (auto& t : pumps_) t.join();
  }
  int port() const { return port_; }

  // Drops every open connection and refuses (closes at once) new ones until restore().
  void cut() {
    cut_ = true;
    std::lock_guard lk(mu_);
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
  }
  void restore() { cut_ = false; }

 private:
  void accept_loop() {
    while (!stop_) {
      int c = ::accept(listen_, nullptr, nullptr);
      if (c < 0) {
        if (stop_) return;
        continue;
      }
      if (cut_) {
        ::close(c);
        continue;
      }
      int s = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<std::uint16_t>(target_));
      if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        ::close(s);
        ::close(c);
        continue;
      }
      std::lock_guard lk(mu_);
      open_.push_back(c);
      open_.push_back(s);
      pumps_.emplace_back([this, c, s] { pump(c, s); });
    }
  }
  void pump(int a, int b) {
    char buf[65536];
    pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    while (!cut_ && !stop_) {
      if (::poll(fds, 2, 100) <= 0) continue;
      bool done = false;
      for (int i = 0; i < 2 && !done; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        // MSG_NOSIGNAL: a peer that closed first must end this pump, not the test (SIGPIPE).
        if (n <= 0 || ::send(fds[1 - i].fd, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) {
          done = true;
        }
      }
      if (done) break;
    }
    std::lock_guard lk(mu_);
    for (int fd : {a, b}) {
      ::close(fd);
      std::erase(open_, fd);
    }
  }

  int target_;
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false}, cut_{false};
  std::mutex mu_;
  std::vector<int> open_;
  std::vector<std::thread> pumps_;
  std::thread thread_;
};

}  // namespace allot::e2e
