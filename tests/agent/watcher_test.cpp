// The agent's assignment watch (agent/watcher.h) against small servers on loopback: one that
// holds the watch and answers on a change (the loop hears at once, and a stop does not wait for
// the held request), an older one that refuses the `wait` parameter and one that answers at once
// with "watch": false (HTTPS): with those the watch is not live, so the loop polls.
#include "agent/watcher.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

namespace allot::agent {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

class Server {
 public:
  explicit Server(httplib::Server::Handler h) {
    svr_.Get(".*", std::move(h));
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Server() {
    svr_.stop();
    thread_.join();
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
};

json body(const std::string& version, bool watch) {
  return {{"node", "n1"},         {"lease_seconds", 30},   {"server_time", 1},
          {"run", json::array()}, {"stop", json::array()}, {"version", version},
          {"changed", true},      {"watch", watch}};
}

bool eventually(const std::function<bool()>& f, int ms = 3000) {
  const auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return f();
}

TEST(Watcher, AHeldWatchBringsTheChangeAtOnceAndStopDoesNotWaitForIt) {
  std::mutex mu;
  std::condition_variable cv;
  bool changed = false;
  std::atomic<int> held{0};
  Server s([&](const httplib::Request& req, httplib::Response& res) {
    const auto since = req.get_param_value("since");
    EXPECT_EQ(req.get_param_value("wait"), "20");
    if (since == "aaaa") {  // held until the test changes the node's assignments
      ++held;
      std::unique_lock lk(mu);
      cv.wait_for(lk, std::chrono::seconds(20), [&] { return changed; });
      res.set_content(body(changed ? "bbbb" : "aaaa", true).dump(), "application/json");
      return;
    }
    if (since == "bbbb") {  // held for the rest of the test
      ++held;
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    res.set_content(body(since == "bbbb" ? "bbbb" : "aaaa", true).dump(), "application/json");
  });
  std::atomic<int> news{0};
  AssignmentWatcher w({s.url(), "tok", "", false}, "/api/v1/agent/nodes/n1/assignments",
                      std::chrono::seconds(20), [&] { ++news; });
  w.start();
  ASSERT_TRUE(eventually([&] { return w.live() && held.load() == 1; }));
  auto first = w.take();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->body["version"], "aaaa");
  EXPECT_FALSE(w.take());  // taken once
  const int before = news.load();
  {
    std::lock_guard lk(mu);
    changed = true;
  }
  const auto t = Clock::now();
  cv.notify_all();
  ASSERT_TRUE(eventually([&] { return news.load() > before; }));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t).count(), 0.5);
  auto second = w.take();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->body["version"], "bbbb");
  ASSERT_TRUE(eventually([&] { return held.load() == 2; }));  // the next watch, on bbbb
  const auto stopping = Clock::now();
  w.stop();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - stopping).count(), 1.0);
  EXPECT_FALSE(w.live());
}

TEST(Watcher, AnOlderServerOrHttpsIsNotWatchedAndStopIsPrompt) {
  // An older server: 400 for the unknown query parameter.
  Server old([](const httplib::Request& req, httplib::Response& res) {
    res.status = req.has_param("wait") ? 400 : 200;
    res.set_content(
        R"({"error": {"status": 400, "field": "wait", "reason": "unknown query parameter"}})",
        "application/json");
  });
  // HTTPS: answered at once, "watch": false.
  Server tls([](const httplib::Request&, httplib::Response& res) {
    res.set_content(body("aaaa", false).dump(), "application/json");
  });
  // Something else between: "watch" of another type is no watch (it once ended the agent).
  Server odd([](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"watch": "yes", "version": 7})", "application/json");
  });
  for (const auto* s : {&old, &tls, &odd}) {
    std::atomic<int> news{0};
    AssignmentWatcher w({s->url(), "tok", "", false}, "/a", std::chrono::seconds(20),
                        [&] { ++news; });
    w.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_FALSE(w.live());
    EXPECT_EQ(news.load(), 0);
    EXPECT_FALSE(w.take());  // the loop polls for itself
    const auto t = Clock::now();
    w.stop();  // the watcher waits a minute before trying again: stop cuts that short
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t).count(), 1.0);
  }
}

}  // namespace
}  // namespace allot::agent
