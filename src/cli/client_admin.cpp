// The client commands about budgets, accounting, nodes and tokens: budget, report, nodes, drain,
// undrain, cordon, uncordon, token.
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

#include "cli/client_common.h"
#include "cli/commands.h"
#include "cli/contract.h"
#include "cli/flags.h"

namespace allot::cli::client {

namespace {

std::string period_query(const Args& a) {
  std::string q;
  long long now = static_cast<long long>(std::time(nullptr));
  long long to = a.has("to") ? parse_count("--to", a.get("to")) : now;
  long long from = a.has("since")  ? to - parse_duration("--since", a.get("since"))
                   : a.has("from") ? parse_count("--from", a.get("from"))
                                   : to - 7 * 86400;
  return "from=" + std::to_string(from) + "&to=" + std::to_string(to);
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

}  // namespace

// --submit-rate, --submit-burst and --max-waiting-jobs into body's `submit_limits` (of POST
// /budgets and POST /submit-limits alike), each only when given: with none, body is untouched.
static void put_submit_limits(const Args& a, json& body) {
  for (const auto& [flag, field] : {std::pair<const char*, const char*>{"submit-rate", "rate"},
                                    {"submit-burst", "burst"},
                                    {"max-waiting-jobs", "max_waiting"}}) {
    if (!a.has(flag)) continue;
    const std::string name = "--" + std::string(flag);
    // A count is sent as an integer (5, not 5.0: the server takes whole jobs only).
    body["submit_limits"][field] = std::string(field) == "max_waiting"
                                       ? json(parse_count(name, a.get(flag)))
                                       : json(parse_number(name, a.get(flag)));
  }
}

// A budget's own submission limits, as ", rate 5/s, burst 20, 100 waiting" ("" when it has
// none: the server's apply).
static std::string limits_text(const json& l) {
  if (!l.is_object()) return "";
  std::string out;
  char buf[64];
  if (l.contains("rate")) {
    std::snprintf(buf, sizeof buf, ", rate %g/s", l["rate"].get<double>());
    out += buf;
  }
  if (l.contains("burst")) {
    std::snprintf(buf, sizeof buf, ", burst %g", l["burst"].get<double>());
    out += buf;
  }
  if (l.contains("max_waiting")) out += ", " + l["max_waiting"].dump() + " waiting";
  return out;
}

static std::string limits_of(const json& budget) {
  const auto t = limits_text(budget.value("submit_limits", json()));
  return t.empty() ? "-" : t.substr(2);
}

// MIN-RUNTIME of `budget tree`: the default a job without --min-runtime gets there, "1h" when the
// budget sets it, "1h of /lab" when inherited, "-" for none (0).
static std::string default_min_runtime_of(const json& budget) {
  const auto d = budget.value("min_runtime_default", json());
  if (!d.is_object()) return "-";
  const long long s = d.value("seconds", 0LL);
  const auto from = d.value("from", "");
  return (s > 0 ? human_duration(s) : std::string("0")) +
         (from == budget.value("path", "") ? "" : " of " + from);
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
                      share, fr, names(b.value("owners", json::array())), names(b["members"]),
                      limits_of(b), default_min_runtime_of(b)});
    }
    table({"BUDGET", "SHARE", "OF CLUSTER", "OWNERS", "MEMBERS", "LIMITS", "MIN-RUNTIME"}, rows);
    return kOk;
  }
  if (sub == "rm" || sub == "remove") {
    if (a.pos.size() < 2) die(kUsage, "budget rm PATH");
    auto r = request(c, "DELETE", "/api/v1/budgets?path=" + qs_escape(a.pos[1]));
    for (const auto& p : r["removed"]) std::printf("removed %s\n", p.get<std::string>().c_str());
    return kOk;
  }
  if (sub == "set" || sub == "create") {
    if (a.pos.size() < 2) {
      die(kUsage, "budget " + sub + " PATH [--share X] [--members a,b] [--owners c,d]");
    }
    json body = {{"path", a.pos[1]}, {"expect", sub == "create" ? "new" : "existing"}};
    if (sub == "create") body["share"] = 1.0;
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
    if (a.has("server-limits")) body["submit_limits"] = nullptr;
    put_submit_limits(a, body);
    if (a.has("default-min-runtime")) {
      const auto v = a.get("default-min-runtime");
      body["default_min_runtime"] =
          v == "none" ? json() : json(parse_duration("--default-min-runtime", v));
    }
    auto r = request(c, "POST", "/api/v1/budgets", &body);
    const auto dflt = r.value("default_min_runtime", -1LL);
    std::printf("budget %s: share %g%s%s\n", r["path"].get<std::string>().c_str(),
                r["share"].get<double>(), limits_text(r.value("submit_limits", json())).c_str(),
                dflt < 0    ? ""
                : dflt == 0 ? ", jobs without --min-runtime run unallocated"
                            : (", jobs without --min-runtime get " + human_duration(dflt)).c_str());
    return kOk;
  }
  if (sub == "log") {
    const std::string path = a.pos.size() > 1 ? a.pos[1] : "/";
    auto r = request(c, "GET",
                     "/api/v1/budgets/audit?path=" + qs_escape(path) +
                         "&limit=" + std::to_string(parse_count("--limit", a.get("limit", "100"))));
    if (a.has("json")) {
      std::printf("%s\n", r["entries"].dump(2).c_str());
      return kOk;
    }
    const long long now = static_cast<long long>(std::time(nullptr));
    std::vector<std::vector<std::string>> rows;
    for (const auto& e : r["entries"]) {
      auto text = [](const json& v) {
        const auto t = v.is_string() ? v.get<std::string>() : v.dump();
        return t.empty() ? std::string("-") : t;
      };
      rows.push_back({local_time(e.value("time", 0LL), now), e.value("actor", ""),
                      e.value("path", ""), e.value("field", ""), text(e["old"]), text(e["new"])});
    }
    if (rows.empty()) {
      std::printf("no budget changes recorded at %s\n", path.c_str());
      return kOk;
    }
    table({"TIME", "ACTOR", "BUDGET", "FIELD", "OLD", "NEW"}, rows);
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
  die(kUsage, "budget: tree, create, set, log, rm or usage");
}

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
           {"share_gpu_seconds", "owed_gpu_seconds", "demand_gpu_seconds", "allocated_gpu_seconds",
            "unallocated_gpu_seconds", "delivered_fraction", "impact", "utilization",
            "jobs_measured", "jobs_without_telemetry"}) {
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
    rows.push_back({b["budget"], hours(b["share_gpu_seconds"]), hours(b["owed_gpu_seconds"]),
                    hours(b["allocated_gpu_seconds"]), hours(b["unallocated_gpu_seconds"]),
                    pct(b["impact"]), pct(b["utilization"])});
  }
  table({"BUDGET", "SHARE GPU-H", "OWED GPU-H", "ALLOCATED GPU-H", "UNALLOCATED GPU-H", "IMPACT",
         "UTILIZATION"},
        rows);
  return kOk;
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
          "token create NAME --role admin|manager|user|agent|metrics|service "
          "[--scope PATH|NODE|SERVICE] "
          "[--subject USER]");
    }
    json body = {{"name", a.pos[1]}, {"role", a.get("role")}};
    if (a.has("scope")) body["scope"] = a.get("scope");
    if (a.has("subject")) body["subject"] = a.get("subject");
    auto r = request(c, "POST", "/api/v1/tokens", &body);
    if (a.has("json")) {
      std::printf("%s\n", r.dump(2).c_str());
      return kOk;
    }
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

