#include "agent/readiness.h"

#include <httplib.h>

namespace allot::agent {

std::string printable(const std::string& s, std::size_t max) {
  std::string out = s.substr(0, max);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e) c = u == '\n' || u == '\t' || u == '\r' ? ' ' : '?';
  }
  return out;
}

Runner::CheckOutcome http_ready_check(int port, const std::string& path,
                                      std::chrono::milliseconds timeout) {
  httplib::Client cli("127.0.0.1", port);
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const auto usecs = std::chrono::duration_cast<std::chrono::microseconds>(timeout - secs);
  cli.set_connection_timeout(secs.count(), usecs.count());
  cli.set_read_timeout(secs.count(), usecs.count());
  cli.set_write_timeout(secs.count(), usecs.count());
  cli.set_keep_alive(false);
  const std::string where = "GET 127.0.0.1:" + std::to_string(port) + printable(path, 200);
  auto res = cli.Get(path);
  Runner::CheckOutcome out;
  if (!res) {
    out.reason = where + ": " + httplib::to_string(res.error());
  } else if (res->status < 200 || res->status > 299) {
    out.reason = where + ": HTTP " + std::to_string(res->status);
  } else {
    out.ok = true;
  }
  return out;
}

}  // namespace allot::agent
