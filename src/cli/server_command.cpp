// `allot server`: the control plane on the embedded store. `allot up`: the same plus a local
// cluster of node agents in this process (cli/local_cluster.h: 11 nodes x 8 H100 by default, fake
// GPUs unless NVML finds real ones), whose jobs run as real processes: one command to a cluster.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli/commands.h"
#include "cli/leadership.h"
#include "cli/local_cluster.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/change_feed.h"
#include "server/controller.h"
#include "server/event_log.h"
#include "server/prometheus.h"
#include "store/open_store.h"
#include "store/postgres_store.h"

namespace allot::cli {
namespace {

// How to run this binary from a shell: "allot" when that name on $PATH is this very file, else
// its absolute path (after the README's build, build/src/cli/allot is not on $PATH).
std::string command_name() {
  std::error_code ec;
  const auto self = std::filesystem::canonical("/proc/self/exe", ec);
  if (ec) return "allot";
  if (const char* path = std::getenv("PATH")) {
    std::string dirs = path;
    std::size_t start = 0;
    while (start <= dirs.size()) {
      auto colon = dirs.find(':', start);
      if (colon == std::string::npos) colon = dirs.size();
      const auto dir = dirs.substr(start, colon - start);
      start = colon + 1;
      if (dir.empty()) continue;
      std::error_code e2;
      const auto found = std::filesystem::canonical(std::filesystem::path(dir) / "allot", e2);
      if (!e2) return found == self ? "allot" : self.string();
    }
  }
  return self.string();
}

struct ServerArgs {
  std::string data;
  std::string store;  // --store: sqlite:PATH (default: sqlite:<data>) or postgres://...
  std::string host = "127.0.0.1";
  int port = 7400;
  std::string tls_cert, tls_key;
  std::string addr_file, token_file;
  int tick_ms = 1000;
  int sim_nodes = 0;
  core::Duration sim_default = 300;
  int threads = 64;
  int lease_seconds = 30;
  int node_timeout_seconds = 45;
  int stop_grace_seconds = 30;
  core::PolicyConfig policy;  // the policy's constants; defaults but for the flags that set them
  int local_nodes = 0;   // allot up: node agents in this process (fake GPUs without a real one)
  int telemetry_ms = 0;  // allot up: their telemetry report interval (0: the agent's default)
  std::string backend = "auto";
  server::SubmitLimits submit;     // per principal (server/quota.h)
  server::RequestLimits requests;  // every route (server/request_limits.h)
  int max_connections_per_address = 256;
  int advice_min_seconds = 600;  // server/advice.h: jobs measured less get no advice
  // The event log (server/event_log.h): "-" stderr, "off" none; allot server: stderr, up: off.
  std::string event_log;
  // GET /metrics without a token on an address of its own (server/prometheus.h); "" none.
  std::string metrics_host;
  int metrics_port = -1;
  // PostgreSQL: several servers on one database, one the leader (docs/store.md).
  std::string advertise;  // the URL clients reach this server at ("": from --host and --port)
  int leader_lease_seconds = 5;
};

// "HOST:PORT" or "[IPv6]:PORT" with a port of 0..65535; false if it is not that.
bool split_listen(const std::string& v, std::string& host, int& port) {
  auto colon = v.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == v.size()) return false;
  host = v.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string p = v.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) return false;
  port = std::stoi(p);
  return port <= 65535;
}

