// The agent applying the server's MIG layouts (agent_mig.cpp; docs/agent-protocol.md,
// "mig_layouts"), end to end through the agent's loop: a fake node, real job processes, and a small
// server on loopback that answers as the real one does (it drops its orders once the node has
// registered again), or, for the retry rule, one that keeps repeating them.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"

namespace allot::agent {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

bool eventually(const std::function<bool()>& done, int ms = 10000) {
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (!done()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// The server's side of the protocol, as far as this agent needs it, recording what it is told.
class Server {
 public:
  explicit Server(bool keeps_orders = false) : keeps_orders_(keeps_orders) {
    svr_.Post("/api/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lk(mu_);
      registrations_.push_back(json::parse(req.body));
      events_.push_back("registered");
      // Like the real server, a registration settles the orders: the next answer has none.
      if (!keeps_orders_) assignments_.erase("mig_layouts");
      res.set_content(R"({"name": "n1", "lease_seconds": 30})", "application/json");
    });
    svr_.Get("/api/v1/agent/nodes/n1/assignments",
             [this](const httplib::Request&, httplib::Response& res) {
               std::lock_guard lk(mu_);
               ++polls_;
               res.set_content(assignments_.dump(), "application/json");
             });
    svr_.Post("/api/v1/agent/nodes/n1/reports",
              [this](const httplib::Request& req, httplib::Response& res) {
                std::lock_guard lk(mu_);
                json out = {{"results", json::array()}};
                const json body = json::parse(req.body);
                for (const auto& r : body["reports"]) {
                  events_.push_back(r["event"].get<std::string>() + " " +
                                    std::to_string(r["job"].get<int>()));
                  out["results"].push_back({{"job", r["job"]}, {"state", "running"}});
                }
                res.set_content(out.dump(), "application/json");
              });
    svr_.Post("/api/v1/agent/nodes/n1/logs", [this](const httplib::Request& req,
                                                    httplib::Response& res) {
      std::lock_guard lk(mu_);
      std::string& log = logs_[req.get_param_value("job") + "." + req.get_param_value("stream")];
      log += req.body;
      res.set_content(json{{"length", log.size()}}.dump(), "application/json");
    });
    svr_.Post(".*", [](const httplib::Request&, httplib::Response& res) {  // heartbeat, telemetry
      res.set_content(R"({"ok": true, "lease_seconds": 30})", "application/json");
    });
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
  void assign(json a) {
    std::lock_guard lk(mu_);
    a["lease_seconds"] = 30;
    assignments_ = std::move(a);
  }
  std::vector<json> registrations() const {
    std::lock_guard lk(mu_);
    return registrations_;
  }
  std::vector<std::string> events() const {
    std::lock_guard lk(mu_);
    return events_;
  }
  bool saw(const std::string& event) const {
    const auto e = events();
    return std::find(e.begin(), e.end(), event) != e.end();
  }
  std::string log(const std::string& job_stream) const {
    std::lock_guard lk(mu_);
    auto it = logs_.find(job_stream);
    return it == logs_.end() ? "" : it->second;
  }
  int polls() const {
    std::lock_guard lk(mu_);
    return polls_;
  }

 private:
  bool keeps_orders_;
  mutable std::mutex mu_;
  json assignments_ = {{"run", json::array()}, {"stop", json::array()}, {"lease_seconds", 30}};
  std::vector<json> registrations_;
  std::vector<std::string> events_;
  std::map<std::string, std::string> logs_;
  int polls_ = 0;
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
};

json run(int job, const std::string& state, int gpu, const std::vector<std::string>& command,
         int milli = 1000, const std::string& profile = "") {
  return {{"job", job},         {"run", 1},           {"state", state},
          {"gpus", {gpu}},      {"gpu_milli", milli}, {"mig_profile", profile},
          {"command", command}, {"grace_seconds", 1}};
}

std::vector<std::string> profiles_of(const json& device) {
  std::vector<std::string> out;
  for (const auto& m : device["mig"]) out.push_back(m["profile"]);
  return out;
}

class AgentMig : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/allot-agent-mig-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override {
    if (agent_) agent_->stop(true);
    std::filesystem::remove_all(dir_);
  }

  void start(const Server& server, const std::string& node_yaml) {
    auto backend = make_fake_backend_from_text(node_yaml, "n1");
    ASSERT_TRUE(backend.ok()) << backend.error().message();
    AgentOptions o;
    o.server.url = server.url();
    o.server.token = "t";
    o.node = "n1";
    o.state_dir = dir_ + "/state";
    o.poll = std::chrono::milliseconds(20);
    o.watch = std::chrono::seconds(0);
    o.runner.shim_binary = TEST_SHIM;
    o.runner.cgroup_root = "none";
    o.runner.devices_cgroup_root = "none";
    o.log = [this](const std::string& line) {
      std::lock_guard lk(mu_);
      said_.push_back(line);
    };
    agent_ = std::make_unique<Agent>(o, std::move(backend.value()));
    auto st = agent_->start();
    ASSERT_TRUE(st.ok()) << st.error().message();
  }
  bool said(const std::string& line) {
    std::lock_guard lk(mu_);
    return std::find(said_.begin(), said_.end(), line) != said_.end();
  }
  // A line that starts so (what follows is a duration).
  bool said_starting(const std::string& start) {
    std::lock_guard lk(mu_);
    return std::any_of(said_.begin(), said_.end(),
                       [&](const std::string& l) { return l.rfind(start, 0) == 0; });
  }
  std::string everything_said() {
    std::lock_guard lk(mu_);
    std::string out;
    for (const auto& l : said_) out += l + "\n";
    return out;
  }

  std::string dir_;
  std::unique_ptr<Agent> agent_;
  std::mutex mu_;
  std::vector<std::string> said_;
};

TEST_F(AgentMig, AppliesLayoutsOnFreeGpusAndRegistersThemBeforeTheRunsStart) {
  Server server;
  start(server, "model: H100\ngpus: 2\nmemory_mib: 81559\nmig_reconfigure_seconds: 0.1\n");
  ASSERT_TRUE(eventually([&] { return server.registrations().size() == 1; }));
  server.assign({{"run", {run(1, "starting", 0, {"sleep", "30"})}}, {"stop", json::array()}});
  ASSERT_TRUE(eventually([&] { return server.saw("started 1"); })) << everything_said();

  // GPU 0 is held by job 1; GPU 1 is free, and job 2 is placed on an instance of its new layout in
  // the same answer.
  server.assign(
      {{"run",
        {run(1, "running", 0, {"sleep", "30"}),
         run(2, "starting", 1, {"sh", "-c", "echo $CUDA_VISIBLE_DEVICES"}, 428, "3g.40gb")}},
       {"stop", json::array()},
       {"mig_layouts",
        {{{"gpu", 0}, {"profiles", {"7g.80gb"}}},
         {{"gpu", 1}, {"profiles", {"3g.40gb", "3g.40gb"}}}}}});
  ASSERT_TRUE(eventually([&] { return server.saw("exited 2"); })) << everything_said();

  const auto regs = server.registrations();
  ASSERT_EQ(regs.size(), 2u) << "registered again once, with what it made";
  const json& devices = regs[1]["devices"];
  EXPECT_TRUE(devices[0]["mig"].empty()) << "a run holds GPU 0: left as it was";
  EXPECT_EQ(profiles_of(devices[1]), (std::vector<std::string>{"3g.40gb", "3g.40gb"}));
  EXPECT_EQ(devices[1]["mig"][0]["uuid"], "MIG-fake-n1-1-g1-0");
  EXPECT_EQ(devices[1]["mig"][0]["milli"], 428);
  // In that order: the new layout registered, then job 2 started on one of its instances.
  const auto events = server.events();
  const auto registered = std::find(events.begin() + 1, events.end(), "registered");
  const auto started = std::find(events.begin(), events.end(), "started 2");
  EXPECT_LT(registered - events.begin(), started - events.begin());
  EXPECT_EQ(server.log("2.stdout"), "MIG-fake-n1-1-g1-0\n");

  EXPECT_TRUE(said("GPU 0: MIG layout [7g.80gb] not applied: job 1.1 runs on it"))
      << everything_said();
  EXPECT_TRUE(said("GPU 1: MIG layout [3g.40gb, 3g.40gb]: re-partitioning")) << everything_said();
  EXPECT_TRUE(said_starting("GPU 1: MIG layout [3g.40gb, 3g.40gb] applied in 0."))
      << everything_said();
}

TEST_F(AgentMig, WhatCannotBeMadeIsRegisteredAsItIsAndNotTriedOnEveryPoll) {
  Server server(/*keeps_orders=*/true);  // a server that repeats its orders
  start(server,
        "model: H100\ngpus: 2\nmemory_mib: 81559\nmig_reconfigure_seconds: 0\n"
        "mig:\n  1: [3g.40gb, 3g.40gb]\n");
  ASSERT_TRUE(eventually([&] { return server.registrations().size() == 1; }));
  server.assign({{"run", json::array()},
                 {"stop", json::array()},
                 {"mig_layouts",
                  {{{"gpu", 0}, {"profiles", {"4g.40gb", "3g.40gb"}}},
                   {{"gpu", 1}, {"profiles", {"3g.40gb", "3g.40gb"}}}}}});
  ASSERT_TRUE(eventually([&] { return server.registrations().size() == 2; }));
  const int polls = server.polls();
  ASSERT_TRUE(eventually([&] { return server.polls() > polls + 10; }));
  EXPECT_EQ(server.registrations().size(), 2u) << "the same orders again: not acted on again";

  const json devices = server.registrations()[1]["devices"];
  EXPECT_TRUE(devices[0]["mig"].empty());
  EXPECT_EQ(devices[1]["mig"][0]["uuid"], "MIG-fake-n1-1-0") << "already so: not made again";
  EXPECT_TRUE(
      said("GPU 0: MIG layout [4g.40gb, 3g.40gb] not applied: mig: [4g.40gb, 3g.40gb] "
           "cannot share one H100: they overlap, need more than 7 compute slices, or "
           "break NVIDIA's placement rules"))
      << everything_said();
  EXPECT_TRUE(said("GPU 1: MIG layout [3g.40gb, 3g.40gb]: already so")) << everything_said();

  // New orders are acted on at once.
  server.assign({{"run", json::array()},
                 {"stop", json::array()},
                 {"mig_layouts", {{{"gpu", 1}, {"profiles", json::array()}}}}});
  ASSERT_TRUE(eventually([&] { return server.registrations().size() == 3; }));
  EXPECT_TRUE(server.registrations()[2]["devices"][1]["mig"].empty());
  EXPECT_TRUE(said_starting("GPU 1: MIG layout none (the GPU whole, MIG mode off) applied in "))
      << everything_said();
}

}  // namespace
}  // namespace allot::agent
