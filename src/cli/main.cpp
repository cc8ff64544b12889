// The one binary: `allot <command> ...`, like kubectl or slurm's s-commands.
#include <cstdio>
#include <cstring>
#include <string>

#include "agent/runner.h"
#include "cli/commands.h"
#include "cli/completion.h"
#include "cli/flags.h"

namespace {

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: allot <command> [options]\n"
      "\n"
      "commands:\n"
      "  demo     run the scheduling core on a built-in 88-GPU cluster and narrate it\n"
      "  sim      simulate a cluster on a workload trace and report the four metrics\n"
      "  server   run the control plane (REST API, scheduling loop, embedded store)\n"
      "  up       run the control plane with a local cluster (11 x 8 H100) in one command\n"
      "  agent    run the node agent: GPUs, health, telemetry, jobs as processes\n"
      "  store    copy: move a SQLite store into PostgreSQL\n"
      "  submit   queue a job (add --min-runtime for a protected, allocated contract)\n"
      "  ls       list jobs, with their class (allocated/unallocated) and protection left\n"
      "  show, why, logs, cancel   one job: everything, why it waits or stopped, output, stop\n"
      "  hold, release   keep waiting jobs from starting, and let them (scontrol hold/release)\n"
      "  budget   tree, set, rm, usage\n"
      "  nodes, drain, undrain, cordon, uncordon   the nodes\n"
      "  me       your budgets' standing: share, usage, rank, owed vs delivered (like sshare)\n"
      "  report   the four metrics and owed/delivered per budget\n"
      "  advise   right-sizing advice: jobs whose GPUs sat idle, starved or too big\n"
      "  serve    create, list, show, scale, restart, delete, load: inference services\n"
      "  token    ls, create, revoke\n"
      "  limits   submission limits: the server's, and a user's own (admins)\n"
      "  completion  bash|zsh: a shell completion script (source <(allot completion bash))\n"
      "  version  print the version\n"
      "\n"
      "'allot <command> --help' tells more: each command's options, with units and defaults.\n"
      "\n%s",
      allot::cli::exit_codes_text().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "agent-shim") return allot::agent::shim_main(argc - 1, argv + 1);
  if (cmd == "agent") return allot::cli::agent_main(argc - 1, argv + 1);
  if (cmd == "completion") return allot::cli::completion_main(argc - 1, argv + 1);
  if (cmd == "demo") return allot::cli::demo_main(argc - 1, argv + 1);
  if (cmd == "sim") return allot::cli::sim_main(argc - 1, argv + 1);
  if (cmd == "server") return allot::cli::server_main(argc - 1, argv + 1);
  if (cmd == "up") return allot::cli::up_main(argc - 1, argv + 1);
  if (cmd == "store") return allot::cli::store_main(argc - 1, argv + 1);
  if (allot::cli::is_client_command(cmd)) return allot::cli::client_main(argc - 1, argv + 1);
  if (cmd == "version" || cmd == "--version") {
    std::printf("allot 0.1.0\n");
    return 0;
  }
  std::fprintf(stderr, "allot: unknown command '%s'\n\n", cmd.c_str());
  usage(stderr);
  return 2;
}
