// `allot agent`: the node agent (src/agent/agent.h) as a process, one per GPU node.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "agent/agent.h"
#include "cli/commands.h"
#include "cli/secrets.h"

namespace allot::cli {
namespace {

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: allot agent [options]\n"
      "  --server URL           the server (default: $ALLOT_ADDR, else http://127.0.0.1:7400);\n"
      "                         URL,URL,...: servers on one PostgreSQL database, the leader\n"
      "                         followed (docs/store.md)\n"
      "  --token-file FILE      the node's agent token, the file's first line; the file must\n"
      "                         be private to its owner (mode 0600)\n"
      "                         (default: $ALLOT_TOKEN, which is removed from the agent's\n"
      "                         environment once read)\n"
      "  --token T              discouraged: other local users see it in ps until the agent\n"
      "                         blanks it at start; use --token-file\n"
      "  --node NAME            this node's name: the token's scope (default: the host name)\n"
      "  --cluster NAME         cluster to join (default 'default')\n"
      "  --block NAME           topology block (NVLink domain, rack) for gang placement\n"
      "  --label K=V            a node label (repeatable)\n"
      "  --address HOST         where gang peers reach this node (default: the node name)\n"
      "  --backend B            auto | nvml | fake:FILE (a YAML node; see docs/agent.md)\n"
      "  --state-dir DIR        runs, logs and agent state (default /var/lib/allot/agent)\n"
      "  --health-script CMD    extra health check: exit 0 healthy, else its first line is why\n"
      "  --max-temp C           unhealthy above this GPU temperature (default 90)\n"
      "  --max-ecc N            unhealthy above N uncorrected ECC errors (default 0)\n"
      "  --container-template T e.g. 'podman run --rm {devices} {image} {command}'\n"
      "  --cgroup-root DIR      cgroup v2 directory for jobs ('none': process groups only)\n"
      "  --devices-cgroup W     how other GPUs are denied to a job: auto (the default: cgroup\n"
      "                         v1 devices where mounted, else an eBPF device program on the\n"
      "                         job's cgroup v2) | bpf | none | DIR (a cgroup v1 devices dir)\n"
      "  --run-jobs-as WHO      owner: each job as its owner's account (needs root; the\n"
      "                         default as root) | agent: as this agent's user (the default\n"
      "                         otherwise; as root only for a node with a single tenant)\n"
      "  --user-map FILE        owner -> account exceptions, 'SUBJECT ACCOUNT' a line\n"
      "                         (default: the account of the owner's name)\n"
      "  --job-env NAME         pass this variable of the agent's environment to jobs\n"
      "                         (repeatable; they get PATH, LANG, LC_*, TZ otherwise)\n"
      "  --log-cap-mib N        keep at most N MiB of each job's stdout and stderr on the\n"
      "                         node, and the last MiB (default 64)\n"
      "  --keep-logs HOURS      keep ended runs' local logs this long (default 72; the\n"
      "                         server keeps its own copy)\n"
      "  --poll-ms N            report interval, and assignment poll interval while no\n"
      "                         watch is held (default 500)\n"
      "  --watch-seconds N      hold each assignment watch this long: the server answers\n"
      "                         when the node's assignments change (default 25; 0: poll)\n"
      "  --heartbeat-ms N       health verdict interval (default 5000)\n"
      "  --telemetry-ms N       telemetry report interval (default 10000; samples at 1 Hz)\n"
      "  --cacert FILE | --insecure   verify an https server with FILE / not at all\n"
      "  --kill-on-exit         stop every job when the agent exits (default: they keep\n"
      "                         running and a restarted agent recovers them)\n");
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "node";
  std::string s(buf);
  return s.substr(0, s.find('.'));
}

}  // namespace

