// The client commands of `allot`: they talk to a server over HTTP only. The address and token come
// from --addr/--token, else ALLOT_ADDR/ALLOT_TOKEN, else ~/.config/allot/config ("addr = ...",
// "token = ..."). Exit codes: 0 done; 1 refused (bad request, conflict); 2 bad usage; 3 server
// unreachable; 4 not authorised; 5 not found; 6 server error.
#include <httplib.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/contract.h"
#include "cli/flags.h"

namespace allot::cli {
namespace {

using json = nlohmann::json;

enum Exit {
  kOk = 0,
  kRefused = 1,
  kUsage = 2,
  kUnreachable = 3,
  kAuth = 4,
  kNotFound = 5,
  kServer = 6
};

[[noreturn]] void die(int code, const std::string& msg) {
  std::fprintf(stderr, "allot: %s\n", msg.c_str());
  std::exit(code);
}

struct Conn {
  std::string addr, token, cacert;
  bool insecure = false;
};

Conn connection(const Args& a) {
  Conn c;
  std::map<std::string, std::string> cfg;
  if (const char* home = std::getenv("HOME")) {
    std::ifstream in(std::string(home) + "/.config/allot/config");
    std::string line;
    while (std::getline(in, line)) {
      auto eq = line.find('=');
      if (eq == std::string::npos || line[0] == '#') continue;
      auto trim = [](std::string s) {
        s.erase(0, s.find_first_not_of(" \t"));
        s.erase(s.find_last_not_of(" \t\r") + 1);
        return s;
      };
      cfg[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
    }
  }
  auto pick = [&](const char* opt, const char* env, const char* key) {
    if (a.has(opt)) return a.get(opt);
    if (const char* e = std::getenv(env); e && *e) return std::string(e);
    return cfg.count(key) ? cfg[key] : std::string();
  };
  c.addr = pick("addr", "ALLOT_ADDR", "addr");
  c.token = pick("token", "ALLOT_TOKEN", "token");
  c.cacert = pick("cacert", "ALLOT_CACERT", "cacert");
  c.insecure = a.has("insecure");
  if (c.addr.empty()) c.addr = "http://127.0.0.1:7400";
  if (c.addr.find("://") == std::string::npos) c.addr = "http://" + c.addr;
  if (c.token.empty()) {
    die(kAuth,
        "no token: pass --token, set ALLOT_TOKEN, or put 'token = ...' in "
        "~/.config/allot/config (allot server/up prints an admin token at start)");
  }
  return c;
}

void configure(httplib::Client& cli, const Conn& c) {
  cli.set_connection_timeout(5);
  cli.set_read_timeout(60);
  if (!c.cacert.empty()) cli.set_ca_cert_path(c.cacert.c_str());
  if (c.insecure) cli.enable_server_certificate_verification(false);
}

[[noreturn]] void unreachable(const Conn& c, httplib::Error e) {
  die(kUnreachable, "cannot reach the server at " + c.addr + " (" + httplib::to_string(e) +
                        "): is it running? set --addr or ALLOT_ADDR");
}

// Exits with the error the server gave (its field and reason) and the matching exit code.
[[noreturn]] void refused(int status, const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  std::string msg = "server refused (" + std::to_string(status) + ")";
  if (!j.is_discarded() && j.contains("error")) {
    auto f = j["error"].value("field", "");
    msg += ": " + (f.empty() ? "" : f + ": ") + j["error"].value("reason", "");
  }
  int code = status == 401 || status == 403 ? kAuth
             : status == 404                ? kNotFound
             : status >= 500                ? kServer
                                            : kRefused;
  die(code, msg);
}

json request(const Conn& c, const std::string& method, const std::string& path,
             const json* body = nullptr) {
  httplib::Client cli(c.addr);
  configure(cli, c);
  httplib::Headers h = {{"Authorization", "Bearer " + c.token}};
  const std::string payload = body ? body->dump() : std::string();
  httplib::Result r = method == "GET"      ? cli.Get(path.c_str(), h)
                      : method == "DELETE" ? cli.Delete(path.c_str(), h)
                                           : cli.Post(path.c_str(), h, payload, "application/json");
  if (!r && body && method == "POST") {
    // One retry: submits carry an idempotency key, so a retried request never makes two jobs.
    r = cli.Post(path.c_str(), h, payload, "application/json");
  }
  if (!r) unreachable(c, r.error());
  if (r->status >= 400) refused(r->status, r->body);
  return json::parse(r->body, nullptr, false);
}

std::string qs_escape(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '/' || ch == ',') {
      out += static_cast<char>(ch);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", ch);
      out += buf;
    }
  }
  return out;
}

long long parse_duration(const std::string& field, const std::string& s) {
  if (s.empty()) die(kUsage, field + ": empty duration");
  long long total = 0, cur = 0;
  bool digits = false;
  for (char ch : s) {
    if (std::isdigit(static_cast<unsigned char>(ch))) {
      cur = cur * 10 + (ch - '0');
      digits = true;
      if (cur > 1'000'000'000LL) die(kUsage, field + ": too long");
    } else {
      long long unit = ch == 's' ? 1 : ch == 'm' ? 60 : ch == 'h' ? 3600 : ch == 'd' ? 86400 : 0;
      if (!unit || !digits) die(kUsage, field + ": '" + s + "' is not a duration like 90, 30m, 2h");
      total += cur * unit;
      cur = 0;
      digits = false;
    }
  }
  return total + cur;
}

long long parse_count(const std::string& field, const std::string& s) {
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 0) die(kUsage, field + ": '" + s + "' is not a number");
  return v;
}

// "64G", "512M", "1T", "65536" (MiB) -> MiB.
long long parse_mib(const std::string& field, const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end ? std::string(end) : "";
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (!unit.empty() && unit.back() == 'I') unit.pop_back();
  const double mult = unit.empty() || unit == "M" ? 1
                      : unit == "G"               ? 1024
                      : unit == "T"               ? 1024.0 * 1024
                                                  : -1;
  if (s.empty() || end == s.c_str() || mult < 0 || v < 0) {
    die(kUsage, field + ": '" + s + "' is not a size like 64G, 512M or 1T");
  }
  return static_cast<long long>(v * mult + 0.5);
}

double parse_number(const std::string& field, const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || v < 0) die(kUsage, field + ": '" + s + "' is not a number");
  return v;
}

