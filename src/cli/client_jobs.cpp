// The client commands about jobs: submit, ls, show, why, cancel, hold, release, logs.
#include <httplib.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "cli/contract.h"
#include "cli/flags.h"

namespace allot::cli::client {

namespace {

// A YAML job spec holds the fields of POST /jobs, with a few written the way people write them:
// durations ("2h") for min_runtime and expected_duration, sizes ("64G") for memory (memory_mib),
// gpus for the total GPUs (shaped by the server), model/cluster for one-entry models/clusters, env
// values of any scalar.
json from_yaml_spec(const std::string& file, json body) {
  if (!body.is_object()) die(kUsage, file + ": a job spec is a mapping of fields");
  for (const char* k : {"min_runtime", "expected_duration"}) {
    if (body.contains(k) && body[k].is_string()) {
      body[k] = parse_duration(file + ": " + k, body[k].get<std::string>());
    }
  }
  auto rename = [&](const char* from, const char* to) {
    if (!body.contains(from)) return;
    if (body.contains(to)) die(kUsage, file + ": give " + from + " or " + to + ", not both");
    body[to] = body[from];
    body.erase(from);
  };
  rename("memory", "memory_mib");
  if (body.contains("memory_mib") && body["memory_mib"].is_string()) {
    body["memory_mib"] = parse_mib(file + ": memory", body["memory_mib"].get<std::string>());
  }
  for (const char* k : {"model", "cluster"}) {
    if (body.contains(k) && body[k].is_string()) {
      body[std::string(k) + "s"] = json::array({body[k]});
      body.erase(k);
    }
  }
  if (body.contains("env") && body["env"].is_object()) {
    for (auto& [k, v] : body["env"].items()) {
      if (v.is_number_integer()) v = std::to_string(v.get<long long>());
      if (v.is_number_float()) v = json(v).dump();
      if (v.is_boolean()) v = v.get<bool>() ? "true" : "false";
    }
  }
  if (body.contains("command") && body["command"].is_string()) {
    body["command"] = json::array({"/bin/sh", "-c", body["command"]});
  }
  if (body.contains("command") && body["command"].is_array()) {
    for (auto& v : body["command"]) {
      if (v.is_number_integer()) v = std::to_string(v.get<long long>());
      if (v.is_number_float()) v = json(v).dump();
    }
  }
  return body;
}

// A job whose directory does not exist fails when it starts, maybe hours later: refused here,
// before sending, with the reason. A relative one is taken from the submit directory (like
// sbatch -D); the server refuses what is still not absolute.
// `what` names where it came from: "--workdir", the YAML's "workdir", or the submit directory.
void check_workdir(json& workdir, const std::string& what) {
  if (!workdir.is_string()) die(kUsage, what + ": must be a directory's path");
  std::filesystem::path dir = workdir.get<std::string>();
  if (dir.empty()) die(kUsage, what + ": empty");
  std::error_code ec;
  if (dir.is_relative()) {
    dir = std::filesystem::absolute(dir, ec).lexically_normal();
    if (ec) die(kUsage, what + ": " + workdir.get<std::string>() + ": " + ec.message());
    workdir = dir.string();
  }
  const auto st = std::filesystem::status(dir, ec);
  if (!std::filesystem::exists(st)) {
    die(kUsage, what + ": " + dir.string() +
                    ": no such directory (the job starts there: give one that exists, on a path "
                    "the nodes share)");
  }
  if (!std::filesystem::is_directory(st)) {
    die(kUsage, what + ": " + dir.string() + ": not a directory");
  }
}

json job_events(const Conn& c, const std::string& id) {
  auto ev = request(c, "GET", "/api/v1/jobs/" + id + "/events");
  return ev.value("events", json::array());
}

// After a submit: the job's class once a cycle decided it (a few seconds at most), or what stands
// in the way of an allocated start, so that nobody learns of a lost contract from a preemption.
void tell_class(const Conn& c, const std::string& id, const json& submitted) {
  const long long wanted = submitted["spec"].value("min_runtime", 0LL);
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    auto j = request(c, "GET", "/api/v1/jobs/" + id);
    const auto state = j.value("state", "");
    const long long now = static_cast<long long>(std::time(nullptr));
    if (state == "starting" || state == "running") {
      if (j.value("allocated", false)) {
        std::printf("  started allocated: protected until %s\n",
                    local_time(j.value("protected_until", 0LL), now).c_str());
      } else {
        const auto cause = unallocated_cause(job_events(c, id));
        std::printf("  started UNALLOCATED%s: preemptible at any time\n",
                    cause.empty() ? "" : (" (" + cause + ")").c_str());
      }
      return;
    }
    if (state != "pending" && state != "requeued") {
      std::printf("  %s: %s\n", state.c_str(), j.value("reason", "").c_str());
      return;
    }
    auto w = request(c, "GET", "/api/v1/jobs/" + id + "/why");
    if (w.value("code", "") == "not-yet-considered") continue;
    std::string limit;
    const auto text = w.value("explanation", "");
    for (std::size_t st = 0; st < text.size();) {
      auto end = text.find("; ", st);
      if (end == std::string::npos) end = text.size();
      const auto part = text.substr(st, end - st);
      if (part.find("would run unallocated") != std::string::npos) limit = part;
      st = end + 2;
    }
    if (wanted > 0 && !w.value("funded", true)) {
      std::printf("  may start unallocated: %s\n",
                  limit.empty() ? "its budget cannot fund the contract now" : limit.c_str());
    }
    std::printf("  waiting (%s): see 'allot why %s'\n", w.value("code", "").c_str(), id.c_str());
    return;
  }
  std::printf("  not yet considered by the scheduler: 'allot why %s' tells its class\n",
              id.c_str());
}

// The nodes no job may stay on: draining (cordoned nodes keep their jobs) or unhealthy.
std::set<std::string> draining_nodes(const Conn& c) {
  std::set<std::string> out;
  for (const auto& n : request(c, "GET", "/api/v1/nodes").value("nodes", json::array())) {
    const auto h = n.value("health", "");
    if (h == "draining" || h == "unhealthy") out.insert(n.value("name", ""));
  }
  return out;
}

// "draining: stops at 14:30" for a job on a draining node ("" when it is on none).
std::string drain_story(const json& job, const std::set<std::string>& draining, long long now) {
  for (const auto& g : job.value("placement", json::array())) {
    if (!draining.count(g.value("node", ""))) continue;
    const long long stop = drain_stop_time(job, now);
    return g.value("node", "") + " draining: " +
           (stop <= now ? std::string("stops now") : "stops at " + local_time(stop, now));
  }
  return "";
}

// For a job on draining or unhealthy nodes: when the drain stops it, one line per such node.
std::vector<std::string> drain_lines(const Conn& c, const json& job, long long now) {
  std::set<std::string> nodes;
  for (const auto& g : job.value("placement", json::array())) nodes.insert(g.value("node", ""));
  std::vector<std::string> out;
  for (const auto& n : nodes) {
    auto node = request(c, "GET", "/api/v1/nodes/" + qs_escape(n));
    const auto health = node.value("health", "");
    if (health != "draining" && health != "unhealthy") continue;
    out.push_back(drain_sentence(job, n, health, node.value("health_reason", ""), now));
  }
  return out;
}

int need_id(const Args& a, const char* cmd) {
  if (a.pos.empty()) die(kUsage, std::string(cmd) + ": give a job id");
  parse_count("job id", a.pos[0]);
  return 0;
}

}  // namespace

