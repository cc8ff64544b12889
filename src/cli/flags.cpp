#include "cli/flags.h"

#include <algorithm>

namespace allot::cli {
namespace {

const std::vector<std::string> kStates = {"pending",    "starting", "running",
                                          "preempting", "requeued", "preempted",
                                          "succeeded",  "failed",   "cancelled"};

// Flags every client command takes (where the server is and who is asking).
std::vector<FlagSpec> common_flags() {
  return {
      {"addr", "URL",
       "the server, or URL,URL,... to use their leader (default: $ALLOT_ADDR, the config file, "
       "http://127.0.0.1:7400)"},
      {"token-file", "FILE",
       "read the API token from FILE, private to its owner (mode 0600) (default: $ALLOT_TOKEN, "
       "then the config file)"},
      {"token", "TOKEN", "the API token; discouraged: other local users see it in ps"},
      {"cacert", "FILE", "CA certificate to trust for an https server (default: $ALLOT_CACERT)"},
      {"insecure", "", "do not verify the server's TLS certificate"},
      {"json", "", "print the server's JSON answer instead of text"},
      {"help", "", "print this help"},
  };
}

std::vector<CommandSpec> build() {
  std::vector<CommandSpec> c;
  c.push_back(
      {"submit",
       "[JOB.yaml] [options] [-- COMMAND ARGS...]",
       "Queue a job. Without --min-runtime the job is unallocated: free, preemptible work "
       "that any funded job may stop at any time. With --min-runtime it asks for an "
       "allocated contract: once started it is protected that long (if its budget can "
       "afford it; otherwise it starts unallocated, and `allot why` says so).",
       {
           {"budget", "PATH", "the budget that pays, e.g. /lab/nlp (required)"},
           {"name", "NAME", "a name to find the job by (default: the command's name)"},
           {"gpus", "N",
            "GPUs in all (default 1); more than a node holds become a gang, shaped like the "
            "scheduler does: 16 on 8-GPU nodes = 2 x 8, 12 = 2 x 6"},
           {"gpus-per-node", "G", "an explicit gang: G GPUs on each of --nodes nodes"},
           {"nodes", "N",
            "nodes of an explicit gang (with --gpus-per-node, or --gpus split evenly)"},
           {"gpu-milli", "M", "a fraction of one GPU in thousandths, 1-1000 (default 1000)"},
           {"mig", "PROFILE",
            "one MIG instance of this profile, e.g. 1g.18gb (H200) or 3g.40gb (H100): only a GPU "
            "split into one will do (instead of --gpu-milli)"},
           {"min-runtime", "DURATION",
            "the contract: protected this long once started, e.g. 30m, 2h; 0: unallocated, "
            "preemptible at any time (default: the budget's default minimum runtime, "
            "'allot budget tree' shows it, else 0)"},
           {"expected", "DURATION", "how long the job should take, e.g. 4h (helps backfill)"},
           {"priority", "P", "order within its budget", {"low", "normal", "high", "urgent"}},
           {"kind",
            "K",
            "the kind of work (default batch)",
            {"batch", "interactive", "debug", "inference"}},
           {"model", "MODEL", "the GPU model, e.g. H100 (default: any)"},
           {"cluster", "NAME", "the cluster (default: any)"},
           {"resumable", "", "the job may be stopped and requeued (it checkpoints)"},
           {"key", "KEY", "idempotency key: a retried submit with it makes no second job"},
           {"env", "NAME=VALUE", "an environment variable (repeatable)", {}, false, true},
           {"workdir", "DIR",
            "the directory the job starts in, on a path the nodes share; it must exist (a "
            "relative one is taken from here) (default: the directory you submit from)"},
           {"memory", "SIZE", "host memory, e.g. 64G, 512M, 1T"},
           {"cpus", "N", "CPU cores"},
           {"container", "IMAGE", "run in this container image"},
           {"hold", "", "submit it held: it waits until 'allot release JOB' (like sbatch -H)"},
           {"after", "JOB[,JOB]",
            "start only once these jobs succeeded; if one fails or is cancelled, this job fails "
            "too (Slurm's --dependency=afterok)"},
           {"after-any", "JOB[,JOB]",
            "start only once these jobs ended, however they ended (Slurm's afterany)"},
           {"array", "INDICES",
            "a job array: one task per index, e.g. 0-99, 0,3,7, 0-99:2; %N runs at most N at "
            "once (0-99%4). Each task is named NAME[i] and gets ALLOT_ARRAY_INDEX and "
            "ALLOT_ARRAY_JOB_ID (at most 10000 tasks)"},
       },
       0,
       1,
       true,
       "allot submit --budget /lab/nlp --gpus 8 --min-runtime 2h -- python train.py"});
  c.push_back({"ls",
               "[options]",
               "List jobs: by default those queued or running, newest first. CLASS says whether a "
               "job holds an allocated contract (protected) or runs unallocated (preemptible); "
               "PROTECTED is how much of its contract is left.",
               {
                   {"state", "S[,S]", "only jobs in these states", kStates, true},
                   {"owner", "USER", "only this user's jobs"},
                   {"budget", "PATH", "only jobs of this budget and the budgets under it"},
                   {"limit", "N", "at most N jobs (default 50)"},
                   {"all", "", "jobs in every state, ended ones too"},
                   {"output",
                    "F",
                    "wide: the default columns and NODES (where it runs), SHAPE (nodes x GPUs "
                    "per node), MIN-RUNTIME, PRIORITY and SUBMITTED (local time), uncut; json: "
                    "the same as --json",
                    {"wide", "json"}},
                   {"watch", "[INTERVAL]",
                    "list again every INTERVAL (default 2s) until interrupted (Ctrl-C); on a "
                    "terminal the screen is cleared first, like watch(1), otherwise each listing "
                    "follows a line of dashes (under --json: one JSON line per listing); a "
                    "refresh that fails ends it with that failure's exit code and one line "
                    "saying since when the last listing is old"},
                   {"watch-count", "N", "with --watch: stop after N listings (for scripts)"},
               },
               0,
               0,
               false,
               "allot ls --state running,pending --budget /lab/nlp -o wide -w 5s"});
  c.push_back({"show",
               "JOB",
               "Everything about a job: its spec, contract, placement, telemetry "
               "and the history of its states.",
               {},
               1,
               1,
               false,
               "allot show 42"});
  c.push_back({"why",
               "JOB",
               "Why a job waits, why it stopped, or (running) whether it is protected and until "
               "when.",
               {},
               1,
               1,
               false,
               "allot why 42"});
  c.push_back({"cancel",
               "JOB [--reason TEXT]",
               "Cancel a job; its processes get SIGTERM.",
               {{"reason", "TEXT", "why, for the job's history"}},
               1,
               1,
               false,
               "allot cancel 42 --reason 'wrong data'"});
  c.push_back({"hold",
               "JOB...",
               "Keep waiting jobs from being scheduled until 'allot release' (like scontrol "
               "hold): the owner, a manager of the job's budget or an administrator; a job "
               "that is running or ended cannot be held.",
               {},
               1,
               1000,
               false,
               "allot hold 42 43"});
  c.push_back({"release",
               "JOB...",
               "Let held jobs be scheduled again (like scontrol release).",
               {},
               1,
               1000,
               false,
               "allot release 42 43"});
  c.push_back({"logs",
               "JOB [options]",
               "A job's output as its node agents uploaded it.",
               {{"stderr", "", "standard error instead of standard output"},
                {"node", "NODE", "the output of one node of a gang"},
                {"run", "N", "an earlier run (default: the latest)"},
                {"follow", "", "keep printing until the run ended"}},
               1,
               1,
               false,
               "allot logs 42 -f"});
  const std::vector<FlagSpec> period = {
      {"since", "DURATION", "the period that ends now (default 7d)"},
      {"from", "EPOCH", "the period's start, in seconds since 1970"},
      {"to", "EPOCH", "the period's end, in seconds since 1970 (default now)"}};
  c.push_back({"budget tree",
               "",
               "The budget tree: each budget's share, its fraction of each "
               "cluster, owners and members, its own submission limits, and the minimum runtime "
               "a job submitted there without --min-runtime gets (MIN-RUNTIME; 'of /lab' when "
               "inherited).",
               {},
               0,
               0,
               false,
               "allot budget tree"});
  {
    const std::vector<FlagSpec> budget_fields = {
        {"share", "X", "its weight among its siblings (default 1)"},
        {"members", "a,b", "the users who may submit to it"},
        {"owners", "c,d", "the users who manage it and the budgets under it"},
        {"submit-rate", "N",
         "admins: submissions a second per user here and below (0: no limit; "
         "default: the server's)"},
        {"submit-burst", "N", "admins: submissions at once per user here and below"},
        {"max-waiting-jobs", "N",
         "admins: jobs waiting per user when submitting here and below (0: no limit)"},
        {"server-limits", "", "admins: drop this budget's own limits"},
        {"default-min-runtime", "DURATION",
         "the minimum runtime a job submitted here or below without --min-runtime gets, e.g. "
         "1h (0: unallocated; 'none': no default of its own, its parent's applies; default: "
         "none)"}};
    c.push_back({"budget create", "PATH [options]",
                 "Create a budget, and any missing budgets above it (admins, and managers within "
                 "their subtree). Refused if it exists (use `budget set`), or if its parent is a "
                 "leaf with queued or running jobs (a budget with jobs gets no sub-budgets).",
                 budget_fields, 1, 1, false,
                 "allot budget create /lab/nlp --share 2 --members ann,bob"});
    c.push_back({"budget set", "PATH [options]",
                 "Change a budget (admins, and managers within their subtree). Refused for a "
                 "path that does not exist: `budget create` makes one.",
                 budget_fields, 1, 1, false,
                 "allot budget set /lab/nlp --share 3 --members ann,bob,cy"});
  }
  c.push_back({"budget log",
               "[PATH] [options]",
               "The audit log of budget changes at PATH and below (default /: all you may "
               "read): who changed which field, from what to what, newest first. Admins read "
               "it all; managers within their scope; users for the budgets they belong to.",
               {{"limit", "N", "at most N entries (1-1000, default 100)"}},
               0,
               1,
               false,
               "allot budget log /lab/nlp --limit 20"});
  c.push_back({"budget rm",
               "PATH",
               "Remove a budget and those under it.",
               {},
               1,
               1,
               false,
               "allot budget rm /lab/old"});
  {
    CommandSpec u{"budget usage",
                  "[options]",
                  "GPU-hours used, allocated and unallocated, per budget or per user. Users see "
                  "the budgets they belong to; managers their subtree.",
                  period,
                  0,
                  0,
                  false,
                  "allot budget usage --since 1d --by user"};
    u.flags.push_back({"by", "WHAT", "one row per budget or per user", {"budget", "user"}});
    u.flags.push_back({"budget", "PATH", "only this budget and those under it"});
    c.push_back(u);
  }
  c.push_back({"nodes",
               "",
               "The nodes, like Slurm's sinfo, in name order (n2 before n10): per node its GPUs "
               "FREE, ALLOC (held by allocated jobs), UNALLOC (held by unallocated, preemptible "
               "jobs) and DOWN (on a down node, or idle on a draining or cordoned one), the JOBS "
               "on it you may see (+N: others), HEALTH and cordon, EMPTY-AT (when a draining "
               "node's last job will have left), UTIL (mean GPU utilisation its agent reports), "
               "and why a node is not healthy.",
               {},
               0,
               0,
               false,
               "allot nodes"});
  for (const char* op : {"drain", "undrain", "cordon", "uncordon"}) {
    const std::string name = op;
    const std::string what =
        name == "drain"     ? "Drain a node: no new jobs; each running job stops once its "
                              "protection ends. Lists the jobs still there, their owners and "
                              "when each leaves; each job's owner is told in its events, "
                              "'allot why' and 'allot show'."
        : name == "undrain" ? "Make a drained node take work again."
        : name == "cordon"  ? "Cordon a node: no new jobs, running ones keep running."
                            : "Lift a node's cordon.";
    c.push_back({name,
                 "NODE [--reason TEXT]",
                 what,
                 {{"reason", "TEXT", "why, shown in `allot nodes`"}},
                 1,
                 1,
                 false,
                 "allot " + name + " gpu-07" + (name == "drain" ? " --reason 'fan failure'" : "")});
  }
  c.push_back({"me",
               "[options]",
               "Your standing, like Slurm's sshare: for each budget you belong to or manage, its "
               "share of the cluster, the GPUs it is owed and holds now, its usage over the "
               "lookback window, its rank among its siblings, its jobs, owed vs delivered "
               "GPU-hours this week, and whether a new job would start allocated.",
               {{"budget", "PATH", "this budget and its children instead of your own"},
                {"gpus", "N", "the new job to ask about: its GPUs (default 1)"},
                {"min-runtime", "DURATION", "the new job's minimum runtime (default 1h)"}},
               0,
               0,
               false,
               "allot me --gpus 8 --min-runtime 4h"});
  {
    CommandSpec r{"report",
                  "[options]",
                  "The four metrics over a period (availability, occupancy, impact, utilization), "
                  "then owed and delivered GPU-hours per budget. Managers see their subtree by "
                  "default, users their own budgets.",
                  period,
                  0,
                  0,
                  false,
                  "allot report --since 30d --format csv"};
    r.flags.push_back({"budget", "PATH", "the subtree to report on (default: what you may see)"});
    r.flags.push_back({"format", "F", "the output (default text)", {"text", "csv", "json"}});
    c.push_back(r);
  }
  c.push_back({"advise",
               "[options]",
               "Right-sizing advice from the week's telemetry: jobs whose GPUs sat idle for long "
               "stretches, were starved by their data pipeline (low GPU use while their CPU was "
               "saturated or their I/O wait high), or used a fraction of their memory (with a MIG "
               "profile or fewer GPUs that would hold it); then per budget the GPU-hours measured, "
               "idle and starved. Users see their own jobs, managers their subtree.",
               {{"budget", "PATH", "only jobs of this budget and the budgets under it"},
                {"user", "NAME", "only this user's jobs"},
                {"days", "N", "look back N days (default 7)"}},
               0,
               0,
               false,
               "allot advise --budget /lab/nlp"});
  c.push_back(
      {"serve create",
       "NAME --budget PATH [options] -- COMMAND ARGS...",
       "Run an inference service: replicas of COMMAND kept alive by the server. The first "
       "--min replicas are protected like a contract (allocated when the budget can fund "
       "--min-runtime, never preempted inside it, replaced when they end); replicas above it "
       "are unallocated and preemptible. The autoscaler moves the count between --min and --max "
       "on the replicas' GPU memory use and on the load the service reports.",
       {{"budget", "PATH", "the budget that pays (required)"},
        {"gpus", "N", "GPUs per replica, on one node (default 1)"},
        {"gpu-milli", "M", "a fraction of one GPU per replica, in thousandths (1-1000)"},
        {"mig", "PROFILE", "a MIG instance of this profile per replica, e.g. 1g.18gb"},
        {"min", "R", "replicas always kept, protected (default 1)"},
        {"max", "R", "replicas at most (default: --min, at least 1)"},
        {"min-runtime", "DURATION",
         "the protected replicas' contract (default: the server's maximum)"},
        {"ready-path", "PATH",
         "an HTTP path a ready replica answers 2xx on, e.g. /health, checked by its node's "
         "agent on 127.0.0.1:--ready-port every 3 s; a replica serves (counts toward the "
         "service, its autoscaling and a rolling restart) only once ready"},
        {"ready-port", "PORT",
         "the port of --ready-path (required with it); replicas also get it in "
         "ALLOT_SERVICE_PORT"},
        {"ready-command", "COMMAND",
         "a shell command that succeeds once a replica is ready, run every 3 s by its node's "
         "agent as the replica's own user, with its environment (5 s at most)"},
        {"ready-timeout", "DURATION",
         "a replica not once ready this long after it is placed is restarted (default 10m)"},
        {"memory-high", "F", "scale out above this fraction of GPU memory used (default 0.8)"},
        {"memory-low", "F", "scale in below this fraction of GPU memory used (default 0.3)"},
        {"load-high", "X", "scale out above this reported load per replica (default: off)"},
        {"load-low", "X", "scale in below this reported load per replica"},
        {"cooldown", "DURATION", "at least this long between two scale decisions (default 60s)"},
        {"model", "MODEL", "the GPU model, e.g. H100 (default: any)"},
        {"cluster", "NAME", "the cluster (default: any)"},
        {"env", "NAME=VALUE", "an environment variable (repeatable)", {}, false, true},
        {"workdir", "DIR", "the directory replicas start in, on a path the nodes share"},
        {"memory", "SIZE", "host memory per replica, e.g. 64G"},
        {"cpus", "N", "CPU cores per replica"},
        {"container", "IMAGE", "run in this container image"}},
       1,
       1,
       true,
       "allot serve create chat --budget /lab/nlp --gpu-milli 500 --min 1 --max 4 -- ./serve.sh"});
  c.push_back({"serve list",
               "",
               "The services you may see: replicas wanted, running, and the figures the "
               "autoscaler reads.",
               {},
               0,
               0,
               false,
               "allot serve list"});
  c.push_back({"serve show",
               "NAME",
               "One service: its replicas (tier, job, state) and its recent scale decisions "
               "with their reasons and figures.",
               {},
               1,
               1,
               false,
               "allot serve show chat"});
  c.push_back({"serve scale",
               "NAME [--min R] [--max R]",
               "Change the replicas a service keeps (--min, protected) and may have (--max).",
               {{"min", "R", "replicas always kept, protected"}, {"max", "R", "replicas at most"}},
               1,
               1,
               false,
               "allot serve scale chat --min 2 --max 8"});
  c.push_back({"serve restart",
               "NAME",
               "Rolling restart: each replica is replaced by a new one, one at a time, and "
               "stopped only once its replacement runs (as many replicas available throughout; "
               "it waits while no GPU is free for the new one).",
               {},
               1,
               1,
               false,
               "allot serve restart chat"});
  c.push_back({"serve delete",
               "NAME",
               "Delete a service: its replicas are stopped (cancelled).",
               {},
               1,
               1,
               false,
               "allot serve delete chat"});
  c.push_back({"serve load",
               "NAME VALUE",
               "Report a service's load (requests/s or p90 latency: the unit of its --load-high) "
               "for its autoscaler; services post it to POST /api/v1/services/NAME/load.",
               {},
               2,
               2,
               false,
               "allot serve load chat 120"});
  c.push_back({"token ls", "", "The API tokens (admins).", {}, 0, 0, false, "allot token ls"});
  c.push_back(
      {"token create",
       "NAME --role ROLE [options]",
       "Make a token; its secret is printed once.",
       {{"role",
         "ROLE",
         "what it may do",
         {"admin", "manager", "user", "agent", "metrics", "service"}},
        {"scope", "PATH|NODE|SERVICE",
         "a manager's budget subtree, an agent's node, or the service a service token reports "
         "the load of"},
        {"subject", "USER", "the user it acts as (default: NAME)"}},
       1,
       1,
       false,
       "allot token create ann --role user --subject ann"});
  c.push_back(
      {"token revoke", "ID", "Revoke a token at once.", {}, 1, 1, false, "allot token revoke 7"});
  c.push_back(
      {"limits",
       "[USER] [options]",
       "Submission limits (admins): without USER, the server's and every user's own; with USER "
       "and options, set that user's own limits, which replace the server's for them (a "
       "budget's own limits still apply to submissions to it). Audited.",
       {{"submit-rate", "N", "submissions a second for USER (0: no limit)"},
        {"submit-burst", "N", "submissions at once for USER"},
        {"max-waiting-jobs", "N", "jobs USER may have waiting over all budgets (0: no limit)"},
        {"server-limits", "", "drop USER's own limits: the server's apply again"}},
       0,
       1,
       false,
       "allot limits ann --max-waiting-jobs 50000"});
  for (auto& spec : c) {
    auto common = common_flags();
    spec.flags.insert(spec.flags.end(), common.begin(), common.end());
  }
  return c;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

const std::vector<CommandSpec>& client_commands() {
  static const std::vector<CommandSpec> specs = build();
  return specs;
}

const CommandSpec* find_command(const std::string& command, const std::string& sub) {
  const std::string full = sub.empty() ? command : command + " " + sub;
  for (const auto& s : client_commands()) {
    if (s.name == full) return &s;
  }
  return nullptr;
}

// The one-letter aliases, the same for every command that takes the long flag (kubectl's and
// tail's habits).
const std::vector<std::pair<char, std::string>>& short_flags() {
  static const std::vector<std::pair<char, std::string>> list = {
      {'f', "follow"}, {'h', "help"}, {'o', "output"}, {'w', "watch"}};
  return list;
}

std::string short_flag_name(char letter) {
  for (const auto& [c, name] : short_flags()) {
    if (c == letter) return name;
  }
  return "";
}

char short_flag_of(const std::string& name) {
  for (const auto& [c, n] : short_flags()) {
    if (n == name) return c;
  }
  return 0;
}

std::string nearest(const std::string& typed, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::string::npos;
  bool best_prefix = false;
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(typed, c);
    // A prefix of at least three letters counts as close, and wins a tie: "--min" is
    // --min-runtime, not --mig.
    const bool prefix = typed.size() >= 3 && c.compare(0, typed.size(), typed) == 0;
    if (prefix) d = std::min<std::size_t>(d, 1);
    if (d < best_d || (d == best_d && prefix && !best_prefix)) {
      best_d = d;
      best = c;
      best_prefix = prefix;
    }
  }
  // Two edits for names of five letters or more, one below: "--gpu" -> "--gpus", not "--cpus".
  const std::size_t allowed = typed.size() >= 5 ? 2 : 1;
  return best_d <= allowed ? best : std::string();
}

ParseResult parse_flags(const CommandSpec& spec, const std::vector<std::string>& args) {
  ParseResult r;
  auto fail = [&](std::string msg) {
    r.error = spec.name + ": " + std::move(msg);
    return r;
  };
  std::vector<std::string> names;
  for (const auto& f : spec.flags) names.push_back(f.name);
  auto find = [&](const std::string& n) -> const FlagSpec* {
    for (const auto& f : spec.flags) {
      if (f.name == n) return &f;
    }
    return nullptr;
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string s = args[i];
    // A short alias the command takes: "-o wide", "-owide" and "-w" are "--output wide",
    // "--output=wide" and "--watch".
    if (s.size() >= 2 && s[0] == '-' && s[1] != '-') {
      const auto long_name = short_flag_name(s[1]);
      if (const FlagSpec* f = long_name.empty() ? nullptr : find(long_name)) {
        if (s.size() == 2) {
          s = "--" + f->name;
        } else if (!f->value.empty()) {
          s = "--" + f->name + "=" + s.substr(2);
        }
      }
    }
    if (s == "--") {
      if (!spec.takes_command) return fail("takes no command after --");
      r.args.rest.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (s == "-h") {
      r.args.opt["help"] = "1";
      continue;
    }
    if (s.size() > 1 && s[0] == '-' && s.rfind("--", 0) != 0) {
      return fail("unknown option '" + s + "' (options are --long; see --help)");
    }
    if (s.rfind("--", 0) != 0) {
      r.args.pos.push_back(s);
      continue;
    }
    std::string key = s.substr(2), value;
    bool has_value = false;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
      has_value = true;
    }
    const FlagSpec* f = find(key);
    if (!f) {
      const auto near = nearest(key, names);
      return fail("unknown option --" + key +
                  (near.empty() ? "" : "; did you mean --" + near + "?") + " (see 'allot " +
                  spec.name + " --help')");
    }
    if (f->value.empty()) {
      if (has_value) return fail("--" + key + " takes no value");
      r.args.opt[key] = "1";
      continue;
    }
    if (!has_value && f->value.front() == '[') {
      // An optional value ("--watch [INTERVAL]"): the next word, unless it is an option.
      if (i + 1 < args.size() && args[i + 1].rfind('-', 0) != 0) value = args[++i];
      if (r.args.opt.count(key)) return fail("--" + key + " given twice");
      r.args.opt[key] = value;
      continue;
    }
    if (!has_value) {
      // A value that looks like the next option means the value was left out.
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0) {
        return fail("--" + key + " needs a value (" + f->value + ")");
      }
      value = args[++i];
    }
    if (!f->choices.empty()) {
      std::vector<std::string> given;
      if (f->list) {
        std::size_t st = 0;
        while (st <= value.size()) {
          auto comma = value.find(',', st);
          if (comma == std::string::npos) comma = value.size();
          given.push_back(value.substr(st, comma - st));
          st = comma + 1;
        }
      } else {
        given.push_back(value);
      }
      for (const auto& g : given) {
        if (std::find(f->choices.begin(), f->choices.end(), g) == f->choices.end()) {
          const auto near = nearest(g, f->choices);
          return fail("--" + key + ": '" + g + "' is not one of " + join(f->choices, ", ") +
                      (near.empty() ? "" : " (did you mean " + near + "?)"));
        }
      }
    }
    if (f->repeatable) {
      if (key == "env") r.args.env.push_back(value);
      continue;
    }
    if (r.args.opt.count(key)) return fail("--" + key + " given twice");
    r.args.opt[key] = value;
  }
  if (r.args.has("help")) return r;  // the rest does not matter: help is printed
  if (r.args.pos.size() > spec.max_args) {
    const auto& extra = r.args.pos[spec.max_args];
    std::string msg = "unexpected argument '" + extra + "'";
    if (spec.max_args == 0) msg = "takes no arguments; unexpected '" + extra + "'";
    if (spec.takes_command) msg += " (put the job's command after --)";
    return fail(msg + "; usage: allot " + spec.name + " " + spec.synopsis);
  }
  if (r.args.pos.size() < spec.min_args) {
    return fail("missing argument; usage: allot " + spec.name + " " + spec.synopsis);
  }
  return r;
}

std::string exit_codes_text() {
  return "exit codes:\n"
         "  0  done\n"
         "  1  refused by the server (bad request, conflict: the message says why)\n"
         "  2  bad usage (unknown option, missing or malformed value)\n"
         "  3  the server cannot be reached\n"
         "  4  not authorised (no token, a bad token, or not allowed)\n"
         "  5  not found\n"
         "  6  server error\n";
}

std::string help_text(const CommandSpec& spec) {
  std::string out = "usage: allot " + spec.name;
  if (!spec.synopsis.empty()) out += " " + spec.synopsis;
  out += "\n\n" + spec.summary + "\n\noptions:\n";
  std::size_t width = 0;
  auto head = [](const FlagSpec& f) {
    const char short_name = short_flag_of(f.name);
    return (short_name ? std::string("-") + short_name + ", " : std::string()) + "--" + f.name +
           (f.value.empty() ? "" : " " + f.value);
  };
  for (const auto& f : spec.flags) width = std::max(width, head(f).size());
  for (const auto& f : spec.flags) {
    std::string h = head(f);
    h.resize(width, ' ');
    out += "  " + h + "  " + f.help;
    if (!f.choices.empty()) out += " (" + join(f.choices, ", ") + ")";
    out += "\n";
  }
  out += "\nexample:\n  " + spec.example + "\n\n" + exit_codes_text();
  return out;
}

}  // namespace allot::cli