json yaml_to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      json o = json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      json a = json::array();
      for (const auto& v : n) a.push_back(yaml_to_json(v));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const auto s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted
      if (s == "true") return true;
      if (s == "false") return false;
      char* end = nullptr;
      long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && *end == '\0') return v;
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && *end == '\0') return d;
      return s;
    }
    default:
      return nullptr;
  }
}

std::string random_key() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof buf, "cli-%08x%08x%08x", rd(), rd(), rd());
  return buf;
}

int terminal_width() {
  winsize w{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 20) {
    return w.ws_col;
  }
  if (const char* c = std::getenv("COLUMNS")) {
    int v = std::atoi(c);
    if (v > 20) return v;
  }
  return 120;
}

// Prints rows as columns; the last column is cut to fit the terminal.
void table(const std::vector<std::string>& head,
           const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w(head.size());
  for (std::size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
  for (const auto& r : rows) {
    for (std::size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  }
  const int width = terminal_width();
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (std::size_t i = 0; i < r.size(); ++i) {
      std::string cell = r[i];
      if (i + 1 < r.size()) {
        cell.resize(w[i], ' ');
        cell += "  ";
      }
      out += cell;
    }
    if (static_cast<int>(out.size()) > width)
      out = out.substr(0, static_cast<std::size_t>(width - 1)) + "…";
    std::printf("%s\n", out.c_str());
  };
  line(head);
  for (const auto& r : rows) line(r);
}

std::string gpus_of(const json& j) {
  const auto& s = j["spec"];
  int n = s.value("nodes", 1), g = s.value("gpus_per_node", 1), m = s.value("gpu_milli", 1000);
  if (m < 1000) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", m / 1000.0);  // 250 -> 0.25, 50 -> 0.05
    return buf;
  }
  return n > 1 ? std::to_string(n) + "x" + std::to_string(g) : std::to_string(g);
}

