// A real cluster for end-to-end tests: an `allot server` process on a loopback port and `allot
// agent` processes with fake GPU backends, all started from the built binary, talking real HTTP.
// Jobs are real processes (sh -c ...) that leave marks in the test's directory. Failures to set
// the cluster up throw (a test reports the exception; bench/submit_to_start.cpp uses it too).
#pragma once

#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace allot::e2e {

using json = nlohmann::json;
using namespace std::chrono_literals;

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) out.push_back(l);
  }
  return out;
}

inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Polls `pred` until it holds or `timeout` passes.
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds timeout = 20000ms) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return pred();
}

class Process {
 public:
  Process() = default;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() { signal(SIGKILL); }

  void start(const std::vector<std::string>& argv, const std::string& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      std::freopen(log.c_str(), "a", stdout);
      std::freopen(log.c_str(), "a", stderr);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      _exit(127);
    }
  }
  // Sends the signal; SIGKILL and SIGTERM also wait for the exit.
  void signal(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    if (sig == SIGKILL || sig == SIGTERM) {
      int st = 0;
      ::waitpid(pid_, &st, 0);
      pid_ = -1;
    }
  }
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

struct Reply {
  int status = 0;
  json body;
  std::string raw;
};

class Cluster {
 public:
  explicit Cluster(std::vector<std::string> server_flags = {})
      : server_flags_(std::move(server_flags)) {
    std::random_device rd;
    dir_ = (std::filesystem::temp_directory_path() /
            ("allot-e2e-" + std::to_string(rd()) + std::to_string(rd())))
               .string();
    std::filesystem::create_directories(dir_ + "/out");
    port_ = free_port();
  }
  ~Cluster() {
    agents_.clear();  // SIGKILL: their jobs and shims outlive them, and are killed below
    server_.signal(SIGKILL);
    // Every shim and job names this test's directory on its command line.
    if (pid_t p = ::fork(); p == 0) {
      ::execlp("pkill", "pkill", "-KILL", "-f", dir_.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    } else if (p > 0) {
      int st = 0;
      ::waitpid(p, &st, 0);
    }
    if (!keep_) std::filesystem::remove_all(dir_);
  }

  const std::string& dir() const { return dir_; }
  void keep() { keep_ = true; }  // leave the directory (logs) for a person to read
  std::string out(const std::string& name) const { return dir_ + "/out/" + name; }
  std::string agent_log(const std::string& name) const { return dir_ + "/agent-" + name + ".log"; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  void start_server() {
    std::vector<std::string> argv = {ALLOT_BIN,      "server",
                                     "--data",       dir_ + "/allot.db",
                                     "--port",       std::to_string(port_),
                                     "--token-file", dir_ + "/admin-token",
                                     "--tick-ms",    "100"};
    argv.insert(argv.end(), server_flags_.begin(), server_flags_.end());
    server_.start(argv, dir_ + "/server.log");
    // Up once it serves: as the leader, or as a standby naming one. (On PostgreSQL a server
    // that takes the leader lease answers /health as a standby naming no leader for a moment,
    // then closes that listener and restores before it listens again: a request sent then
    // found nothing listening.)
    if (!eventually([&] {
          httplib::Client c("127.0.0.1", port_);
          auto r = c.Get("/api/v1/health");
          if (!r || r->status != 200) return false;
          const auto h = json::parse(r->body, nullptr, false);
          return !h.is_object() || h.value("role", "") != "standby" ||
                 !h.value("leader", std::string()).empty();
        })) {
      fail("the server did not come up; see " + dir_ + "/server.log");
    }
    // The token file is written once the server listens: it may come just after /health.
    if (admin_.empty() && !eventually([&] {
          std::ifstream in(dir_ + "/admin-token");
          std::getline(in, admin_);
          return !admin_.empty();
        })) {
      fail("the server printed no admin token");
    }
  }
  void kill_server(int sig = SIGKILL) { server_.signal(sig); }
  // The flags of the next start_server (after the default ones): a restart on another store.
  void set_server_flags(std::vector<std::string> flags) { server_flags_ = std::move(flags); }
  pid_t server_pid() const { return server_.pid(); }
  int port() const { return port_; }
  const std::string& admin() const { return admin_; }
  // The agent token made by start_agent (empty before).
  std::string agent_token(const std::string& name) const {
    auto it = tokens_.find(name);
    return it == tokens_.end() ? "" : it->second;
  }

  // A fake node of `gpus` H100s whose telemetry files live in <dir>/ctl-<name>/.
  std::string fake_node_yaml(const std::string& name, int gpus) const {
    std::ostringstream y;
    y << "model: H100\n"
      << "name: NVIDIA H100 80GB HBM3\n"
      << "gpus: " << gpus << "\n"
      << "memory_mib: 81559\n"
      << "control_dir: " << control_dir(name) << "\n";
    if (auto e = node_yaml_extra_.find(name); e != node_yaml_extra_.end()) y << e->second;
    return y.str();
  }
  // More of node `name`'s fake backend file (docs/agent.md), e.g. its MIG instances; before
  // its first start_agent.
  void node_yaml_extra(const std::string& name, const std::string& yaml) {
    node_yaml_extra_[name] = yaml;
  }
  std::string control_dir(const std::string& name) const { return dir_ + "/ctl-" + name; }

  void start_agent(const std::string& name, int gpus = 8, std::vector<std::string> flags = {}) {
    if (!tokens_.count(name)) {
      auto r = post("/api/v1/tokens", {{"name", "agent-" + name},
                                       {"role", "agent"},
                                       {"subject", "agent-" + name},
                                       {"scope", name}});
      if (r.status != 201) fail("cannot create an agent token: " + r.raw);
      tokens_[name] = r.body["token"].get<std::string>();
      std::filesystem::create_directories(control_dir(name));
      std::ofstream(dir_ + "/" + name + ".yaml") << fake_node_yaml(name, gpus);
      std::ofstream(dir_ + "/" + name + ".token") << tokens_[name] << "\n";
      // As an operator keeps it: readable by the agent's user only.
      std::filesystem::permissions(
          dir_ + "/" + name + ".token",
          std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    }
    std::vector<std::string> argv = {ALLOT_BIN, "agent", "--server", url(), "--token-file",
                                     dir_ + "/" + name + ".token", "--node", name, "--cluster",
                                     "local", "--backend", "fake:" + dir_ + "/" + name + ".yaml",
                                     "--state-dir", dir_ + "/state-" + name, "--poll-ms", "100",
                                     // The tests' jobs write into the test's directory as the
                                     // test's user; a test of owners' accounts passes `owner`.
                                     "--run-jobs-as", "agent"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto& p = agents_[name];
    p = std::make_unique<Process>();
    p->start(argv, agent_log(name));
    if (!eventually([&] {
          auto n = get("/api/v1/nodes/" + name);
          return n.status == 200 && n.body.value("health", "") == "healthy";
        })) {
      fail("agent " + name + " did not register; see " + dir_ + "/agent-" + name + ".log");
    }
  }
  void kill_agent(const std::string& name, int sig = SIGKILL) {
    auto it = agents_.find(name);
    if (it != agents_.end()) it->second->signal(sig);
  }

  Reply call(const std::string& method, const std::string& path, const json* body = nullptr) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10);
    httplib::Headers h = {{"Authorization", "Bearer " + admin_}};
    auto r = method == "GET"
                 ? c.Get(path.c_str(), h)
                 : c.Post(path.c_str(), h, body ? body->dump() : "", "application/json");
    Reply out;
    if (!r) return out;
    out.status = r->status;
    out.raw = r->body;
    out.body = json::parse(r->body, nullptr, false);
    return out;
  }
  Reply get(const std::string& path) { return call("GET", path); }
  Reply post(const std::string& path, const json& body) { return call("POST", path, &body); }

  void budget(const std::string& path, double share) {
    auto r = post("/api/v1/budgets", {{"path", path}, {"share", share}, {"members", {"admin"}}});
    if (r.status != 200) fail("cannot set budget " + path + ": " + r.raw);
  }

  // Submits `spec` (idempotency key added) and returns the job id.
  std::uint64_t submit(json spec) {
    spec["idempotency_key"] = "k" + std::to_string(++submitted_);
    auto r = post("/api/v1/jobs", spec);
    if (r.status != 201) fail("submit refused: " + r.raw);
    return r.body["id"].get<std::uint64_t>();
  }
  json job(std::uint64_t id) { return get("/api/v1/jobs/" + std::to_string(id)).body; }
  std::string state(std::uint64_t id) { return job(id).value("state", "?"); }
  bool wait_state(std::uint64_t id, const std::string& want,
                  std::chrono::milliseconds t = 20000ms) {
    return eventually([&] { return state(id) == want; }, t);
  }
  std::vector<json> events(std::uint64_t id) {
    auto r = get("/api/v1/jobs/" + std::to_string(id) + "/events");
    std::vector<json> out;
    if (r.body.is_object()) {
      for (const auto& e : r.body["events"]) out.push_back(e);
    }
    return out;
  }
  std::string history(std::uint64_t id) {
    std::string s;
    for (const auto& e : events(id)) {
      s += e.value("from", "") + "->" + e.value("to", "") + " (" + e.value("reason", "") + ")\n";
    }
    return s;
  }

  // A job command that marks its start, end and pid in out/<tag>.*, then runs `body`.
  std::vector<std::string> marked(const std::string& tag, const std::string& body) const {
    const std::string o = dir_ + "/out/" + tag;
    return {"/bin/sh", "-c",
            "echo $$ >> " + o + ".pid; echo \"start $ALLOT_RUN $(date +%s.%N)\" >> " + o +
                ".log; " + body};
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    keep_ = true;
    throw std::runtime_error(why);
  }

  bool keep_ = false;
  std::vector<std::string> server_flags_;
  std::string dir_;
  int port_ = 0;
  std::string admin_;
  Process server_;
  std::map<std::string, std::unique_ptr<Process>> agents_;
  std::map<std::string, std::string> tokens_;
  std::map<std::string, std::string> node_yaml_extra_;
  int submitted_ = 0;
};

}  // namespace allot::e2e