int cmd_submit(const Args& a, const Conn& c) {
  json body = json::object();
  if (!a.pos.empty()) {
    try {
      body = yaml_to_json(YAML::LoadFile(a.pos[0]));
    } catch (const std::exception& e) {
      die(kUsage, a.pos[0] + ": " + e.what());
    }
    body = from_yaml_spec(a.pos[0], body);
  }
  if (a.has("budget")) body["budget"] = a.get("budget");
  if (a.has("name")) body["name"] = a.get("name");
  if (a.has("gpus")) body["gpus"] = parse_count("--gpus", a.get("gpus"));
  if (a.has("gpus-per-node"))
    body["gpus_per_node"] = parse_count("--gpus-per-node", a.get("gpus-per-node"));
  if (a.has("nodes")) body["nodes"] = parse_count("--nodes", a.get("nodes"));
  // --gpus is the total; with --nodes it is split evenly over them (like Slurm's --gpus).
  if (body.contains("gpus") && body.contains("gpus_per_node")) {
    die(kUsage, "--gpus is the total: give it or --gpus-per-node, not both");
  }
  if (body.contains("gpus") && body.contains("nodes") && body["gpus"].is_number_integer() &&
      body["nodes"].is_number_integer()) {
    const long long total = body["gpus"].get<long long>(), nodes = body["nodes"].get<long long>();
    if (nodes < 1 || total % nodes != 0) {
      die(kUsage, "--gpus " + std::to_string(total) + " does not split evenly over --nodes " +
                      std::to_string(nodes) + ": give --gpus-per-node instead");
    }
    body["gpus_per_node"] = total / nodes;
    body.erase("gpus");
  }
  if (a.has("gpu-milli")) body["gpu_milli"] = parse_count("--gpu-milli", a.get("gpu-milli"));
  if (a.has("mig")) body["mig"] = a.get("mig");
  if (a.has("min-runtime"))
    body["min_runtime"] = parse_duration("--min-runtime", a.get("min-runtime"));
  if (a.has("expected"))
    body["expected_duration"] = parse_duration("--expected", a.get("expected"));
  if (a.has("priority")) body["priority"] = a.get("priority");
  if (a.has("kind")) body["kind"] = a.get("kind");
  if (a.has("model")) body["models"] = {a.get("model")};
  if (a.has("cluster")) body["clusters"] = {a.get("cluster")};
  if (a.has("resumable")) body["resumable"] = true;
  if (a.has("key")) body["idempotency_key"] = a.get("key");
  const std::string workdir_from = a.has("workdir")           ? "--workdir"
                                   : body.contains("workdir") ? a.pos[0] + ": workdir"
                                                              : "the submit directory (the "
                                                                "default --workdir)";
  if (a.has("workdir")) body["workdir"] = a.get("workdir");
  // Like sbatch: a job starts where it was submitted from (a path the nodes share), unless told.
  if (!body.contains("workdir")) {
    std::error_code ec;
    const auto cwd = std::filesystem::current_path(ec);
    if (!ec && cwd.is_absolute()) body["workdir"] = cwd.string();
  }
  if (body.contains("workdir")) check_workdir(body["workdir"], workdir_from);
  if (a.has("memory")) body["memory_mib"] = parse_mib("--memory", a.get("memory"));
  if (a.has("cpus")) body["cpus"] = parse_number("--cpus", a.get("cpus"));
  if (a.has("container")) body["container"] = a.get("container");
  for (const auto& kv : a.env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) die(kUsage, "--env: '" + kv + "' is not NAME=VALUE");
    if (!body.contains("env") || !body["env"].is_object()) body["env"] = json::object();
    body["env"][kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!a.rest.empty()) body["command"] = a.rest;
  // Said, not left out: the server refuses an empty command where a node runs real processes.
  if (!body.contains("command")) body["command"] = json::array();
  if (a.has("hold")) body["hold"] = true;
  for (const char* flag : {"after", "after-any"}) {
    if (!a.has(flag)) continue;
    json ids = json::array();
    const auto list = a.get(flag);
    for (std::size_t st = 0; st <= list.size();) {
      auto comma = list.find(',', st);
      if (comma == std::string::npos) comma = list.size();
      ids.push_back(parse_count(std::string("--") + flag, list.substr(st, comma - st)));
      st = comma + 1;
    }
    body[std::string(flag) == "after" ? "after" : "after_any"] = ids;
  }
  if (a.has("array")) body["array"] = a.get("array");
  if (!body.contains("idempotency_key")) body["idempotency_key"] = random_key();
  if (!body.contains("budget"))
    die(kUsage, "submit: give --budget /org/team (or budget: in the YAML)");
  auto r = request(c, "POST", "/api/v1/jobs", &body);
  if (a.has("json")) {
    std::printf("%s\n", r.dump(2).c_str());
    return kOk;
  }
  // Never a refusal: the server's hint when the budget's recent jobs of this shape used less.
  auto hint = [&r] {
    if (r.contains("hint") && r["hint"].is_string()) {
      std::printf("  hint: %s\n", r["hint"].get<std::string>().c_str());
    }
  };
  if (r.contains("array_job_id")) {
    const auto& tasks = r["jobs"];
    std::printf("submitted array %llu: %zu tasks, jobs %llu-%llu (%s)\n  %s\n",
                r["array_job_id"].get<unsigned long long>(), tasks.size(),
                tasks.front()["id"].get<unsigned long long>(),
                tasks.back()["id"].get<unsigned long long>(),
                tasks.front()["state"].get<std::string>().c_str(),
                contract_promise(tasks.front(), body.contains("min_runtime")).c_str());
    hint();
    return kOk;
  }
  const auto id = std::to_string(r["id"].get<unsigned long long>());
  // A minimum runtime in the request (flag or YAML), not one left out: 0 then is a choice.
  const bool asked = body.contains("min_runtime");
  std::printf("submitted job %s (%s)\n  %s\n", id.c_str(), r["state"].get<std::string>().c_str(),
              contract_promise(r, asked).c_str());
  if (r.contains("spec") && r["spec"].value("nodes", 1) > 1) {
    std::printf("  a gang of %s GPUs (nodes x GPUs per node)\n", gpus_of(r).c_str());
  }
  hint();
  std::fflush(stdout);
  tell_class(c, id, r);
  return kOk;
}

