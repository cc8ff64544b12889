// A fleet of simulated agents against a real `allot server` (SQLite, loopback): each node is
// registered, then its "agent" keeps what a real agent keeps on an idle cluster (docs/agent.md):
// an assignment watch held on a connection of its own (GET .../assignments?wait=25&since=V,
// renewed as it is answered), and on a second connection a heartbeat every 5 s and telemetry
// (8 GPUs) every 10 s, each first sent at a random moment of its period. One epoll thread drives
// every connection. Reported: the server's CPU over the measured window (utime + stime from
// /proc, as a share of one core) and the latency of every request answered at once (heartbeats,
// telemetry, a watch whose version is stale), by kind: p50, p99, max.
//
//   build/bench/fleet_load [agents=2048] [seconds=60] [heartbeat-ms=5000] [telemetry-ms=10000]
//
// The agents use the administrator's token (one principal: the per-token request limit, which
// administrators are exempt from, does not count them), and the server's per-address connection
// limit is lifted (every agent here is 127.0.0.1).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../tests/e2e/cluster.h"

namespace {

using Clock = std::chrono::steady_clock;
enum Kind { kHeartbeat, kTelemetry, kWatch, kKinds };
const char* const kNames[] = {"heartbeat", "telemetry", "watch (answered at once)"};

struct Conn {
  int fd = -1;
  int agent = 0;
  bool watch = false;
  std::string out, in;
  std::deque<std::pair<Kind, Clock::time_point>> pending;
};

struct Agent {
  std::string name, since;
  Conn main, watch;
  Clock::time_point next_heartbeat, next_telemetry;
};

double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto p = s.rfind(')');
  std::istringstream f(s.substr(p + 2));
  std::string x;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 13; ++i) f >> x;  // fields 3..13
  f >> utime >> stime;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);  // EINPROGRESS
  return fd;
}

double pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace allot::e2e;  // NOLINT(google-build-using-namespace)
  const int n = argc > 1 ? std::atoi(argv[1]) : 2048;
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 60;
  const auto heartbeat = std::chrono::milliseconds(argc > 3 ? std::atoi(argv[3]) : 5000);
  const auto telemetry = std::chrono::milliseconds(argc > 4 ? std::atoi(argv[4]) : 10000);
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  try {
    Cluster c({"--tick-ms", "1000", "--max-connections-per-address", "0"});
    c.start_server();
    const std::string token = c.admin();
    std::vector<Agent> agents(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      char name[16];
      std::snprintf(name, sizeof name, "f%05d", i);
      agents[i].name = name;
      auto r = c.post("/api/v1/nodes",
                      {{"name", name}, {"cluster", "c1"}, {"model", "H100"}, {"gpus", 8}});
      if (r.status != 201 && r.status != 200) {
        std::fprintf(stderr, "cannot register %s: %s\n", name, r.raw.c_str());
        return 1;
      }
    }
    std::string gpus = "[";
    for (int g = 0; g < 8; ++g) {
      gpus += (g ? "," : "") + std::string("{\"index\":") + std::to_string(g) +
              ",\"util_pct\":0,\"mem_used_mib\":0,\"mem_total_mib\":81559,\"temp_c\":31,"
              "\"power_w\":70,\"healthy\":true}";
    }
    gpus += "]";
    const int ep = epoll_create1(0);
    std::mt19937 rng(1);
    const auto t0 = Clock::now();
    auto add = [&](Conn& k, int agent, bool watch) {
      k.fd = connect_to(c.port());
      k.agent = agent;
      k.watch = watch;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
      ev.data.ptr = &k;
      epoll_ctl(ep, EPOLL_CTL_ADD, k.fd, &ev);
    };
    auto request = [&](Conn& k, Kind kind, const std::string& method, const std::string& path,
                       const std::string& body) {
      k.out +=
          method + " " + path + " HTTP/1.1\r\nHost: b\r\nAuthorization: Bearer " + token + "\r\n";
      if (!body.empty()) {
        k.out +=
            "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
            "\r\n";
      }
      k.out += "\r\n" + body;
      k.pending.emplace_back(kind, Clock::now());
    };
    auto flush = [&](Conn& k) {
      while (!k.out.empty()) {
        const ssize_t w = ::send(k.fd, k.out.data(), k.out.size(), MSG_NOSIGNAL);
        if (w <= 0) return;
        k.out.erase(0, static_cast<std::size_t>(w));
      }
    };
    auto watch = [&](Agent& a) {
      request(a.watch, kWatch, "GET",
              "/api/v1/agent/nodes/" + a.name + "/assignments?wait=25" +
                  (a.since.empty() ? "" : "&since=" + a.since),
              "");
      flush(a.watch);
    };
    for (int i = 0; i < n; ++i) {
      auto& a = agents[i];
      add(a.main, i, false);
      add(a.watch, i, true);
      a.next_heartbeat = t0 + std::chrono::milliseconds(rng() % heartbeat.count());
      a.next_telemetry = t0 + std::chrono::milliseconds(rng() % telemetry.count());
      watch(a);
    }
    std::vector<double> lat[kKinds];
    long answered[kKinds] = {0, 0, 0}, errors = 0, held_answers = 0, reconnects = 0, lost = 0;
    const auto warm = t0 + std::chrono::seconds(10);  // every agent has sent each kind once
    const auto end = warm + std::chrono::seconds(seconds);
    double cpu0 = 0;
    bool measuring = false;
    epoll_event evs[512];
    while (Clock::now() < end) {
      const auto now = Clock::now();
      if (!measuring && now >= warm) {
        measuring = true;
        cpu0 = cpu_seconds(c.server_pid());
      }
      for (auto& a : agents) {
        if (now >= a.next_heartbeat) {
          request(a.main, kHeartbeat, "POST", "/api/v1/nodes/" + a.name + "/heartbeat",
                  "{\"health\":\"healthy\"}");
          a.next_heartbeat += heartbeat;
          flush(a.main);
        }
        if (now >= a.next_telemetry) {
          request(a.main, kTelemetry, "POST", "/api/v1/agent/nodes/" + a.name + "/telemetry",
                  "{\"time\":" + std::to_string(std::time(nullptr)) + ",\"gpus\":" + gpus +
                      ",\"jobs\":[]}");
          a.next_telemetry += telemetry;
          flush(a.main);
        }
      }
      const int got = epoll_wait(ep, evs, 512, 5);
      for (int e = 0; e < got; ++e) {
        auto& k = *static_cast<Conn*>(evs[e].data.ptr);
        if (evs[e].events & EPOLLOUT) flush(k);
        if (!(evs[e].events & EPOLLIN)) continue;
        char buf[65536];
        bool closed = false;
        for (;;) {
          const ssize_t r = ::recv(k.fd, buf, sizeof buf, 0);
          if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) closed = true;
          if (r <= 0) break;
          k.in.append(buf, static_cast<std::size_t>(r));
        }
        if (closed) {
          // The server closed an idle keep-alive connection (or failed): a new one, as an
          // agent's HTTP client opens; what it had not answered is lost (counted).
          ::close(k.fd);
          ++reconnects;
          lost += static_cast<long>(k.pending.size());
          k.pending.clear();
          k.in.clear();
          k.out.clear();
          add(k, k.agent, k.watch);
          if (k.watch) watch(agents[static_cast<std::size_t>(k.agent)]);
          continue;
        }
        // Whole answers (Content-Length framed).
        for (;;) {
          const auto head = k.in.find("\r\n\r\n");
          if (head == std::string::npos) break;
          const auto cl = k.in.find("Content-Length: ");
          if (cl == std::string::npos || cl > head) {
            std::fprintf(stderr, "an answer without Content-Length\n");
            return 1;
          }
          const std::size_t len = std::stoul(k.in.substr(cl + 16));
          if (k.in.size() < head + 4 + len) break;
          const int status = std::atoi(k.in.c_str() + 9);
          const std::string body = k.in.substr(head + 4, len);
          k.in.erase(0, head + 4 + len);
          if (k.pending.empty()) continue;
          auto [kind, sent] = k.pending.front();
          k.pending.pop_front();
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - sent).count();
          if (status != 200) ++errors;
          auto& a = agents[static_cast<std::size_t>(k.agent)];
          if (kind == kWatch) {
            // Held until it timed out (or changed): not a latency; answered with a stale
            // version: one.
            const bool was_held = !a.since.empty();
            auto v = body.find("\"version\":\"");
            if (v != std::string::npos) a.since = body.substr(v + 11, 16);
            if (was_held) {
              ++held_answers;
            } else if (measuring) {
              lat[kind].push_back(ms);
            }
            watch(a);
          } else if (measuring) {
            lat[kind].push_back(ms);
          }
          if (measuring) ++answered[kind];
        }
      }
    }
    const double cpu = cpu_seconds(c.server_pid()) - cpu0;
    std::printf("%d agents (%d GPUs), %d s measured after 10 s of warm-up\n", n, n * 8, seconds);
    std::printf("server CPU: %.1f s in %d s = %.0f%% of one core\n", cpu, seconds,
                100.0 * cpu / seconds);
    for (int k = 0; k < kKinds; ++k) {
      std::printf("%-26s %6ld answered (%.0f/s)  p50 %.1f ms  p99 %.1f ms  max %.1f ms\n",
                  kNames[k], answered[k], static_cast<double>(answered[k]) / seconds,
                  pct(lat[k], 0.5), pct(lat[k], 0.99), pct(lat[k], 1.0));
    }
    std::printf(
        "watches answered after being held: %ld; non-200 answers: %ld; connections closed by "
        "the server and reopened: %ld (requests unanswered on them: %ld)\n",
        held_answers, errors, reconnects, lost);
    return errors == 0 && lost == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