// allot limits [USER]: the server's submission limits and each user's own; with USER and
// limits, set that user's (POST /submit-limits).
int cmd_limits(const Args& a, const Conn& c) {
  const bool setting = a.has("submit-rate") || a.has("submit-burst") || a.has("max-waiting-jobs") ||
                       a.has("server-limits");
  if (setting && a.pos.empty()) die(kUsage, "limits: name the USER whose limits to set");
  if (a.has("server-limits") &&
      (a.has("submit-rate") || a.has("submit-burst") || a.has("max-waiting-jobs"))) {
    die(kUsage, "limits: --server-limits drops USER's own limits: give no others with it");
  }
  if (setting) {
    json body = {{"user", a.pos[0]}, {"submit_limits", json()}};
    put_submit_limits(a, body);
    auto r = request(c, "POST", "/api/v1/submit-limits", &body);
    if (a.has("json")) {
      std::printf("%s\n", r.dump(2).c_str());
    } else if (r["submit_limits"].is_null()) {
      std::printf("user %s: the server's limits\n", a.pos[0].c_str());
    } else {
      std::printf("user %s: %s\n", a.pos[0].c_str(),
                  limits_text(r["submit_limits"]).substr(2).c_str());
    }
    return kOk;
  }
  auto r = request(c, "GET", "/api/v1/submit-limits");
  if (!a.pos.empty()) {
    json mine = json();
    for (const auto& u : r["users"]) {
      if (u.value("user", "") == a.pos[0]) mine = u["submit_limits"];
    }
    if (a.has("json")) {
      std::printf("%s\n", json{{"user", a.pos[0]}, {"submit_limits", mine}}.dump(2).c_str());
    } else {
      std::printf("user %s: %s\n", a.pos[0].c_str(),
                  mine.is_object() ? limits_text(mine).substr(2).c_str() : "the server's limits");
    }
    return kOk;
  }
  if (a.has("json")) {
    std::printf("%s\n", r.dump(2).c_str());
    return kOk;
  }
  const auto& s = r["server"];
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"(server)", limits_text(s).substr(2) + ", " + s["max_waiting_total"].dump() +
                                  " waiting over all budgets"});
  for (const auto& u : r["users"]) {
    rows.push_back({u.value("user", ""), limits_text(u["submit_limits"]).substr(2)});
  }
  table({"USER", "LIMITS"}, rows);
  return kOk;
}

}  // namespace allot::cli::client