std::string ago(long long t) {
  long long d = static_cast<long long>(std::time(nullptr)) - t;
  if (d < 0) d = 0;
  if (d < 120) return std::to_string(d) + "s";
  if (d < 7200) return std::to_string(d / 60) + "m";
  if (d < 172800) return std::to_string(d / 3600) + "h";
  return std::to_string(d / 86400) + "d";
}

// A YAML job spec holds the fields of POST /jobs, with a few written the way people write them:
// durations ("2h") for min_runtime and expected_duration, sizes ("64G") for memory (memory_mib),
// gpus for gpus_per_node, model/cluster for one-entry models/clusters, env values of any scalar.
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
  rename("gpus", "gpus_per_node");
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
  if (a.has("gpus")) body["gpus_per_node"] = parse_count("--gpus", a.get("gpus"));
  if (a.has("nodes")) body["nodes"] = parse_count("--nodes", a.get("nodes"));
  if (a.has("gpu-milli")) body["gpu_milli"] = parse_count("--gpu-milli", a.get("gpu-milli"));
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
  if (a.has("workdir")) body["workdir"] = a.get("workdir");
  // Like sbatch: a job starts where it was submitted from (a path the nodes share), unless told.
  if (!body.contains("workdir")) {
    std::error_code ec;
    const auto cwd = std::filesystem::current_path(ec);
    if (!ec && cwd.is_absolute()) body["workdir"] = cwd.string();
  }
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
  if (!body.contains("idempotency_key")) body["idempotency_key"] = random_key();
  if (!body.contains("budget"))
    die(kUsage, "submit: give --budget /org/team (or budget: in the YAML)");
  auto r = request(c, "POST", "/api/v1/jobs", &body);
  if (a.has("json")) {
    std::printf("%s\n", r.dump(2).c_str());
    return kOk;
  }
  const auto id = std::to_string(r["id"].get<unsigned long long>());
  std::printf("submitted job %s (%s)\n  %s\n", id.c_str(), r["state"].get<std::string>().c_str(),
              contract_promise(r).c_str());
  std::fflush(stdout);
  tell_class(c, id, r);
  return kOk;
}

int cmd_ls(const Args& a, const Conn& c) {
  std::string q = "/api/v1/jobs?order=desc&limit=" + a.get("limit", "50");
  if (a.has("state"))
    q += "&state=" + qs_escape(a.get("state"));
  else if (!a.has("all"))
    q += "&state=pending,starting,running,preempting,requeued";
  if (a.has("owner")) q += "&owner=" + qs_escape(a.get("owner"));
  if (a.has("budget")) q += "&budget=" + qs_escape(a.get("budget"));
  auto r = request(c, "GET", q);
  if (a.has("json")) {
    std::printf("%s\n", r["jobs"].dump(2).c_str());
    return kOk;
  }
  std::vector<std::vector<std::string>> rows;
  const long long now = static_cast<long long>(std::time(nullptr));
  for (const auto& j : r["jobs"]) {
    const auto id = std::to_string(j["id"].get<unsigned long long>());
    const auto state = j["state"].get<std::string>();
    std::string reason = j["reason"];
    if (state == "pending" || state == "requeued") {
      // A waiting job's reason is the scheduler's, not "submitted".
      auto w = request(c, "GET", "/api/v1/jobs/" + id + "/why");
      reason = w.value("code", "") + ": " + w.value("explanation", "");
    }
    rows.push_back({id, j["name"], j["owner"], j["budget"], state, gpus_of(j), job_class(j),
                    protection_left(j, now), ago(j["submit_time"].get<long long>()), reason});
  }
  table({"ID", "NAME", "OWNER", "BUDGET", "STATE", "GPUS", "CLASS", "PROTECTED", "AGE", "REASON"},
        rows);
  return kOk;
}

