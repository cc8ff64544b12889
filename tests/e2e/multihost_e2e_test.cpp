// Many hosts on one machine (issue 16, item 3): a server and two agents, each in a network
// namespace of its own, joined by veth links through the server's namespace (which routes
// between them), over HTTPS with the certificate verified. A gang job's ranks reach rank 0 at
// its MASTER_ADDR across hosts; an agent that cannot verify the server's certificate never
// registers; a host whose link goes down gives its job up before the server starts it on the
// other host, and comes back healthy when the link returns. Needs root (network namespaces);
// skipped, saying why, where they cannot be made. Nothing is changed outside the namespaces
// this test makes and removes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cluster.h"

namespace allot::e2e {
namespace {

// Runs a command through the shell; its output (stdout and stderr) in `out` when given.
int shell(const std::string& cmd, std::string* out = nullptr) {
  std::string buf;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char chunk[512];
  while (std::fgets(chunk, sizeof chunk, p)) buf += chunk;
  const int st = ::pclose(p);
  if (out) *out = buf;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string ip_binary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

// The namespaces: the server's ("s", 10.77.1.1 towards h1 and 10.77.2.1 towards h2, forwarding
// between them) and one per host (h1 10.77.1.2, h2 10.77.2.2, each routing through the server's).
class Hosts {
 public:
  explicit Hosts(std::string ip) : ip_(std::move(ip)) {
    const std::string tag = std::to_string(::getpid());
    server_ns = "allot-s-" + tag;
    h1_ns = "allot-h1-" + tag;
    h2_ns = "allot-h2-" + tag;
  }
  ~Hosts() { remove(); }
  Hosts(const Hosts&) = delete;
  Hosts& operator=(const Hosts&) = delete;

  // "" when made; else why not (the first command that failed, and what it said).
  std::string make() {
    std::string out;
    if (shell(ip_ + " netns add " + server_ns, &out) != 0) return "ip netns add: " + out;
    made_.push_back(server_ns);
    const std::vector<std::string> steps = {
        "netns add " + h1_ns,
        "netns add " + h2_ns,
        "-n " + server_ns + " link set lo up",
        "-n " + h1_ns + " link set lo up",
        "-n " + h2_ns + " link set lo up",
        "-n " + server_ns + " link add a1 type veth peer name eth0 netns " + h1_ns,
        "-n " + server_ns + " link add a2 type veth peer name eth0 netns " + h2_ns,
        "-n " + server_ns + " addr add 10.77.1.1/24 dev a1",
        "-n " + server_ns + " addr add 10.77.2.1/24 dev a2",
        "-n " + server_ns + " link set a1 up",
        "-n " + server_ns + " link set a2 up",
        "-n " + h1_ns + " addr add 10.77.1.2/24 dev eth0",
        "-n " + h1_ns + " link set eth0 up",
        "-n " + h1_ns + " route add default via 10.77.1.1",
        "-n " + h2_ns + " addr add 10.77.2.2/24 dev eth0",
        "-n " + h2_ns + " link set eth0 up",
        "-n " + h2_ns + " route add default via 10.77.2.1",
        // Per namespace: the machine's own forwarding setting is untouched.
        "netns exec " + server_ns + " sysctl -qw net.ipv4.ip_forward=1",
    };
    for (const auto& s : steps) {
      if (shell(ip_ + " " + s, &out) != 0) return "ip " + s + ": " + out;
      if (s.rfind("netns add ", 0) == 0) made_.push_back(s.substr(10));
    }
    return "";
  }
  // Takes host h's link (1 or 2) down or up, on the server's side.
  bool link(int h, bool up) {
    return shell(ip_ + " -n " + server_ns + " link set a" + std::to_string(h) +
                 (up ? " up" : " down")) == 0;
  }
  // Enters the server's namespace on the calling thread (its sockets and the processes it forks
  // are there from now on); back to the thread's own at leave().
  bool enter_server() {
    own_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    const int fd = ::open(("/run/netns/" + server_ns).c_str(), O_RDONLY | O_CLOEXEC);
    const bool ok = own_ >= 0 && fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0;
    if (fd >= 0) ::close(fd);
    return ok;
  }
  void leave() {
    if (own_ < 0) return;
    [[maybe_unused]] const int r = ::setns(own_, CLONE_NEWNET);
    ::close(own_);
    own_ = -1;
  }
  void remove() {
    leave();
    for (const auto& ns : made_) shell(ip_ + " netns del " + ns);
    made_.clear();
  }

  std::string server_ns, h1_ns, h2_ns;

 private:
  std::string ip_;
  std::vector<std::string> made_;
  int own_ = -1;
};

class MultiHost : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0)
      GTEST_SKIP() << "network namespaces need root; running as uid " << ::geteuid();
    ip_ = ip_binary();
    if (ip_.empty()) GTEST_SKIP() << "no ip(8) binary (iproute2) to make network namespaces";
    hosts_ = std::make_unique<Hosts>(ip_);
    if (auto why = hosts_->make(); !why.empty()) {
      GTEST_SKIP() << "cannot make network namespaces here: " << why;
    }
    dir_ =
        std::filesystem::temp_directory_path() / ("allot-multihost-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_ + "/out");
    cert_ = dir_ + "/cert.pem";
    key_ = dir_ + "/key.pem";
    std::string out;
    ASSERT_EQ(shell("openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key_ + " -out " + cert_ +
                        " -days 1 -subj /CN=allot-server -addext " +
                        "subjectAltName=IP:10.77.1.1,IP:10.77.2.1",
                    &out),
              0)
        << out;
    ASSERT_TRUE(hosts_->enter_server()) << "setns into " << hosts_->server_ns;
    port_ = free_port();  // in the server's namespace
    server_.start(
        {ALLOT_BIN, "server", "--data", dir_ + "/allot.db", "--host", "0.0.0.0", "--port",
         std::to_string(port_), "--token-file", dir_ + "/admin-token", "--tick-ms", "100",
         "--tls-cert", cert_, "--tls-key", key_,
         // Short leases so that a partition plays out in seconds.
         "--lease-seconds", "2", "--node-timeout-seconds", "8", "--stop-grace-seconds", "1"},
        dir_ + "/server.log");
    ASSERT_TRUE(eventually([&] {
      std::ifstream in(dir_ + "/admin-token");
      std::getline(in, admin_);
      return !admin_.empty() && call("GET", "/api/v1/health").status == 200;
    })) << slurp(dir_ + "/server.log");
    ASSERT_EQ(
        call("POST", "/api/v1/budgets", {{"path", "/lab/a"}, {"share", 1}, {"members", {"admin"}}})
            .status,
        200);
  }
  void TearDown() override {
    agents_.clear();
    server_.signal(SIGKILL);
    if (!dir_.empty()) {
      shell("pkill -KILL -f " + dir_);
      if (!HasFailure()) std::filesystem::remove_all(dir_);
    }
    if (hosts_) hosts_->remove();
  }

