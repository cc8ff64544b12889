// The client commands' shared parts (client_common.h).
#include "cli/client_common.h"

#include <httplib.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
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

#include "agent/server_client.h"
#include "cli/commands.h"
#include "cli/contract.h"
#include "cli/flags.h"
#include "cli/secrets.h"

namespace allot::cli::client {

namespace {
bool json_errors = false;  // set once by client_main, before any request
std::string error_context;
}  // namespace

void set_error_context(const std::string& context) {
  error_context = context;
}

void set_json_errors(bool on) {
  json_errors = on;
}

[[noreturn]] void die(int code, const std::string& what, int status, const std::string& field) {
  std::string msg = error_context + what;
  std::replace(msg.begin(), msg.end(), '\n', ' ');  // one line, whatever the server said
  if (json_errors) {
    json e = {{"exit_code", code}, {"message", msg}};
    if (status > 0) e["status"] = status;
    if (!field.empty()) e["field"] = field;
    std::fprintf(stderr, "%s\n", json{{"error", e}}.dump().c_str());
  } else {
    std::fprintf(stderr, "allot: %s\n", msg.c_str());
  }
  std::exit(code);
}

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
  if (a.has("token-file")) {
    auto t = read_token_file(a.get("token-file"));
    if (!t.error.empty()) die(kUsage, "--token-file: " + t.error);
    c.token = t.token;
  } else {
    c.token = pick("token", "ALLOT_TOKEN", "token");
  }
  c.cacert = pick("cacert", "ALLOT_CACERT", "cacert");
  c.insecure = a.has("insecure");
  if (c.addr.empty()) c.addr = "http://127.0.0.1:7400";
  if (c.addr.find(',') != std::string::npos) {
    // Several servers on one PostgreSQL database: talk to the leader (docs/store.md).
    c.servers = c.addr;
    c.addr = find_leader(c);
  }
  if (c.addr.find("://") == std::string::npos) c.addr = "http://" + c.addr;
  if (c.token.empty()) {
    die(kAuth,
        "no token: pass --token-file, set ALLOT_TOKEN, or put 'token = ...' in "
        "~/.config/allot/config (allot server/up prints an admin token at start)");
  }
  return c;
}

void configure(httplib::Client& cli, const Conn& c) {
  cli.set_connection_timeout(5);
  cli.set_read_timeout(60);
  cli.set_tcp_nodelay(true);  // a POST's body is not held back waiting for an ACK
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
  std::string field;
  if (!j.is_discarded() && j.contains("error") && j["error"].is_object()) {
    const auto& e = j["error"];
    if (e.contains("field") && e["field"].is_string()) field = e["field"];
    const auto reason = e.contains("reason") && e["reason"].is_string()
                            ? e["reason"].get<std::string>()
                            : std::string();
    msg += ": " + (field.empty() ? "" : field + ": ") + reason;
  }
  int code = status == 401 || status == 403 ? kAuth
             : status == 404                ? kNotFound
             : status >= 500                ? kServer
                                            : kRefused;
  die(code, msg, status, field);
}

std::string find_leader(const Conn& c) {
  const auto servers = agent::split_servers(c.servers);
  if (servers.empty()) die(kUsage, "--addr: no server address in '" + c.servers + "'");
  // A failover takes a few seconds (the lease's expiry): wait that long for a leader.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  std::string seen;
  for (;;) {
    for (const auto& s : servers) {
      httplib::Client cli(s);
      configure(cli, c);
      cli.set_connection_timeout(2);
      cli.set_read_timeout(5);
      auto r = cli.Get("/api/v1/health");
      if (!r) {
        seen = s + ": " + httplib::to_string(r.error());
        continue;
      }
      auto j = json::parse(r->body, nullptr, false);
      if (r->status == 200 && j.is_object() && j.value("role", "") != "standby") return s;
      if (j.is_object() && j.contains("leader") && j["leader"].is_string() &&
          !j["leader"].get<std::string>().empty()) {
        return j["leader"].get<std::string>();
      }
      seen = s + ": a standby, and no leader now";
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  die(kUnreachable, "no leader among the servers " + c.servers + " (last: " + seen + ")");
}

json request(const Conn& conn, const std::string& method, const std::string& path,
             const json* body) {
  Conn c = conn;
  httplib::Headers h = {{"Authorization", "Bearer " + c.token}};
  const std::string payload = body ? body->dump() : std::string();
  auto send = [&] {
    httplib::Client cli(c.addr);
    configure(cli, c);
    return method == "GET"      ? cli.Get(path.c_str(), h)
           : method == "DELETE" ? cli.Delete(path.c_str(), h)
                                : cli.Post(path.c_str(), h, payload, "application/json");
  };
  httplib::Result r = send();
  if (!r && body && method == "POST") {
    // One retry: submits carry an idempotency key, so a retried request never makes two jobs.
    if (!c.servers.empty()) c.addr = find_leader(c);  // the leader may have changed
    r = send();
  }
  if (r && r->status == 503 && !c.servers.empty()) {
    // A standby did not act on it (the leader changed since): once more, to the leader.
    auto j = json::parse(r->body, nullptr, false);
    if (j.is_object() && j.contains("leader")) {
      c.addr = find_leader(c);
      r = send();
    }
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

// Prints rows as columns; the last column is cut to fit the terminal unless `cut` is false.
void table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows,
           bool cut) {
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
    if (cut && static_cast<int>(out.size()) > width)
      out = out.substr(0, static_cast<std::size_t>(width - 1)) + "…";
    std::printf("%s\n", out.c_str());
  };
  line(head);
  for (const auto& r : rows) line(r);
}

std::string gpus_of(const json& j) {
  const auto& s = j["spec"];
  int n = s.value("nodes", 1), g = s.value("gpus_per_node", 1), m = s.value("gpu_milli", 1000);
  if (s.contains("mig") && s["mig"].is_string()) return s["mig"].get<std::string>();  // 1g.18gb
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

}  // namespace allot::cli::client
