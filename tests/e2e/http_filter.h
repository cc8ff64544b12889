// An HTTP forwarder on loopback between an agent and the server that answers some requests
// itself: a server that refuses, or is busy for, one kind of call while every other call goes
// through unchanged.
#pragma once

#include <httplib.h>

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>

namespace allot::e2e {

class HttpFilter {
 public:
  // The status to answer a request with, or nullopt to forward it to the target.
  using Rule = std::function<std::optional<int>(const httplib::Request&)>;

  HttpFilter(int target_port, Rule rule) : target_(target_port), rule_(std::move(rule)) {
    auto handler = [this](const httplib::Request& req, httplib::Response& res) {
      if (auto status = rule_(req)) {
        ++answered_;
        res.status = *status;
        res.set_content(R"({"error":"refused by the test's filter"})", "application/json");
        return;
      }
      forward(req, res);
    };
    svr_.Get(".*", handler);
    svr_.Post(".*", handler);
    svr_.Put(".*", handler);
    svr_.Delete(".*", handler);
    svr_.Patch(".*", handler);
    port_ = svr_.bind_to_any_port("127.0.0.1");
    // Bound already: connections wait in the backlog until the thread accepts them.
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
  }
  ~HttpFilter() {
    svr_.stop();
    thread_.join();
  }
  HttpFilter(const HttpFilter&) = delete;
  HttpFilter& operator=(const HttpFilter&) = delete;

  int port() const { return port_; }
  // Requests the rule answered (not forwarded).
  int answered() const { return answered_; }

 private:
  void forward(const httplib::Request& req, httplib::Response& res) {
    httplib::Client c("127.0.0.1", target_);
    c.set_read_timeout(120);  // the agent's assignment watch is held for up to its watch period
    httplib::Request out;
    out.method = req.method;
    out.path = req.target;  // the path with its query, as the agent sent it
    for (const auto& [k, v] : req.headers) {
      if (k == "Host" || k == "Content-Length" || k == "REMOTE_ADDR" || k == "REMOTE_PORT" ||
          k == "LOCAL_ADDR" || k == "LOCAL_PORT") {
        continue;
      }
      out.headers.emplace(k, v);
    }
    out.body = req.body;
    auto r = c.send(out);
    if (!r) {
      res.status = 502;
      return;
    }
    res.status = r->status;
    for (const auto& [k, v] : r->headers) {
      if (k == "Content-Length" || k == "Transfer-Encoding" || k == "Connection") continue;
      res.headers.emplace(k, v);
    }
    res.body = r->body;
  }

  int target_;
  Rule rule_;
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> answered_{0};
};

}  // namespace allot::e2e