int agent_main(int argc, char** argv) {
  agent::AgentOptions o;
  std::string backend = "auto";
  bool kill_on_exit = false;
  std::string run_jobs_as;  // "" = by whether the agent is root
  if (const char* e = std::getenv("ALLOT_ADDR")) o.server.url = e;
  // Read once, then gone: jobs get an allowlisted environment anyway, but /proc/<agent>/environ
  // would keep showing it to anyone who can read it.
  o.server.token = take_secret_from_env("ALLOT_TOKEN");
  o.node = host_name();
  o.state_dir = "/var/lib/allot/agent";
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "allot agent: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&](long lo, long hi) {
      const std::string v = next();
      char* end = nullptr;
      long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < lo || n > hi) {
        std::fprintf(stderr, "allot agent: %s: '%s' must be a number from %ld to %ld\n", k.c_str(),
                     v.c_str(), lo, hi);
        std::exit(2);
      }
      return n;
    };
    if (k == "--help" || k == "-h") {
      usage(stdout);
      return 0;
    } else if (k == "--server") {
      o.server.url = next();
    } else if (k == "--token") {
      o.server.token = next();
      blank_argument(argv[i]);
      std::fprintf(stderr,
                   "allot agent: --token puts the token where other local users can read it "
                   "(ps, /proc): use --token-file with a 0600 file\n");
    } else if (k == "--token-file") {
      auto t = read_token_file(next());
      if (!t.error.empty()) {
        std::fprintf(stderr, "allot agent: --token-file: %s\n", t.error.c_str());
        return 2;
      }
      o.server.token = t.token;
    } else if (k == "--node") {
      o.node = next();
    } else if (k == "--cluster") {
      o.cluster = next();
    } else if (k == "--block") {
      o.block = next();
    } else if (k == "--label") {
      const std::string kv = next();
      const auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::fprintf(stderr, "allot agent: --label wants KEY=VALUE, not '%s'\n", kv.c_str());
        return 2;
      }
      o.labels[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else if (k == "--address") {
      o.address = next();
    } else if (k == "--backend") {
      backend = next();
    } else if (k == "--state-dir") {
      o.state_dir = next();
    } else if (k == "--health-script") {
      o.health.script = next();
    } else if (k == "--max-temp") {
      o.health.max_temp_c = static_cast<double>(number(1, 200));
    } else if (k == "--max-ecc") {
      o.health.max_ecc_uncorrected = number(0, 1'000'000'000);
    } else if (k == "--container-template") {
      o.container_template = next();
    } else if (k == "--cgroup-root") {
      o.runner.cgroup_root = next();
    } else if (k == "--devices-cgroup") {
      const std::string w = next();
      if (w != "auto" && w != "bpf" && w != "none" && !w.starts_with("/")) {
        std::fprintf(stderr,
                     "allot agent: --devices-cgroup must be auto, bpf, none or an absolute "
                     "directory, not '%s'\n",
                     w.c_str());
        return 2;
      }
      o.runner.devices_cgroup_root = w == "auto" ? "" : w;
    } else if (k == "--run-jobs-as") {
      run_jobs_as = next();
      if (run_jobs_as != "owner" && run_jobs_as != "agent") {
        std::fprintf(stderr, "allot agent: --run-jobs-as must be owner or agent, not '%s'\n",
                     run_jobs_as.c_str());
        return 2;
      }
    } else if (k == "--user-map") {
      auto map = agent::load_account_map(next());
      if (!map.ok()) {
        std::fprintf(stderr, "allot agent: --user-map: %s\n", map.error().reason.c_str());
        return 2;
      }
      o.runner.accounts = std::move(map.value());
    } else if (k == "--job-env") {
      const std::string name = next();
      if (name.empty() || name.find('=') != std::string::npos || name.rfind("ALLOT_", 0) == 0) {
        std::fprintf(stderr,
                     "allot agent: --job-env: '%s' is not a variable a job may be given (ALLOT_* "
                     "are the agent's own: its token among them)\n",
                     name.c_str());
        return 2;
      }
      o.runner.pass_env.push_back(name);
    } else if (k == "--log-cap-mib") {
      o.runner.log_cap_bytes = static_cast<std::int64_t>(number(1, 1 << 20)) << 20;
    } else if (k == "--poll-ms") {
      o.poll = std::chrono::milliseconds(number(10, 60'000));
    } else if (k == "--watch-seconds") {
      o.watch = std::chrono::seconds(number(0, 60));
    } else if (k == "--keep-logs") {
      o.keep_run_logs = std::chrono::hours(number(0, 24 * 365));
    } else if (k == "--heartbeat-ms") {
      o.heartbeat = std::chrono::milliseconds(number(10, 600'000));
    } else if (k == "--telemetry-ms") {
      o.telemetry = std::chrono::milliseconds(number(100, 3'600'000));
    } else if (k == "--cacert") {
      o.server.cacert = next();
    } else if (k == "--insecure") {
      o.server.insecure = true;
    } else if (k == "--kill-on-exit") {
      kill_on_exit = true;
    } else {
      std::fprintf(stderr, "allot agent: unknown option '%s'\n\n", k.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (o.server.url.empty()) o.server.url = "http://127.0.0.1:7400";
  if (o.server.url.find("://") == std::string::npos) o.server.url = "http://" + o.server.url;
  if (o.server.token.empty()) {
    std::fprintf(stderr,
                 "allot agent: no token: give --token-file or set ALLOT_TOKEN (an admin creates "
                 "one with "
                 "'allot token create agent-%s --role agent --scope %s')\n",
                 o.node.c_str(), o.node.c_str());
    return 2;
  }
  const bool root = geteuid() == 0;
  if (run_jobs_as.empty()) run_jobs_as = root ? "owner" : "agent";
  if (run_jobs_as == "owner" && !root) {
    std::fprintf(stderr,
                 "allot agent: --run-jobs-as owner needs root (this agent runs as uid %u)\n",
                 static_cast<unsigned>(geteuid()));
    return 2;
  }
  o.runner.run_as_owner = run_jobs_as == "owner";
  if (o.runner.run_as_owner) {
    std::fprintf(stderr, "allot agent: jobs run as their owners' accounts%s\n",
                 o.runner.accounts.source.empty()
                     ? ""
                     : (" (exceptions in " + o.runner.accounts.source + ")").c_str());
  } else {
    std::fprintf(stderr, "allot agent: jobs run as this agent's user (uid %u)%s\n",
                 static_cast<unsigned>(geteuid()),
                 root ? ": every job has root's rights on this node" : "");
  }
  auto b = agent::make_backend(backend, o.node);
  if (!b.ok()) {
    std::fprintf(stderr, "allot agent: %s\n", b.error().message().c_str());
    return 1;
  }
  // Signals are taken by sigwait below; block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  agent::Agent a(o, std::move(b.value()));
  auto st = a.start();
  if (!st.ok()) {
    std::fprintf(stderr, "allot agent: %s\n", st.error().message().c_str());
    return 1;
  }
  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "allot agent: stopping%s\n",
               kill_on_exit ? " and its jobs" : " (its jobs keep running)");
  a.stop(kill_on_exit);
  return 0;
}

}  // namespace allot::cli
