// allot serve: inference services (docs/api.md, "Services"): create, list, show, scale, delete,
// and report a load figure. Everything goes through /api/v1/services.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/client_common.h"

namespace allot::cli::client {

namespace {

std::string figure(const json& v, bool as_percent = false) {
  if (!v.is_number()) return "-";
  char buf[48];
  if (as_percent) {
    std::snprintf(buf, sizeof buf, "%.0f%%", v.get<double>() * 100);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v.get<double>());
  }
  return buf;
}

std::string path_of(const std::string& name) {
  return "/api/v1/services/" + qs_escape(name);
}

int create(const Args& a, const Conn& c) {
  if (!a.has("budget")) die(kUsage, "serve create: give --budget /org/team");
  if (a.rest.empty()) die(kUsage, "serve create: give the replicas' command after --");
  json job = json::object();
  job["command"] = a.rest;
  if (a.has("gpus")) job["gpus"] = parse_count("--gpus", a.get("gpus"));
  if (a.has("gpu-milli")) job["gpu_milli"] = parse_count("--gpu-milli", a.get("gpu-milli"));
  if (a.has("mig")) job["mig"] = a.get("mig");
  if (a.has("min-runtime")) {
    job["min_runtime"] = parse_duration("--min-runtime", a.get("min-runtime"));
  }
  if (a.has("model")) job["models"] = {a.get("model")};
  if (a.has("cluster")) job["clusters"] = {a.get("cluster")};
  if (a.has("memory")) job["memory_mib"] = parse_mib("--memory", a.get("memory"));
  if (a.has("cpus")) job["cpus"] = parse_number("--cpus", a.get("cpus"));
  if (a.has("container")) job["container"] = a.get("container");
  if (a.has("workdir")) {
    job["workdir"] = std::filesystem::absolute(a.get("workdir")).lexically_normal().string();
  }
  for (const auto& kv : a.env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) die(kUsage, "--env: '" + kv + "' is not NAME=VALUE");
    if (!job.contains("env")) job["env"] = json::object();
    job["env"][kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  json body = {{"name", a.pos.at(1)}, {"budget", a.get("budget")}, {"job", job}};
  if (a.has("min")) body["min_replicas"] = parse_count("--min", a.get("min"));
  if (a.has("max")) body["max_replicas"] = parse_count("--max", a.get("max"));
  if (a.has("ready-path")) body["ready_path"] = a.get("ready-path");
  if (a.has("ready-port")) body["ready_port"] = parse_count("--ready-port", a.get("ready-port"));
  if (a.has("ready-timeout")) {
    body["ready_timeout"] = parse_duration("--ready-timeout", a.get("ready-timeout"));
  }
  if (a.has("ready-command")) {
    body["ready_command"] = {"/bin/sh", "-c", a.get("ready-command")};
  }
  json as = json::object();
  for (const char* f : {"memory-high", "memory-low", "load-high", "load-low"}) {
    if (!a.has(f)) continue;
    std::string key = f;
    key[key.find('-')] = '_';
    as[key] = parse_number(std::string("--") + f, a.get(f));
  }
  if (a.has("cooldown")) as["cooldown"] = parse_duration("--cooldown", a.get("cooldown"));
  if (!as.empty()) body["autoscale"] = as;
  auto r = request(c, "POST", "/api/v1/services", &body);
  if (a.has("json")) {
    std::printf("%s\n", r.dump(2).c_str());
    return kOk;
  }
  const auto& spec = r["spec"];
  std::printf("service %s: %d to %d replicas in %s, %d wanted now\n",
              r["name"].get<std::string>().c_str(), spec["min_replicas"].get<int>(),
              spec["max_replicas"].get<int>(), r["budget"].get<std::string>().c_str(),
              r["desired"].get<int>());
  return kOk;
}

int list(const Args& a, const Conn& c) {
  auto r = request(c, "GET", "/api/v1/services");
  if (a.has("json")) {
    std::printf("%s\n", r.dump(2).c_str());
    return kOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : r["services"]) {
    rows.push_back({s["name"], s["owner"], s["budget"],
                    std::to_string(s["min_replicas"].get<int>()) + "-" +
                        std::to_string(s["max_replicas"].get<int>()),
                    std::to_string(s["desired"].get<int>()),
                    std::to_string(s["running"].get<int>()),
                    std::to_string(s.value("ready", s["running"].get<int>())),
                    figure(s["memory"], true), figure(s["load"])});
  }
  if (rows.empty()) {
    std::printf("no services\n");
    return kOk;
  }
  table({"NAME", "OWNER", "BUDGET", "MIN-MAX", "WANTED", "RUNNING", "READY", "GPU MEM", "LOAD"},
        rows);
  return kOk;
}

int show(const Args& a, const Conn& c) {
  auto r = request(c, "GET", path_of(a.pos.at(1)));
  if (a.has("json")) {
    std::printf("%s\n", r.dump(2).c_str());
    return kOk;
  }
  const auto& spec = r["spec"];
  const auto& as = spec["autoscale"];
  std::printf("service %s (owner %s, budget %s)\n", r["name"].get<std::string>().c_str(),
              r["owner"].get<std::string>().c_str(), r["budget"].get<std::string>().c_str());
  std::printf("  replicas: %d to %d, %d wanted, %d running, %d ready; protected contract %llds\n",
              spec["min_replicas"].get<int>(), spec["max_replicas"].get<int>(),
              r["desired"].get<int>(), r["running"].get<int>(),
              r.value("ready", r["running"].get<int>()), spec["contract"].get<long long>());
  if (spec.contains("ready_path")) {
    std::printf("  readiness: GET 127.0.0.1:%d%s answers 2xx; restarted if not ready in %llds\n",
                spec.value("ready_port", 0), spec["ready_path"].get<std::string>().c_str(),
                spec.value("ready_timeout", 0LL));
  } else if (spec.contains("ready_command")) {
    std::string cmd;
    for (const auto& x : spec["ready_command"])
      cmd += (cmd.empty() ? "" : " ") + x.get<std::string>();
    std::printf("  readiness: command exits 0 (%s); restarted if not ready in %llds\n", cmd.c_str(),
                spec.value("ready_timeout", 0LL));
  } else {
    std::printf("  readiness: no check (a running replica serves)\n");
  }
  std::printf(
      "  autoscale: GPU memory out above %s, in below %s; load out above %s, in below %s "
      "per replica; cool-down %llds\n",
      figure(as["memory_high"], true).c_str(), figure(as["memory_low"], true).c_str(),
      as["load_high"].get<double>() > 0 ? figure(as["load_high"]).c_str() : "(off)",
      figure(as["load_low"]).c_str(), as["cooldown"].get<long long>());
  std::printf("  now: GPU memory %s used, load %s\n", figure(r["memory"], true).c_str(),
              figure(r["load"]).c_str());
  std::vector<std::vector<std::string>> rows;
  for (const auto& x : r["replicas"]) {
    std::string nodes;
    for (const auto& n : x.value("nodes", json::array())) {
      nodes += (nodes.empty() ? "" : ",") + n.get<std::string>();
    }
    // READY: yes, or no with the last failed check's reason (and for how long).
    std::string ready = x.value("ready", false) ? "yes" : "no";
    if (x.contains("ready_since") && x["ready_since"].get<long long>() > 0) {
      ready += " (" + ago(x["ready_since"].get<long long>()) + ")";
    }
    if (!x.value("ready", false) && x.contains("ready_reason")) {
      ready += ": " + x["ready_reason"].get<std::string>();
    }
    rows.push_back(
        {std::to_string(x["job"].get<long long>()) + (x.value("replacing", false) ? " (old)" : ""),
         x["tier"], x["state"], x["allocated"].get<bool>() ? "allocated" : "unallocated",
         nodes.empty() ? "-" : nodes, ready});
  }
  std::printf("\n");
  if (rows.empty()) {
    std::printf("no replicas\n");
  } else {
    table({"JOB", "TIER", "STATE", "CLASS", "NODES", "READY"}, rows);
  }
  std::printf("\nrecent scale decisions:\n");
  if (r["decisions"].empty()) std::printf("  none\n");
  for (const auto& d : r["decisions"]) {
    std::string figs;
    if (d.contains("memory")) figs += " memory=" + figure(d["memory"], true);
    if (d.contains("load")) figs += " load/replica=" + figure(d["load"]);
    std::printf("  %s ago  %d -> %d  %s%s\n", ago(d["at"].get<long long>()).c_str(),
                d["from"].get<int>(), d["to"].get<int>(), d["reason"].get<std::string>().c_str(),
                figs.empty() ? "" : (" (" + figs.substr(1) + ")").c_str());
  }
  return kOk;
}

}  // namespace

int cmd_serve(const Args& a, const Conn& c) {
  const std::string sub = a.pos.at(0);
  if (sub == "create") return create(a, c);
  if (sub == "list") return list(a, c);
  if (sub == "show") return show(a, c);
  if (sub == "scale") {
    json body = json::object();
    if (a.has("min")) body["min_replicas"] = parse_count("--min", a.get("min"));
    if (a.has("max")) body["max_replicas"] = parse_count("--max", a.get("max"));
    if (body.empty()) die(kUsage, "serve scale: give --min, --max or both");
    auto r = request(c, "POST", path_of(a.pos.at(1)) + "/scale", &body);
    if (a.has("json")) {
      std::printf("%s\n", r.dump(2).c_str());
      return kOk;
    }
    std::printf("service %s: %d to %d replicas, %d wanted\n", r["name"].get<std::string>().c_str(),
                r["spec"]["min_replicas"].get<int>(), r["spec"]["max_replicas"].get<int>(),
                r["desired"].get<int>());
    return kOk;
  }
  if (sub == "restart") {
    auto r = request(c, "POST", path_of(a.pos.at(1)) + "/restart");
    if (a.has("json")) {
      std::printf("%s\n", r.dump(2).c_str());
      return kOk;
    }
    std::printf("service %s: %d replicas to replace, one at a time ('allot serve show %s')\n",
                r["name"].get<std::string>().c_str(), r["restarting"].get<int>(),
                r["name"].get<std::string>().c_str());
    return kOk;
  }
  if (sub == "delete") {
    auto r = request(c, "DELETE", path_of(a.pos.at(1)));
    if (a.has("json")) {
      std::printf("%s\n", r.dump(2).c_str());
      return kOk;
    }
    std::printf("service %s deleted: %zu replicas stopped\n", r["name"].get<std::string>().c_str(),
                r["replicas"].size());
    return kOk;
  }
  if (sub == "load") {
    json body = {{"value", parse_number("VALUE", a.pos.at(2))}};
    auto r = request(c, "POST", path_of(a.pos.at(1)) + "/load", &body);
    if (a.has("json")) {
      std::printf("%s\n", r.dump(2).c_str());
      return kOk;
    }
    std::printf("service %s: load %s reported\n", a.pos.at(1).c_str(), figure(r["load"]).c_str());
    return kOk;
  }
  die(kUsage, "serve: unknown subcommand '" + sub + "'");
}

}  // namespace allot::cli::client