namespace {

// One listing of `ls`: the table (under -o wide with more columns, uncut) or the JSON (on one
// line when watching, one listing a line). `heading` prints first, once every request is answered:
// a failed one exits with nothing of this listing printed.
void list_jobs(
    const Args& a, const Conn& c, bool one_line_json,
    const std::function<void()>& heading = [] {}) {
  std::string q = "/api/v1/jobs?order=desc&limit=" + a.get("limit", "50");
  if (a.has("state"))
    q += "&state=" + qs_escape(a.get("state"));
  else if (!a.has("all"))
    q += "&state=pending,starting,running,preempting,requeued";
  if (a.has("owner")) q += "&owner=" + qs_escape(a.get("owner"));
  if (a.has("budget")) q += "&budget=" + qs_escape(a.get("budget"));
  auto r = request(c, "GET", q);
  if (a.has("json")) {
    heading();
    std::printf("%s\n", r["jobs"].dump(one_line_json ? -1 : 2).c_str());
    return;
  }
  const bool wide = a.get("output") == "wide";
  std::vector<std::vector<std::string>> rows;
  const long long now = static_cast<long long>(std::time(nullptr));
  std::set<std::string> draining;  // asked once, only when some job is on a node
  bool asked = false;
  for (const auto& j : r["jobs"]) {
    const auto id = std::to_string(j["id"].get<unsigned long long>());
    const auto state = j["state"].get<std::string>();
    std::string reason = j["reason"];
    if (!j.value("placement", json::array()).empty() &&
        (state == "starting" || state == "running")) {
      if (!asked) draining = draining_nodes(c);
      asked = true;
      if (const auto d = drain_story(j, draining, now); !d.empty()) reason = d;
    }
    if (state == "pending" || state == "requeued") {
      // A waiting job's reason is the scheduler's, not "submitted".
      auto w = request(c, "GET", "/api/v1/jobs/" + id + "/why");
      const auto code = w.value("code", ""), text = w.value("explanation", "");
      reason = text.rfind(code, 0) == 0 ? text : code + ": " + text;  // held (by USER) ...
    }
    std::vector<std::string> row = {id,
                                    j["name"],
                                    j["owner"],
                                    j["budget"],
                                    state,
                                    gpus_of(j),
                                    job_class(j),
                                    protection_left(j, now),
                                    ago(j["submit_time"].get<long long>())};
    if (wide) {
      std::string nodes;  // the placement has one entry per GPU: each node once, in order
      std::set<std::string> seen;
      for (const auto& g : j.value("placement", json::array())) {
        const auto node = g.value("node", std::string("?"));
        if (seen.insert(node).second) nodes += (nodes.empty() ? "" : ",") + node;
      }
      const auto& spec = j["spec"];
      const long long min_runtime = spec.value("min_runtime", 0LL);
      row.push_back(nodes.empty() ? "-" : nodes);
      row.push_back(std::to_string(spec.value("nodes", 1)) + "x" +
                    (spec.value("gpu_milli", 1000) < 1000
                         ? gpus_of(j)
                         : std::to_string(spec.value("gpus_per_node", 1))));
      row.push_back(min_runtime > 0 ? human_duration(min_runtime) : "0");
      row.push_back(spec.value("priority", std::string("normal")));
      row.push_back(local_time(j["submit_time"].get<long long>(), now));
    }
    row.push_back(reason);
    rows.push_back(std::move(row));
  }
  std::vector<std::string> head = {"ID",   "NAME",  "OWNER",     "BUDGET", "STATE",
                                   "GPUS", "CLASS", "PROTECTED", "AGE"};
  if (wide) {
    for (const char* h : {"NODES", "SHAPE", "MIN-RUNTIME", "PRIORITY", "SUBMITTED"}) {
      head.emplace_back(h);
    }
  }
  head.emplace_back("REASON");
  heading();
  table(head, rows, /*cut=*/!wide);
}

}  // namespace