int need_id(const Args& a, const char* cmd) {
  if (a.pos.empty()) die(kUsage, std::string(cmd) + ": give a job id");
  parse_count("job id", a.pos[0]);
  return 0;
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
    // A drain stops each job as it reaches its minimum runtime: say when, for this one.
    std::set<std::string> nodes;
    for (const auto& g : job.value("placement", json::array())) nodes.insert(g.value("node", ""));
    for (const auto& n : nodes) {
      auto node = request(c, "GET", "/api/v1/nodes/" + qs_escape(n));
      const auto health = node.value("health", "");
      if (health != "draining" && health != "unhealthy") continue;
      const long long stop = drain_stop_time(job, now);
      const auto why = node.value("health_reason", "");
      const std::string when = stop <= now ? std::string("now")
                                           : "at " + local_time(stop, now) +
                                                 (job.value("allocated", false)
                                                      ? ", when its protection ends"
                                                      : ", when it has run its minimum runtime");
      std::printf("  its node %s is %s%s: the job is stopped %s\n", n.c_str(), health.c_str(),
                  why.empty() ? "" : (" (" + why + ")").c_str(), when.c_str());
    }
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

std::string period_query(const Args& a) {
  std::string q;
  long long now = static_cast<long long>(std::time(nullptr));
  long long to = a.has("to") ? parse_count("--to", a.get("to")) : now;
  long long from = a.has("since")  ? to - parse_duration("--since", a.get("since"))
                   : a.has("from") ? parse_count("--from", a.get("from"))
                                   : to - 7 * 86400;
  return "from=" + std::to_string(from) + "&to=" + std::to_string(to);
}

int cmd_budget(const Args& a, const Conn& c) {
  const std::string sub = a.pos.empty() ? "tree" : a.pos[0];
  if (sub == "tree") {
    auto r = request(c, "GET", "/api/v1/budgets");
    if (a.has("json")) {
      std::printf("%s\n", r.dump(2).c_str());
      return kOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& b : r["budgets"]) {
      std::string fr;
      for (const auto& [k, v] : b["fraction"].items()) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s%s %.1f%%", fr.empty() ? "" : ", ", k.c_str(),
                      v.get<double>() * 100);
        fr += buf;
      }
      auto names = [](const json& list) {
        std::string out;
        if (!list.is_array()) return out;
        for (const auto& m : list) out += (out.empty() ? "" : ",") + m.get<std::string>();
        return out;
      };
      char share[32];
      std::snprintf(share, sizeof share, "%g", b["share"].get<double>());
      rows.push_back({std::string(2 * static_cast<std::size_t>(b["depth"].get<int>()), ' ') +
                          b["path"].get<std::string>(),
                      share, fr, names(b.value("owners", json::array())), names(b["members"])});
    }
    table({"BUDGET", "SHARE", "OF CLUSTER", "OWNERS", "MEMBERS"}, rows);
    return kOk;
  }
  if (sub == "rm" || sub == "remove") {
    if (a.pos.size() < 2) die(kUsage, "budget rm PATH");
    auto r = request(c, "DELETE", "/api/v1/budgets?path=" + qs_escape(a.pos[1]));
    for (const auto& p : r["removed"]) std::printf("removed %s\n", p.get<std::string>().c_str());
    return kOk;
  }
  if (sub == "set") {
    if (a.pos.size() < 2) die(kUsage, "budget set PATH [--share X] [--members a,b] [--owners c,d]");
    json body = {{"path", a.pos[1]}};
    if (a.has("share")) {
      body["share"] = parse_number("--share", a.get("share"));
    }
    for (const char* list : {"members", "owners"}) {
      if (!a.has(list)) continue;
      json m = json::array();
      std::string s = a.get(list);
      std::size_t st = 0;
      while (st < s.size()) {
        auto comma = s.find(',', st);
        if (comma == std::string::npos) comma = s.size();
        if (comma > st) m.push_back(s.substr(st, comma - st));
        st = comma + 1;
      }
      body[list] = m;
    }
    auto r = request(c, "POST", "/api/v1/budgets", &body);
    std::printf("budget %s: share %g\n", r["path"].get<std::string>().c_str(),
                r["share"].get<double>());
    return kOk;
  }
  if (sub == "usage") {
    std::string q = "/api/v1/usage?" + period_query(a) + "&by=" + qs_escape(a.get("by", "budget"));
    if (a.has("budget")) q += "&budget=" + qs_escape(a.get("budget"));
    auto r = request(c, "GET", q);
    if (a.has("json")) {
      std::printf("%s\n", r.dump(2).c_str());
      return kOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& x : r["rows"]) {
      char al[32], un[32];
      std::snprintf(al, sizeof al, "%.1f", x["allocated_gpu_seconds"].get<double>() / 3600);
      std::snprintf(un, sizeof un, "%.1f", x["unallocated_gpu_seconds"].get<double>() / 3600);
      rows.push_back(
          {x.contains("user") ? x["user"].get<std::string>() : x["budget"].get<std::string>(), al,
           un});
    }
    table({a.get("by", "budget") == "user" ? "USER" : "BUDGET", "ALLOCATED GPU-H",
           "UNALLOCATED GPU-H"},
          rows);
    return kOk;
  }
  die(kUsage, "budget: tree, set, rm or usage");
}