  // An admin's request to the server, over HTTPS with its certificate verified.
  Reply call(const std::string& method, const std::string& path, const json& body = nullptr) {
    httplib::SSLClient c("10.77.1.1", port_);
    c.set_ca_cert_path(cert_.c_str());
    c.enable_server_certificate_verification(true);
    c.set_read_timeout(10);
    httplib::Headers h = {{"Authorization", "Bearer " + admin_}};
    auto r = method == "GET"
                 ? c.Get(path.c_str(), h)
                 : c.Post(path.c_str(), h, body.is_null() ? "{}" : body.dump(), "application/json");
    Reply out;
    if (!r) {
      out.raw = httplib::to_string(r.error());
      return out;
    }
    out.status = r->status;
    out.raw = r->body;
    out.body = json::parse(r->body, nullptr, false);
    return out;
  }
  json job(std::uint64_t id) { return call("GET", "/api/v1/jobs/" + std::to_string(id)).body; }
  std::string health(const std::string& node) {
    return call("GET", "/api/v1/nodes/" + node).body.value("health", "");
  }
  std::uint64_t submit(json spec) {
    spec["idempotency_key"] = "k" + std::to_string(++submitted_);
    auto r = call("POST", "/api/v1/jobs", spec);
    EXPECT_EQ(r.status, 201) << r.raw;
    return r.body.value("id", std::uint64_t{0});
  }