int cmd_ls(const Args& a, const Conn& c) {
  if (a.has("watch-count") && !a.has("watch")) die(kUsage, "ls: --watch-count needs --watch");
  if (!a.has("watch")) {
    list_jobs(a, c, false);
    return kOk;
  }
  const auto given = a.get("watch");
  const long long interval = given.empty() ? 2 : parse_duration("--watch", given);
  if (interval < 1) die(kUsage, "--watch: the interval must be at least 1s");
  const long long count =
      a.has("watch-count") ? parse_count("--watch-count", a.get("watch-count")) : 0;
  if (a.has("watch-count") && count < 1) die(kUsage, "--watch-count: must be at least 1");
  // Like watch(1): on a terminal, each listing replaces the last; piped, each follows a line of
  // dashes with the time. Stops when interrupted (Ctrl-C) or after --watch-count listings.
  // A refresh that fails (server gone, token revoked, server error) ends the watch with the exit
  // code of that failure and one line saying since when the listing shown is old: a listing is
  // printed only once all its requests are answered, never a stale one in its place.
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  set_error_context("ls --watch stopped before its first listing: ");
  for (long long n = 1;; ++n) {
    const long long now = static_cast<long long>(std::time(nullptr));
    list_jobs(a, c, true, [&] {
      if (a.has("json")) return;
      const auto every = human_duration(interval), at = local_time(now, now);
      if (terminal) {
        std::printf("\033[H\033[2JEvery %s: allot ls    %s\n\n", every.c_str(), at.c_str());
      } else {
        std::printf("--- %s (every %s) ---\n", at.c_str(), every.c_str());
      }
    });
    std::fflush(stdout);
    set_error_context("ls --watch stopped (the last listing is from " + local_time(now, now) +
                      "): ");
    if (count > 0 && n >= count) return kOk;
    std::this_thread::sleep_for(std::chrono::seconds(interval));
  }
}