void usage(bool up) {
  std::fprintf(
      stderr,
      "usage: allot %s [options]\n"
      "  --data PATH          database file (default: %s);\n"
      "                       with --store postgres://: where job logs go (<data>.logs/)\n"
      "  --store SPEC         sqlite:PATH (the same as --data PATH) or postgres://...,\n"
      "                       a libpq URI (production; docs/store.md)\n"
      "  --host HOST          address to listen on (default 127.0.0.1)\n"
      "  --port N             port (default 7400; 0 = any free port)\n"
      "  --tls-cert FILE --tls-key FILE   serve HTTPS\n"
      "  --addr-file FILE     write the address served here once listening\n"
      "  --token-file FILE    write the admin token printed at start here (mode 0600)\n"
      "  --tick-ms N          scheduling cycle at least every N ms (default 1000)\n"
      "  --threads N          API worker threads (default 64): submissions need none,\n"
      "                       reads and other changes each hold one while answered\n"
      "  --nodes N            (up) local nodes of 8 GPUs with agents running jobs as real\n"
      "                       processes: fake H100s unless NVML finds a GPU (default 11)\n"
      "  --backend B          (up) auto | nvml | fake (default auto)\n"
      "  --telemetry-ms N     (up) the local agents' telemetry report interval\n"
      "                       (default 10000; the job page's sparklines get a point per report)\n"
      "  --sim-nodes N        simulated nodes of 8 H100: no agent, jobs only pretend\n"
      "                       to run for their expected duration (default 0)\n"
      "  --sim-duration S     simulated run time of jobs without expected_duration "
      "(default 300)\n"
      "  --lease-seconds S    how long agents keep their jobs without reaching the "
      "server (default 30)\n"
      "  --node-timeout-seconds S  a node silent this long is marked down (default 45; "
      "more than lease + 5)\n"
      "  --stop-grace-seconds S    SIGTERM to SIGKILL when a job is stopped (default "
      "30)\n"
      "  --interactive-allowance N  GPUs of interactive sessions per person protected from\n"
      "                       preemption and demotion (docs/policy.md section 6; default 0 =\n"
      "                       off; 8 is the measured setting)\n"
      "  --inference-share F  allocated inference work (services' protected replicas) holds\n"
      "                       at most F of each cluster's GPUs; beyond, replicas run\n"
      "                       unallocated (docs/policy.md section 15; default 0 = no bound)\n"
      "  --mig-dynamic        re-partition idle GPUs into the MIG instances waiting jobs name,\n"
      "                       and make them whole again for whole-GPU work (docs/policy.md\n"
      "                       section 7.5; default off: nodes' layouts are their own)\n"
      "  --mig-hold S         seconds a GPU keeps a layout the scheduler decided (default 600)\n"
      "  --mig-yield          with --mig-dynamic: unallocated work on MIG instances is\n"
      "                       preempted to make GPUs whole for waiting training, down to\n"
      "                       --inference-share of the GPUs in MIG mode (section 7.5)\n"
      "  --placement RULE     where a request up to one node goes: best-fit (default) or fgd,\n"
      "                       fragmentation gradient descent over the recent mix of requests\n"
      "                       (docs/policy.md section 14)\n"
      "  --mig-split-unallocated  with --mig-dynamic: a job naming a MIG profile, with a\n"
      "                       contract and its budget below its share, may have the\n"
      "                       unallocated work on a whole GPU preempted to split it, up to\n"
      "                       --inference-share of the GPUs in MIG mode (section 7.5)\n"
      "  --interactive-stop-grace S  seconds of notice ($ALLOT_STOP_NOTICE) and time to save\n"
      "                       before an interactive job is stopped (section 9; default 0 =\n"
      "                       an ordinary stop; 300 is the measured setting)\n"
      "  --submit-rate N      submissions a second per user, sustained (default 100; 0 = no\n"
      "                       limit); --submit-burst N at once (default 1000); beyond: 429\n"
      "  --max-waiting-jobs N jobs waiting per user (default 10000; 0 = no limit); beyond: 429\n"
      "  --max-waiting-jobs-total N  jobs waiting per user over all budgets, whatever a\n"
      "                       budget's own limits allow (default 50000; 0 = no limit)\n"
      "                       (administrators' tokens are not limited)\n"
      "  --request-rate N     requests a second per user or agent on every route, sustained\n"
      "                       (default 200; 0 = no limit; /usage, /report and /advice\n"
      "                       count 10);\n"
      "                       --request-burst N at once (default 2000); beyond: 429\n"
      "  --unauthenticated-rate N  requests a second per address without a valid token\n"
      "                       (default 20; 0 = no limit); --unauthenticated-burst N (200)\n"
      "  --max-connections-per-address N  open connections from one address (default 256;\n"
      "                       0 = no limit); beyond: 429 and closed\n"
      "  --advice-min-seconds N  right-sizing advice (allot advise) for jobs measured at\n"
      "                       least N seconds (default 600)\n"
      "  --event-log FILE     one JSON line per job transition, stop, node health and budget\n"
      "                       change, appended to FILE; '-' stderr, 'off' none (default: %s)\n"
      "  --metrics-listen HOST:PORT  also serve GET /metrics there without a token (on the\n"
      "                       API port /metrics needs an admin or metrics token)\n"
      "  --advertise-addr URL (postgres) the URL clients reach this server at, named to them\n"
      "                       by standbys (default: from --host and --port); one per server\n"
      "  --leader-lease-seconds S  (postgres) a leader silent this long is replaced by a\n"
      "                       standby (default 5; renewed every S/5 seconds)\n"
      "job logs go to <data>.logs/\n",
      up ? "up" : "server", up ? "a fresh temporary directory" : "./allot.db",
      up ? "off" : "stderr");
}