std::string pct(const json& v) {
  if (!v.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", v.get<double>() * 100);
  return buf;
}

std::string hours(const json& v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v.is_number() ? v.get<double>() / 3600 : 0.0);
  return buf;
}

std::string num(const json& v) {
  if (!v.is_number()) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v.get<double>());
  return buf;
}

// allot report: the four metrics over the period (availability, occupancy, impact, utilization),
// then owed and delivered per budget. --format text (default), csv (one metric per line: section,
// name, metric, value) or json (the API's reply).
int cmd_report(const Args& a, const Conn& c) {
  std::string q = "/api/v1/report?" + period_query(a);
  if (a.has("budget")) q += "&budget=" + qs_escape(a.get("budget"));
  const auto fmt = a.has("json") ? "json" : a.get("format", "text");
  if (fmt != "json" && fmt != "csv" && fmt != "text") die(kUsage, "--format: text, csv or json");
  auto r = request(c, "GET", q);
  if (fmt == "json") {
    std::printf("%s\n", r.dump(2).c_str());
    return kOk;
  }
  const auto& av = r["availability"];
  const auto& oc = r["occupancy"];
  const auto& im = r["impact"];
  const auto& ut = r["utilization"];
  if (fmt == "csv") {
    std::printf("section,name,metric,value\n");
    auto line = [](const std::string& sec, const std::string& name, const char* metric,
                   const json& v) {
      std::printf("%s,%s,%s,%s\n", sec.c_str(), name.c_str(), metric, num(v).c_str());
    };
    const std::string scope = r.value("scope", "/");
    line("all", scope, "availability", av["value"]);
    line("all", scope, "occupancy", oc["value"]);
    line("all", scope, "occupancy_allocated", oc["allocated"]);
    line("all", scope, "occupancy_unallocated", oc["unallocated"]);
    line("all", scope, "impact_mean", im["mean"]);
    line("all", scope, "impact_min", im["min"]);
    line("all", scope, "budgets_owed", im["budgets_owed"]);
    line("all", scope, "budgets_at_least_95", im["budgets_at_least_95"]);
    line("all", scope, "utilization", ut["value"]);
    line("all", scope, "jobs_measured", ut["jobs_measured"]);
    line("all", scope, "jobs_without_telemetry", ut["jobs_without_telemetry"]);
    for (const auto& [name, cl] : r["clusters"].items()) {
      for (const char* k :
           {"availability", "occupancy", "occupancy_allocated", "occupancy_unallocated",
            "total_gpu_seconds", "available_gpu_seconds"}) {
        line("cluster", name, k, cl[k]);
      }
    }
    for (const auto& b : r["budgets"]) {
      for (const char* k :
           {"owed_gpu_seconds", "owed_capped_gpu_seconds", "demand_gpu_seconds",
            "allocated_gpu_seconds", "unallocated_gpu_seconds", "delivered_fraction", "impact",
            "utilization", "jobs_measured", "jobs_without_telemetry"}) {
        line("budget", b["budget"].get<std::string>(), k, b[k]);
      }
    }
    return kOk;
  }
  auto when = [](long long t) {
    std::time_t tt = static_cast<std::time_t>(t);
    std::tm tm{};
    gmtime_r(&tt, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
    return std::string(buf);
  };
  std::printf("%s: %s to %s UTC\n", r.value("scope", "/").c_str(),
              when(r["from"].get<long long>()).c_str(), when(r["to"].get<long long>()).c_str());
  std::printf("availability  %-7s healthy and ready GPU-time / total GPU-time\n",
              pct(av["value"]).c_str());
  std::printf("occupancy     %-7s assigned / available GPU-time (allocated %s, unallocated %s)\n",
              pct(oc["value"]).c_str(), pct(oc["allocated"]).c_str(),
              pct(oc["unallocated"]).c_str());
  if (im["budgets_owed"].get<int>() > 0) {
    std::printf(
        "impact        %-7s mean over %d budgets owed GPU-time; worst %s (%s); %d at >= 95%%\n",
        pct(im["mean"]).c_str(), im["budgets_owed"].get<int>(), pct(im["min"]).c_str(),
        im["min_budget"].get<std::string>().c_str(), im["budgets_at_least_95"].get<int>());
  } else {
    std::printf("impact        -       no budget was owed GPU-time (no demand)\n");
  }
  std::printf(
      "utilization   %-7s measured GPU use / assigned, %d jobs measured, %d without "
      "telemetry (left out)\n\n",
      pct(ut["value"]).c_str(), ut["jobs_measured"].get<int>(),
      ut["jobs_without_telemetry"].get<int>());
  std::vector<std::vector<std::string>> rows;
  for (const auto& b : r["budgets"]) {
    rows.push_back({b["budget"], hours(b["owed_gpu_seconds"]), hours(b["owed_capped_gpu_seconds"]),
                    hours(b["allocated_gpu_seconds"]), hours(b["unallocated_gpu_seconds"]),
                    pct(b["impact"]), pct(b["utilization"])});
  }
  table({"BUDGET", "SHARE GPU-H", "OWED GPU-H", "ALLOCATED GPU-H", "UNALLOCATED GPU-H", "IMPACT",
         "UTILIZATION"},
        rows);
  return kOk;
}

int cmd_nodes(const Args& a, const Conn& c) {
  auto r = request(c, "GET", "/api/v1/nodes");
  if (a.has("json")) {
    std::printf("%s\n", r["nodes"].dump(2).c_str());
    return kOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& n : r["nodes"]) {
    rows.push_back({n["name"], n["cluster"], n["model"], std::to_string(n["gpus"].get<int>()),
                    n["block"],
                    n["health"].get<std::string>() + (n["cordoned"].get<bool>() ? ",cordoned" : ""),
                    n["simulated"].get<bool>() ? "simulated" : "agent", n["health_reason"]});
  }
  table({"NAME", "CLUSTER", "MODEL", "GPUS", "BLOCK", "HEALTH", "KIND", "REASON"}, rows);
  return kOk;
}

// After a drain: each job still on the node and when it leaves (a drained job is stopped once it
// reaches its minimum runtime), and so when the node will be empty.
void tell_drain(const Conn& c, const std::string& node) {
  const long long now = static_cast<long long>(std::time(nullptr));
  long long empty_at = now;
  std::vector<std::vector<std::string>> rows;
  std::string after;
  for (;;) {
    auto r = request(c, "GET",
                     "/api/v1/jobs?state=starting,running,preempting&limit=1000" +
                         (after.empty() ? "" : "&after=" + after));
    for (const auto& j : r["jobs"]) {
      bool here = false;
      for (const auto& g : j.value("placement", json::array())) here |= g.value("node", "") == node;
      if (!here) continue;
      const long long stop = drain_stop_time(j, now);
      empty_at = std::max(empty_at, stop);
      rows.push_back({std::to_string(j["id"].get<unsigned long long>()), j["owner"], job_class(j),
                      stop <= now
                          ? "now"
                          : local_time(stop, now) + " (in " + human_duration(stop - now) + ")"});
    }
    if (!r["next"].is_number()) break;
    after = std::to_string(r["next"].get<long long>());
  }
  if (rows.empty()) {
    std::printf("no jobs on it: it is empty now\n");
    return;
  }
  table({"JOB", "OWNER", "CLASS", "STOPS"}, rows);
  if (empty_at <= now) {
    std::printf("%zu job%s on %s, none protected: they are being stopped now\n", rows.size(),
                rows.size() > 1 ? "s" : "", node.c_str());
    return;
  }
  std::printf(
      "%zu job%s still on %s; it will be empty by %s (in %s), when the last protection "
      "ends\n",
      rows.size(), rows.size() > 1 ? "s" : "", node.c_str(), local_time(empty_at, now).c_str(),
      human_duration(empty_at - now).c_str());
}

int cmd_node_op(const Args& a, const Conn& c, const std::string& op) {
  if (a.pos.empty()) die(kUsage, op + ": give a node name");
  json body = json::object();
  if (a.has("reason")) body["reason"] = a.get("reason");
  auto r = request(c, "POST", "/api/v1/nodes/" + a.pos[0] + "/" + op, &body);
  std::printf("node %s: %s%s\n", a.pos[0].c_str(), r["health"].get<std::string>().c_str(),
              r["cordoned"].get<bool>() ? ", cordoned" : "");
  if (op == "drain") tell_drain(c, a.pos[0]);
  return kOk;
}

int cmd_token(const Args& a, const Conn& c) {
  const std::string sub = a.pos.empty() ? "ls" : a.pos[0];
  if (sub == "ls") {
    auto r = request(c, "GET", "/api/v1/tokens");
    if (a.has("json")) {
      std::printf("%s\n", r.dump(2).c_str());
      return kOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& t : r["tokens"]) {
      rows.push_back({std::to_string(t["id"].get<long long>()), t["name"], t["role"], t["subject"],
                      t["scope"], t["revoked"].get<bool>() ? "revoked" : "valid"});
    }
    table({"ID", "NAME", "ROLE", "SUBJECT", "SCOPE", "STATUS"}, rows);
    return kOk;
  }
  if (sub == "create") {
    if (a.pos.size() < 2 || !a.has("role")) {
      die(kUsage,
          "token create NAME --role admin|manager|user|agent|metrics [--scope PATH|NODE] "
          "[--subject USER]");
    }
    json body = {{"name", a.pos[1]}, {"role", a.get("role")}};
    if (a.has("scope")) body["scope"] = a.get("scope");
    if (a.has("subject")) body["subject"] = a.get("subject");
    auto r = request(c, "POST", "/api/v1/tokens", &body);
    std::printf("%s\n", r["token"].get<std::string>().c_str());
    std::fprintf(stderr, "token %lld for %s (%s): shown once, keep it safe\n",
                 r["id"].get<long long>(), r["subject"].get<std::string>().c_str(),
                 r["role"].get<std::string>().c_str());
    return kOk;
  }
  if (sub == "revoke") {
    if (a.pos.size() < 2) die(kUsage, "token revoke ID");
    parse_count("token id", a.pos[1]);
    request(c, "DELETE", "/api/v1/tokens/" + a.pos[1]);
    std::printf("token %s revoked\n", a.pos[1].c_str());
    return kOk;
  }
  die(kUsage, "token: ls, create or revoke");
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

std::string first_sentence(const std::string& text) {
  const auto end = text.find(". ");
  return end == std::string::npos ? text : text.substr(0, end + 1);
}

}  // namespace

bool is_client_command(const std::string& cmd) {
  static const std::vector<std::string> cmds = {"submit",   "ls",     "show",  "why",     "cancel",
                                                "budget",   "nodes",  "drain", "undrain", "cordon",
                                                "uncordon", "report", "token", "logs"};
  return std::find(cmds.begin(), cmds.end(), cmd) != cmds.end();
}

int client_main(int argc, char** argv) {
  const std::string cmd = argv[0];
  std::vector<std::string> words(argv + 1, argv + argc);
  // budget and token have subcommands, each with its own flags; the first word names it.
  std::string sub;
  if (cmd == "budget" || cmd == "token") {
    const std::string fallback = cmd == "budget" ? "tree" : "ls";
    if (words.empty() || words[0].rfind("-", 0) == 0) {
      const bool help = !words.empty() && (words[0] == "--help" || words[0] == "-h");
      if (help) {
        std::printf("usage: allot %s <subcommand> ...   ('allot %s <subcommand> --help')\n\n",
                    cmd.c_str(), cmd.c_str());
        for (const auto& s : client_commands()) {
          if (s.name.rfind(cmd + " ", 0) == 0) {
            std::printf("  %-13s %s\n", s.name.substr(cmd.size() + 1).c_str(),
                        first_sentence(s.summary).c_str());
          }
        }
        std::printf("\nwithout a subcommand: %s %s\n", cmd.c_str(), fallback.c_str());
        return kOk;
      }
      sub = fallback;
    } else {
      sub = words[0] == "remove" ? "rm" : words[0];
      words.erase(words.begin());
    }
    if (!find_command(cmd, sub)) {
      std::vector<std::string> subs;
      for (const auto& s : client_commands()) {
        if (s.name.rfind(cmd + " ", 0) == 0) subs.push_back(s.name.substr(cmd.size() + 1));
      }
      const auto near = nearest(sub, subs);
      std::string all;
      for (const auto& s : subs) all += (all.empty() ? "" : ", ") + s;
      die(kUsage, cmd + ": unknown subcommand '" + sub + "'" +
                      (near.empty() ? "" : "; did you mean '" + near + "'?") + " (" + all + ")");
    }
  }
  const CommandSpec* spec = find_command(cmd, sub);
  if (!spec) die(kUsage, "unknown command '" + cmd + "'");
  auto parsed = parse_flags(*spec, words);
  if (!parsed.error.empty()) die(kUsage, parsed.error);
  Args a = std::move(parsed.args);
  if (a.has("help")) {
    std::printf("%s", help_text(*spec).c_str());
    return kOk;
  }
  if (!sub.empty()) a.pos.insert(a.pos.begin(), sub);
  Conn c = connection(a);
  if (cmd == "submit") return cmd_submit(a, c);
  if (cmd == "ls") return cmd_ls(a, c);
  if (cmd == "show") return cmd_show(a, c);
  if (cmd == "why") return cmd_why(a, c);
  if (cmd == "cancel") return cmd_cancel(a, c);
  if (cmd == "budget") return cmd_budget(a, c);
  if (cmd == "nodes") return cmd_nodes(a, c);
  if (cmd == "drain" || cmd == "undrain" || cmd == "cordon" || cmd == "uncordon") {
    return cmd_node_op(a, c, cmd);
  }
  if (cmd == "report") return cmd_report(a, c);
  if (cmd == "token") return cmd_token(a, c);
  if (cmd == "logs") return cmd_logs(a, c);
  die(kUsage, "unknown command '" + cmd + "'");
}

}  // namespace allot::cli