int cmd_show(const Args& a, const Conn& c) {
  need_id(a, "show");
  auto r = request(c, "GET", "/api/v1/jobs/" + a.pos[0]);
  if (a.has("json")) {
    std::printf("%s\n", r.dump(2).c_str());
    return kOk;
  }
  std::printf("job %s  %s\n", a.pos[0].c_str(), r["name"].get<std::string>().c_str());
  for (const char* k :
       {"owner", "budget", "state", "reason", "allocated", "runs", "cluster", "exit_code"}) {
    if (r.contains(k))
      std::printf("  %-10s %s\n", k,
                  r[k].is_string() ? r[k].get<std::string>().c_str() : r[k].dump().c_str());
  }
  // The contract, in words: what `allocated` and `protected_until` mean for this job now.
  const long long now = static_cast<long long>(std::time(nullptr));
  std::string contract = job_class(r);
  const auto left = protection_left(r, now);
  if (left != "-" && left != "no") {
    contract += ", protected until " + local_time(r.value("protected_until", 0LL), now) +
                (left == "ended" ? " (ended)" : " (" + left + " left)");
  }
  std::printf("  %-10s %s\n", "class", contract.c_str());
  if (const auto st = r.value("state", "");
      (st == "starting" || st == "running") && !r.value("placement", json::array()).empty()) {
    for (const auto& line : drain_lines(c, r, now))
      std::printf("  %-10s %s\n", "drain", line.c_str());
  }
  if (r.contains("held_by")) {
    std::printf("  %-10s held (by %s): 'allot release %s'\n", "hold",
                r["held_by"].get<std::string>().c_str(), a.pos[0].c_str());
  }
  for (const char* k : {"after", "after_any"}) {
    if (!r.contains(k)) continue;
    std::string ids;
    for (const auto& d : r[k]) ids += (ids.empty() ? "" : ",") + d.dump();
    std::printf("  %-10s %s%s\n", k, ids.c_str(),
                std::string(k) == "after" ? " (each must succeed)" : " (each must end)");
  }
  if (r.contains("array_job_id")) {
    std::printf("  %-10s task %d of array %llu\n", "array", r.value("array_index", 0),
                r["array_job_id"].get<unsigned long long>());
  }
  if (const auto& spec = r["spec"]; spec.is_object() && spec.contains("service")) {
    const std::string svc = spec.value("service", "");
    std::printf("  %-10s %s (%s replica: 'allot serve show %s')\n", "service", svc.c_str(),
                spec.value("service_tier", "").c_str(), svc.c_str());
  }
  std::printf("  %-10s %s\n", "spec", r["spec"].dump().c_str());
  if (r.contains("placement") && r["placement"].is_array() && !r["placement"].empty()) {
    std::map<std::string, std::string> per_node;  // node -> "0,1,2"
    std::vector<std::string> order;
    for (const auto& g : r["placement"]) {
      const auto node = g.value("node", "");
      if (!per_node.count(node)) order.push_back(node);
      auto& s = per_node[node];
      s += (s.empty() ? "" : ",") + std::to_string(g.value("gpu", 0));
    }
    std::string text;
    for (const auto& n : order) text += (text.empty() ? "" : "  ") + n + " [" + per_node[n] + "]";
    std::printf("  %-10s %s\n", "gpus", text.c_str());
  }
  // What the job's GPUs really did (telemetry from its agents), and what that suggests.
  auto t = request(c, "GET", "/api/v1/jobs/" + a.pos[0] + "/telemetry");
  if (t.contains("current") && t["current"].is_object()) {
    const auto& u = t["current"];
    std::printf(
        "telemetry (run %d): %d samples over %.0f s: GPU use %.0f%% mean, %.0f%% peak; memory "
        "peak %lld of %lld MiB; CPU %.0f%% (100 = one core); I/O wait %.0f%%\n",
        u.value("run", 0), u.value("samples", 0), u.value("seconds", 0.0),
        u.value("gpu_util_mean", 0.0), u.value("gpu_util_peak", 0.0),
        static_cast<long long>(u.value("mem_used_peak_mib", std::int64_t{0})),
        static_cast<long long>(u.value("mem_total_mib", std::int64_t{0})),
        u.value("cpu_pct_mean", 0.0), u.value("io_wait_pct_mean", 0.0));
  }
  for (const auto& f : t.value("flags", json::array())) {
    std::printf("  %s: %s\n", f.value("flag", "").c_str(), f.value("hint", "").c_str());
  }
  // Right-sizing advice over all its runs (the same as `allot advise`).
  const auto advice = t.value("advice", json::array());
  if (!advice.empty()) std::printf("advice:\n");
  for (const auto& f : advice) {
    std::printf("  %s: %s\n", f.value("reason", "").c_str(), f.value("hint", "").c_str());
  }
  auto ev = request(c, "GET", "/api/v1/jobs/" + a.pos[0] + "/events");
  std::printf("events:\n");
  for (const auto& e : ev["events"]) {
    std::printf("  %s  %-10s -> %-10s %s\n", local_time(e["time"].get<long long>(), now).c_str(),
                e["from"].get<std::string>().c_str(), e["to"].get<std::string>().c_str(),
                e["reason"].get<std::string>().c_str());
  }
  return kOk;
}

