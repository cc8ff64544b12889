#include "server/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>

namespace allot::server {
namespace {

// One request in, its response out: what cpp-httplib reads and writes through a socket.
class MemoryStream final : public httplib::Stream {
 public:
  MemoryStream(std::string_view in, std::string& out, const std::string& ip, int port)
      : in_(in), out_(out), ip_(ip), port_(port) {}

  bool is_readable() const override { return off_ < in_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, in_.size() - off_);
    std::memcpy(ptr, in_.data() + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    out_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = ip_;
    port = port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip.clear();
    port = 0;
  }
  socket_t socket() const override { return INVALID_SOCKET; }

 private:
  std::string_view in_;
  size_t off_ = 0;
  std::string& out_;
  const std::string& ip_;
  int port_;
};

// Reaches cpp-httplib's protected listening socket on any Server (a pointer to a member of a
// derived class may name a protected member of its base).
struct ListeningSocket : httplib::Server {
  static socket_t of(const httplib::Server& s) { return s.*(&ListeningSocket::svr_sock_); }
};
}  // namespace

std::string RequestProcessor::process(std::string_view request, const std::string& remote_ip,
                                      int remote_port, bool& close) {
  std::string out;
  MemoryStream strm(request, out, remote_ip, remote_port);
  bool closed = false;
  if (!process_request(strm, close, closed, nullptr)) closed = true;
  close = close || closed;
  return out;
}

bool set_listen_backlog(httplib::Server& svr, int backlog) {
  const socket_t sock = ListeningSocket::of(svr);
  // listen() again on a listening socket only changes its backlog.
  return sock != INVALID_SOCKET && ::listen(sock, backlog) == 0;
}

std::string without_brotli(const std::string& accept_encoding) {
  std::string out;
  std::size_t from = 0;
  while (from <= accept_encoding.size()) {
    std::size_t comma = accept_encoding.find(',', from);
    if (comma == std::string::npos) comma = accept_encoding.size();
    std::string item = accept_encoding.substr(from, comma - from);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    const std::string coding = item.substr(0, item.find(';'));
    const bool brotli = coding.size() >= 2 && coding.rfind("br", 0) == 0 &&
                        coding.find_first_not_of(" \t", 2) == std::string::npos;
    if (!item.empty() && !brotli) out += (out.empty() ? "" : ", ") + item;
    from = comma + 1;
  }
  return out;
}

}  // namespace allot::server