bool parse(int argc, char** argv, ServerArgs& a, bool up) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&](const char* what) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "allot: %s needs %s\n", k.c_str(), what);
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&](const char* what) {
      const char* v = next(what);
      char* end = nullptr;
      long n = std::strtol(v, &end, 10);
      if (*v == '\0' || *end != '\0' || n < 0 || n > 1'000'000) {
        std::fprintf(stderr, "allot: %s: '%s' is not a non-negative number\n", k.c_str(), v);
        std::exit(2);
      }
      return static_cast<int>(n);
    };
    if (k == "--help" || k == "-h") {
      usage(up);
      std::exit(0);
    } else if (k == "--data") {
      a.data = next("a path");
    } else if (k == "--store") {
      a.store = next("sqlite:PATH or postgres://...");
    } else if (k == "--host") {
      a.host = next("a host");
    } else if (k == "--port") {
      a.port = number("a port");
    } else if (k == "--tls-cert") {
      a.tls_cert = next("a file");
    } else if (k == "--tls-key") {
      a.tls_key = next("a file");
    } else if (k == "--addr-file") {
      a.addr_file = next("a file");
    } else if (k == "--token-file") {
      a.token_file = next("a file");
    } else if (k == "--tick-ms") {
      a.tick_ms = std::max(1, number("milliseconds"));
    } else if (k == "--threads") {
      a.threads = std::max(1, number("a count"));
    } else if (k == "--sim-nodes") {
      a.sim_nodes = number("a count");
    } else if (k == "--sim-duration") {
      a.sim_default = number("seconds");
    } else if (k == "--nodes" && up) {
      a.local_nodes = number("a count");
    } else if (k == "--telemetry-ms" && up) {
      a.telemetry_ms = number("milliseconds");
      if (a.telemetry_ms < 100 || a.telemetry_ms > 3'600'000) {
        std::fprintf(stderr, "allot: --telemetry-ms must be 100 to 3600000\n");
        std::exit(2);
      }
    } else if (k == "--backend" && up) {
      a.backend = next("auto, nvml or fake");
      if (a.backend != "auto" && a.backend != "nvml" && a.backend != "fake") {
        std::fprintf(stderr, "allot: --backend must be auto, nvml or fake\n");
        std::exit(2);
      }
    } else if (k == "--lease-seconds") {
      a.lease_seconds = number("seconds");
    } else if (k == "--node-timeout-seconds") {
      a.node_timeout_seconds = number("seconds");
    } else if (k == "--stop-grace-seconds") {
      a.stop_grace_seconds = number("seconds");
    } else if (k == "--interactive-allowance") {
      a.policy.interactive_gpus_per_user = number("GPUs per person");
    } else if (k == "--inference-share") {
      const std::string v = next("a fraction of the cluster, 0 to 1");
      char* end = nullptr;
      const double f = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(f >= 0 && f <= 1)) {
        std::fprintf(stderr, "allot: --inference-share must be a fraction from 0 to 1\n");
        std::exit(2);
      }
      a.policy.inference_share = f;
    } else if (k == "--mig-dynamic") {
      a.policy.mig_dynamic = true;
    } else if (k == "--mig-yield") {
      a.policy.mig_yield = true;
    } else if (k == "--mig-split-unallocated") {
      a.policy.mig_split_unallocated = true;
    } else if (k == "--mig-hold") {
      a.policy.mig_hold = number("seconds");
    } else if (k == "--placement") {
      const std::string v = next("best-fit or fgd");
      if (v != "best-fit" && v != "fgd") {
        std::fprintf(stderr, "allot: --placement must be best-fit or fgd\n");
        std::exit(2);
      }
      a.policy.placement =
          v == "fgd" ? core::PlacementRule::LeastFragmenting : core::PlacementRule::BestFit;
    } else if (k == "--interactive-stop-grace") {
      a.policy.interactive_stop_grace = number("seconds");
    } else if (k == "--submit-rate") {
      a.submit.rate = number("submissions a second");
    } else if (k == "--submit-burst") {
      a.submit.burst = std::max(1, number("a count"));
    } else if (k == "--max-waiting-jobs") {
      a.submit.max_waiting = number("a count");
    } else if (k == "--max-waiting-jobs-total") {
      a.submit.max_waiting_total = number("a count");
    } else if (k == "--request-rate") {
      a.requests.rate = number("requests a second");
    } else if (k == "--request-burst") {
      a.requests.burst = std::max(1, number("a count"));
    } else if (k == "--unauthenticated-rate") {
      a.requests.unauthenticated_rate = number("requests a second");
    } else if (k == "--unauthenticated-burst") {
      a.requests.unauthenticated_burst = std::max(1, number("a count"));
    } else if (k == "--max-connections-per-address") {
      a.max_connections_per_address = number("a count");
    } else if (k == "--advice-min-seconds") {
      a.advice_min_seconds = number("seconds");
    } else if (k == "--event-log") {
      a.event_log = next("a file, '-' or 'off'");
      if (a.event_log.empty()) {
        std::fprintf(stderr, "allot: --event-log: give a file, '-' (stderr) or 'off'\n");
        std::exit(2);
      }
    } else if (k == "--advertise-addr") {
      a.advertise = next("a URL");
      if (!a.advertise.starts_with("http://") && !a.advertise.starts_with("https://")) {
        std::fprintf(stderr, "allot: --advertise-addr: '%s' is not an http:// or https:// URL\n",
                     a.advertise.c_str());
        std::exit(2);
      }
    } else if (k == "--leader-lease-seconds") {
      a.leader_lease_seconds = number("seconds");
      if (a.leader_lease_seconds < 2 || a.leader_lease_seconds > 600) {
        std::fprintf(stderr, "allot: --leader-lease-seconds: must be 2 to 600\n");
        std::exit(2);
      }
    } else if (k == "--metrics-listen") {
      const std::string v = next("HOST:PORT");
      if (!split_listen(v, a.metrics_host, a.metrics_port)) {
        std::fprintf(stderr, "allot: --metrics-listen: '%s' is not HOST:PORT (port 0-65535)\n",
                     v.c_str());
        std::exit(2);
      }
    } else {
      std::fprintf(stderr, "allot: unknown option '%s'\n", k.c_str());
      usage(up);
      return false;
    }
  }
  return true;
}