int cmd_why(const Args& a, const Conn& c) {
  need_id(a, "why");
  auto r = request(c, "GET", "/api/v1/jobs/" + a.pos[0] + "/why");
  if (a.has("json")) {
    std::printf("%s\n", r.dump(2).c_str());
    return kOk;
  }
  const auto state = r["state"].get<std::string>();
  std::printf("job %s is %s: %s\n", a.pos[0].c_str(), state.c_str(),
              r["explanation"].get<std::string>().c_str());
  auto job = request(c, "GET", "/api/v1/jobs/" + a.pos[0]);
  const auto events = job_events(c, a.pos[0]);
  const long long now = static_cast<long long>(std::time(nullptr));
  if (state == "starting" || state == "running" || state == "preempting") {
    for (const auto& line : running_story(job, events, now)) {
      std::printf("  %s\n", line.c_str());
    }
    for (const auto& line : drain_lines(c, job, now)) std::printf("  %s\n", line.c_str());
  } else if (state == "pending" || state == "requeued") {
    const auto stop = last_stop(events);
    if (!stop.empty()) std::printf("  last stopped: %s\n", stop.c_str());
    std::printf("  %s\n", contract_promise(job).c_str());
  }
  return kOk;
}

int cmd_cancel(const Args& a, const Conn& c) {
  need_id(a, "cancel");
  json body = json::object();
  if (a.has("reason")) body["reason"] = a.get("reason");
  auto r = request(c, "POST", "/api/v1/jobs/" + a.pos[0] + "/cancel", &body);
  std::printf("job %s %s\n", a.pos[0].c_str(), r["state"].get<std::string>().c_str());
  return kOk;
}