  // An agent for node `name` in namespace `ns`, reaching the server at `server_ip`; `verify`:
  // with the server's certificate as its CA (else the system's, which do not know it).
  void start_agent(const std::string& name, const std::string& ns, const std::string& server_ip,
                   const std::string& address, bool verify = true) {
    auto t = call("POST", "/api/v1/tokens",
                  {{"name", "agent-" + name},
                   {"role", "agent"},
                   {"subject", "agent-" + name},
                   {"scope", name}});
    ASSERT_EQ(t.status, 201) << t.raw;
    const std::string token = dir_ + "/" + name + ".token";
    std::ofstream(token) << t.body["token"].get<std::string>() << "\n";
    std::filesystem::permissions(
        token, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    const std::string ctl = dir_ + "/ctl-" + name;
    std::filesystem::create_directories(ctl);
    std::ofstream(dir_ + "/" + name + ".yaml")
        << "model: H100\nname: NVIDIA H100 80GB HBM3\ngpus: 8\nmemory_mib: 81559\ncontrol_dir: "
        << ctl << "\n";
    std::vector<std::string> argv = {ip_,
                                     "netns",
                                     "exec",
                                     ns,
                                     ALLOT_BIN,
                                     "agent",
                                     "--server",
                                     "https://" + server_ip + ":" + std::to_string(port_),
                                     "--token-file",
                                     token,
                                     "--node",
                                     name,
                                     "--cluster",
                                     "local",
                                     "--address",
                                     address,
                                     "--backend",
                                     "fake:" + dir_ + "/" + name + ".yaml",
                                     "--state-dir",
                                     dir_ + "/state-" + name,
                                     "--poll-ms",
                                     "100",
                                     "--run-jobs-as",
                                     "agent"};
    if (verify) {
      argv.push_back("--cacert");
      argv.push_back(cert_);
    }
    auto& p = agents_[name];
    p = std::make_unique<Process>();
    p->start(argv, dir_ + "/agent-" + name + ".log");
  }
  std::string out(const std::string& name) const { return dir_ + "/out/" + name; }

  std::string ip_, dir_, cert_, key_, admin_;
  int port_ = 0;
  int submitted_ = 0;
  std::unique_ptr<Hosts> hosts_;
  Process server_;
  std::map<std::string, std::unique_ptr<Process>> agents_;
};

TEST_F(MultiHost, GangAcrossHostsOverVerifiedTlsAndAPartitionedHost) {
  start_agent("h1", hosts_->h1_ns, "10.77.1.1", "10.77.1.2");
  start_agent("h2", hosts_->h2_ns, "10.77.2.1", "10.77.2.2");
  for (const char* n : {"h1", "h2"}) {
    ASSERT_TRUE(eventually([&] { return health(n) == "healthy"; }))
        << n << " did not register:\n"
        << slurp(dir_ + "/agent-" + n + ".log");
  }
  // Without the server's certificate as its CA, an agent refuses the connection: it never
  // registers, and says why.
  start_agent("untrusting", hosts_->h1_ns, "10.77.1.1", "10.77.1.2", /*verify=*/false);
  EXPECT_TRUE(eventually(
      [&] { return slurp(dir_ + "/agent-untrusting.log").find("SSL") != std::string::npos; },
      10000ms))
      << slurp(dir_ + "/agent-untrusting.log");
  EXPECT_EQ(call("GET", "/api/v1/nodes/untrusting").status, 404);
  agents_.erase("untrusting");

  // A gang over both hosts: the rank that is not 0 connects to MASTER_ADDR:MASTER_PORT, on the
  // other host, and says hello; rank 0 writes what it heard.
  const std::string listen =
      "perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => \"0.0.0.0\", "
      "LocalPort => $ENV{MASTER_PORT}, Listen => 1, ReuseAddr => 1) or die \"listen: $!\"; "
      "$c = $s->accept; $l = <$c>; open(F, \">\", \"" +
      out("gang.heard") + "\"); print F $l; close F'";
  const std::string speak =
      "perl -MIO::Socket::INET -e 'for (1 .. 400) { $c = IO::Socket::INET->new(PeerAddr => "
      "$ENV{MASTER_ADDR}, PeerPort => $ENV{MASTER_PORT}) and last; select(undef, undef, undef, "
      "0.05) } $c or die \"connect: $!\"; print $c \"hello from $ENV{ALLOT_NODE} to "
      "$ENV{MASTER_ADDR}\\n\"'";
  const auto gang =
      submit({{"budget", "/lab/a"},
              {"nodes", 2},
              {"gpus_per_node", 8},
              {"min_runtime", 60},
              {"command",
               {"/bin/sh", "-c",
                "if [ \"$ALLOT_NODE_RANK\" = 0 ]; then " + listen + "; else " + speak + "; fi"}}});
  ASSERT_TRUE(eventually([&] { return job(gang).value("state", "") == "succeeded"; }, 30000ms))
      << job(gang).dump() << "\n"
      << slurp(dir_ + "/agent-h1.log") << slurp(dir_ + "/agent-h2.log");
  const std::string heard = slurp(out("gang.heard"));
  EXPECT_TRUE(heard == "hello from h1 to 10.77.2.2\n" || heard == "hello from h2 to 10.77.1.2\n")
      << heard;

  // A partition: the link of the host running a job goes down. Its agent gives the job up when
  // its lease runs out, the server marks the host down and starts the job on the other one.
  const std::string mark = out("p.log");
  const auto j = submit(
      {{"budget", "/lab/a"},
       {"gpus_per_node", 8},
       {"min_runtime", 60},
       {"resumable", true},
       {"command",
        {"/bin/sh", "-c",
         "echo \"start $ALLOT_RUN $(date +%s.%N)\" >> " + mark + "; trap 'echo \"end $ALLOT_RUN " +
             "$(date +%s.%N)\" >> " + mark + "; exit 0' TERM; sleep 600 & wait"}}});
  ASSERT_TRUE(eventually([&] { return job(j).value("state", "") == "running"; }));
  const std::string first = job(j)["placement"][0]["node"].get<std::string>();
  const std::string other = first == "h1" ? "h2" : "h1";
  ASSERT_TRUE(hosts_->link(first == "h1" ? 1 : 2, false));
  ASSERT_TRUE(eventually([&] { return job(j).value("runs", 0) == 2; }, 30000ms)) << job(j).dump();
  ASSERT_TRUE(eventually([&] { return job(j).value("state", "") == "running"; }));
  EXPECT_EQ(job(j)["placement"][0]["node"], other);
  EXPECT_EQ(health(first), "down");
  auto marks = lines_of(mark);
  // (A shell may run its TERM trap twice: the agent signals the process and its group.)
  marks.erase(std::unique(marks.begin(), marks.end(),
                          [](const std::string& x, const std::string& y) {
                            return x.rfind("end 1 ", 0) == 0 && y.rfind("end 1 ", 0) == 0;
                          }),
              marks.end());
  ASSERT_GE(marks.size(), 3u) << slurp(mark);
  EXPECT_EQ(marks[0].rfind("start 1 ", 0), 0u) << marks[0];
  EXPECT_EQ(marks[1].rfind("end 1 ", 0), 0u) << marks[1];
  EXPECT_EQ(marks[2].rfind("start 2 ", 0), 0u) << marks[2];
  const auto at = [](const std::string& m) { return std::stod(m.substr(m.rfind(' ') + 1)); };
  EXPECT_LT(at(marks[1]), at(marks[2])) << "the job ran on both hosts at once";
  // The link returns: the host comes back healthy and runs nothing; the job stays where it is.
  ASSERT_TRUE(hosts_->link(first == "h1" ? 1 : 2, true));
  ASSERT_TRUE(eventually([&] { return health(first) == "healthy"; }))
      << slurp(dir_ + "/agent-" + first + ".log");
  EXPECT_EQ(job(j)["runs"], 2);
  EXPECT_EQ(job(j)["placement"][0]["node"], other);
}

}  // namespace
}  // namespace allot::e2e