std::string dash(std::string s) {
  for (auto& c : s) {
    if (c == '_') c = '-';
  }
  return s;
}

// Writes `text` to `path`, readable by its owner only from the first byte on, and syncs it.
bool write_private(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const std::string line = text + "\n";
  bool ok = ::fchmod(fd, 0600) == 0 &&
            ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
            ::fsync(fd) == 0;
  ::close(fd);
  ok = ok && ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

int serve(ServerArgs a, bool up) {
  // Signals are taken by sigwait below; block them before any thread starts (the store's writer
  // is one), or SIGTERM during start-up would end the process on whichever thread it found.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  if (a.store.starts_with("sqlite:")) {
    const auto path = a.store.substr(7);
    if (!a.data.empty() && a.data != path) {
      std::fprintf(stderr, "allot: --store sqlite:%s and --data %s name two databases\n",
                   path.c_str(), a.data.c_str());
      return 2;
    }
    a.data = path;
  }
  if (a.data.empty()) {
    if (up) {
      auto dir =
          std::filesystem::temp_directory_path() / ("allot-up-" + std::to_string(::getpid()));
      std::filesystem::create_directories(dir);
      a.data = (dir / "allot.db").string();
    } else {
      a.data = "allot.db";
    }
  }
  server::ControllerOptions co;
  auto metrics = std::make_shared<server::ServerMetrics>();
  co.observers.push_back(metrics);
  // The dashboard's live updates (GET /api/v1/events/stream).
  auto changes = std::make_shared<server::ChangeFeed>();
  co.observers.push_back(changes);
  if (a.event_log.empty()) a.event_log = up ? "off" : "-";
  if (a.event_log != "off") {
    auto log = server::EventLog::open(a.event_log);
    if (!log.ok()) {
      std::fprintf(stderr, "allot: --event-log: %s\n", log.error().reason.c_str());
      return 2;
    }
    co.observers.push_back(log.value());
  }
  co.tick = std::chrono::milliseconds(a.tick_ms);
  co.sim_default_duration = a.sim_default;
  co.lease_seconds = a.lease_seconds;
  co.node_timeout_seconds = a.node_timeout_seconds;
  co.stop_grace_seconds = a.stop_grace_seconds;
  co.policy = a.policy;
  if (auto v = server::validate(co); !v.ok()) {
    std::fprintf(stderr, "allot: --%s: %s\n", dash(v.error().field).c_str(),
                 v.error().reason.c_str());
    return 2;
  }
  const bool postgres = store::is_postgres_spec(a.store);
  if (a.store.empty()) a.store = "sqlite:" + a.data;
  // On PostgreSQL, other servers may share the database: stand by until this one leads, then
  // open the store fenced by the lease's epoch (docs/design/0009-leader-lease.md).
  std::unique_ptr<Leadership> leadership;
  int listen_port = a.port;
  if (postgres) {
    LeadershipOptions lo;
    lo.uri = a.store;
    lo.host = a.host;
    lo.port = a.port;
    lo.tls_cert = a.tls_cert;
    lo.tls_key = a.tls_key;
    lo.advertise = a.advertise;
    lo.expiry = std::chrono::seconds(a.leader_lease_seconds);
    lo.renew_every = std::chrono::milliseconds(a.leader_lease_seconds * 200);
    int sig = 0;
    auto led = Leadership::stand_by(lo, set, sig, listen_port);
    if (!led.ok()) {
      std::fprintf(stderr, "allot: %s\n", led.error().message().c_str());
      return 1;
    }
    if (!led.value()) {
      std::printf("allot: stopping\n");
      return 0;
    }
    leadership = std::move(led.value());
  }
  store::PostgresOptions fenced;
  if (leadership) fenced.fence_epoch = leadership->epoch();
  auto opened = postgres ? store::open_postgres(a.store, fenced) : store::open_store(a.store);
  if (!opened.ok()) {
    std::fprintf(stderr, "allot: --store: %s\n", opened.error().reason.c_str());
    return 1;
  }
  auto& st = *opened.value();

  server::Controller ctl(st, co);
  if (auto s = ctl.start(); !s.ok()) {
    std::fprintf(stderr, "allot: %s\n", s.error().message().c_str());
    return 1;
  }
  const auto now = ctl.now();
  // allot up keeps its admin token next to the data and shows the same one at every start;
  // allot server makes one only on its first start (more: allot token create).
  std::string admin;
  bool reused = false;
  const std::string up_token_file = a.data + ".admin-token";
  if (up) {
    auto kept = read_first_line(up_token_file);
    auto rec = kept.empty() ? std::nullopt : st.token_by_hash(server::sha256_hex(kept));
    if (rec && !rec->revoked && rec->role == "admin") {
      admin = kept;
      reused = true;
    }
  }
  if ((up && !reused) || (!up && st.tokens().empty())) {
    auto t =
        server::create_token(st, up ? "up-admin" : "bootstrap-admin", "admin", "admin", "", now);
    if (!t.ok()) {
      std::fprintf(stderr, "allot: %s\n", t.error().message().c_str());
      return 1;
    }
    admin = t.value();
    if (up && !write_private(up_token_file, admin)) {
      std::fprintf(stderr, "allot: cannot write %s\n", up_token_file.c_str());
      return 1;
    }
  }
  for (int i = 0; i < a.sim_nodes; ++i) {
    store::NodeRecord n;
    char name[32];
    std::snprintf(name, sizeof name, "sim-%02d", i + 1);
    n.name = name;
    n.cluster = "sim";
    n.model = "H100";
    n.gpus = 8;
    n.block = "block-" + std::to_string(i / 4);
    n.simulated = true;
    auto r = ctl.register_node(n);
    if (!r.ok()) std::fprintf(stderr, "allot: node %s: %s\n", name, r.error().message().c_str());
  }
  if (up && st.budgets().empty()) ctl.set_budget("/lab/default", 1.0, std::nullopt, "allot-up");

  server::ApiOptions ao;
  ao.host = a.host;
  ao.port = listen_port;
  ao.leader_epoch = leadership ? leadership->epoch() : 0;
  ao.tls_cert = a.tls_cert;
  ao.tls_key = a.tls_key;
  ao.threads = a.threads;
  ao.submit_limits = a.submit;
  ao.request_limits = a.requests;
  ao.max_connections_per_address = static_cast<std::size_t>(a.max_connections_per_address);
  ao.advice.min_seconds = a.advice_min_seconds;
  ao.logs_dir = a.data + ".logs";
  ao.prometheus = metrics;
  ao.changes = changes;
  server::ApiServer api(st, ctl, ao);
  auto port = api.start();
  if (!port.ok()) {
    std::fprintf(stderr, "allot: %s\n", port.error().message().c_str());
    return 1;
  }
  std::unique_ptr<server::MetricsListener> metrics_listener;
  if (a.metrics_port >= 0) {
    metrics_listener = std::make_unique<server::MetricsListener>(metrics, st, ctl);
    auto mp = metrics_listener->start(a.metrics_host, a.metrics_port);
    if (!mp.ok()) {
      std::fprintf(stderr, "allot: --metrics-listen: %s\n", mp.error().reason.c_str());
      return 1;
    }
    std::printf("metrics (no token) on http://%s:%d/metrics\n", a.metrics_host.c_str(), mp.value());
  }
  const std::string addr = std::string(a.tls_cert.empty() ? "http" : "https") + "://" + a.host +
                           ":" + std::to_string(port.value());
  if (!a.token_file.empty() && !admin.empty() && !write_private(a.token_file, admin)) {
    std::fprintf(stderr, "allot: cannot write %s\n", a.token_file.c_str());
    return 1;
  }
  if (!a.addr_file.empty()) {
    std::ofstream(a.addr_file + ".tmp") << addr << "\n";
    std::filesystem::rename(a.addr_file + ".tmp", a.addr_file);
  }
  // Not the URI itself: it may hold a password.
  std::printf("allot %s listening on %s (data: %s)\n", up ? "up:" : "server", addr.c_str(),
              postgres ? "PostgreSQL" : a.data.c_str());
  if (a.sim_nodes > 0) {
    std::printf("simulated cluster 'sim': %d nodes x 8 H100 (%d GPUs, jobs do not run)\n",
                a.sim_nodes, a.sim_nodes * 8);
  }
  std::unique_ptr<LocalCluster> local;
  if (a.local_nodes > 0 || (up && a.backend == "nvml")) {
    LocalClusterOptions lo;
    lo.server_url = std::string(a.tls_cert.empty() ? "http" : "https") +
                    "://127.0.0.1:" + std::to_string(port.value());
    lo.data_dir = a.data + ".local";
    lo.backend = a.backend;
    lo.fake_nodes = a.local_nodes;
    lo.telemetry_ms = a.telemetry_ms;
    auto lc = LocalCluster::start(st, lo, now);
    if (!lc.ok()) {
      std::fprintf(stderr, "allot: local cluster: %s\n", lc.error().message().c_str());
      return 1;
    }
    local = std::move(lc.value());
    std::printf("local cluster 'local': %s\n", local->describe().c_str());
    // Its agents never change identity: every job is this user's (docs/security.md).
    std::printf("jobs run as you (uid %u), in the directory they were submitted from\n",
                static_cast<unsigned>(::geteuid()));
  }
  std::printf("dashboard: %s/ (sign in with a token; docs/dashboard.md)\n", addr.c_str());
  std::printf("metrics: %s/metrics (an admin or metrics token; docs/metrics.md)\n", addr.c_str());
  if (!admin.empty()) {
    if (up) {
      std::printf("admin token%s: %s (kept in %s)\n", reused ? " (the same as before)" : "",
                  admin.c_str(), up_token_file.c_str());
    } else {
      std::printf(
          "admin token (shown once; more with 'allot token create NAME --role admin'): "
          "%s\n",
          admin.c_str());
    }
    std::printf("\n  export ALLOT_ADDR=%s ALLOT_TOKEN=%s\n", addr.c_str(), admin.c_str());
    if (up) {
      const auto me = command_name();
      std::printf(
          "  %s submit --budget /lab/default --gpus 8 --min-runtime 10m -- sleep 600\n"
          "      (protected for 10 minutes once started: an allocated contract)\n"
          "  %s submit --budget /lab/default --gpus 1 -- sleep 600\n"
          "      (no --min-runtime: unallocated, preemptible at any time)\n"
          "  %s ls\n",
          me.c_str(), me.c_str(), me.c_str());
    }
  }
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  std::printf("allot: stopping\n");
  local.reset();  // the agents stop their jobs
  if (metrics_listener) metrics_listener->stop();
  api.stop();
  ctl.stop();
  if (leadership) leadership->release();  // a standby takes over at once
  return 0;
}

}  // namespace

int server_main(int argc, char** argv) {
  ServerArgs a;
  if (!parse(argc, argv, a, false)) return 2;
  return serve(a, false);
}

int up_main(int argc, char** argv) {
  ServerArgs a;
  a.local_nodes = 11;
  a.port = 7400;
  if (!parse(argc, argv, a, true)) return 2;
  return serve(a, true);
}

}  // namespace allot::cli