int cmd_hold(const Args& a, const Conn& c, bool hold) {
  for (const auto& id : a.pos) parse_count("job id", id);
  for (const auto& id : a.pos) {
    json body = json::object();
    auto r = request(c, "POST", "/api/v1/jobs/" + id + (hold ? "/hold" : "/release"), &body);
    if (a.has("json")) {
      std::printf("%s\n", r.dump(2).c_str());
    } else if (hold) {
      std::printf("job %s held (by %s): 'allot release %s' lets it be scheduled\n", id.c_str(),
                  r.value("held_by", "").c_str(), id.c_str());
    } else {
      std::printf("job %s released (%s)\n", id.c_str(), r.value("state", "").c_str());
    }
  }
  return kOk;
}

// `allot logs JOB`: the job's output as its agents uploaded it; -f follows until the run ended
// and every byte is in.
int cmd_logs(const Args& a, const Conn& c) {
  need_id(a, "logs");
  std::string base = "/api/v1/jobs/" + a.pos[0] +
                     "/logs?stream=" + std::string(a.has("stderr") ? "stderr" : "stdout");
  if (a.has("node")) base += "&node=" + qs_escape(a.get("node"));
  if (a.has("run")) base += "&run=" + std::to_string(parse_count("--run", a.get("run")));
  httplib::Client cli(c.addr);
  configure(cli, c);
  const httplib::Headers h = {{"Authorization", "Bearer " + c.token}};
  long long offset = 0;
  for (;;) {
    auto r = cli.Get((base + "&offset=" + std::to_string(offset)).c_str(), h);
    if (!r) unreachable(c, r.error());
    if (r->status >= 400) refused(r->status, r->body);
    const long long start = std::atoll(r->get_header_value("Allot-Offset").c_str());
    if (start > offset) {
      std::fprintf(stderr,
                   "allot: [%lld bytes dropped here: the server keeps the first and the "
                   "last 32 MiB of a stream]\n",
                   start - offset);
    }
    std::fwrite(r->body.data(), 1, r->body.size(), stdout);
    std::fflush(stdout);
    offset = std::atoll(r->get_header_value("Allot-Next-Offset").c_str());
    const bool complete = r->get_header_value("Allot-Complete") == "true";
    if (!r->body.empty()) continue;  // more may be there already
    if (complete || !a.has("follow")) break;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  return kOk;
}

}  // namespace allot::cli::client
