#include "server/api_json.h"

#include <cstdio>

#include "server/edge.h"

namespace allot::server {

using json = nlohmann::json;

namespace {

// JSON string literal of `v` (UTF-8 kept as is; quotes, backslashes and controls escaped; bytes
// that are not UTF-8, which a store written before the edge checked them may hold, as U+FFFD).
void append_quoted(std::string& out, std::string_view v) {
  out += '"';
  for (std::size_t i = 0; i < v.size(); ++i) {
    const char c = v[i];
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) {
      const auto n = utf8_sequence(v.substr(i));
      if (n == 0) {
        out += "\xef\xbf\xbd";
      } else {
        out.append(v.substr(i, n));
        i += n - 1;
      }
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      static const char* hex = "0123456789abcdef";
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\r') {
        out += "\\r";
      } else {
        out += "\\u00";
        out += hex[u >> 4];
        out += hex[u & 15];
      }
    } else {
      out += c;
    }
  }
  out += '"';
}
}  // namespace

void append_job(std::string& out, const store::JobRecord& j) {
  auto field = [&](const char* name) {
    out += out.back() == '{' ? "\"" : ",\"";
    out += name;
    out += "\":";
  };
  auto text = [&](const char* name, std::string_view v) {
    field(name);
    append_quoted(out, v);
  };
  auto number = [&](const char* name, std::int64_t v) {
    field(name);
    out += std::to_string(v);
  };
  auto raw = [&](const char* name, const std::string& v, const char* fallback) {
    field(name);
    out += v.empty() ? std::string(fallback) : v;  // the server wrote it: valid JSON
  };
  out += '{';
  number("id", static_cast<std::int64_t>(j.id));
  text("name", j.name);
  text("owner", j.owner);
  text("budget", j.budget);
  text("state", j.state);
  text("reason", j.reason);
  number("submit_time", j.submit_time);
  number("updated_at", j.updated_at);
  text("idempotency_key", j.idempotency_key);
  number("runs", j.runs);
  field("allocated");
  out += j.allocated ? "true" : "false";
  raw("spec", j.spec_json, "{}");
  if (j.runs > 0) {
    text("cluster", j.cluster);
    raw("placement", j.placement_json, "[]");
    number("run_start", j.run_start);
    number("protected_until", j.protected_until);
  }
  field("exit_code");
  out += j.exit_code ? std::to_string(*j.exit_code) : std::string("null");
  if (!j.held_by.empty()) text("held_by", j.held_by);
  auto ids = [&](const char* name, const std::vector<store::JobId>& v) {
    if (v.empty()) return;
    field(name);
    out += '[';
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
    out += ']';
  };
  ids("after", j.after);
  ids("after_any", j.after_any);
  if (j.array_job != 0) {
    number("array_job_id", static_cast<std::int64_t>(j.array_job));
    number("array_index", j.array_index);
    if (j.array_limit > 0) number("array_limit", j.array_limit);
  }
  out += '}';
}

std::string acting(const Principal& p) {
  return p.subject + " (token " + std::to_string(p.token_id) + ")";
}

std::string token_words(std::int64_t id, const std::string& name, const std::string& role,
                        const std::string& subject, const std::string& scope) {
  return "token " + std::to_string(id) + " " + name + ": " + role + " for " + subject +
         (scope.empty() ? "" : " in " + scope);
}

std::string job_text(const store::JobRecord& j) {
  std::string out;
  out.reserve(512 + j.spec_json.size() + j.placement_json.size());
  append_job(out, j);
  return out;
}

json parsed_or(const std::string& text, const json& fallback) {
  auto j = json::parse(text, nullptr, false);
  return j.is_discarded() ? fallback : j;
}

json node_json(const store::NodeRecord& n, const std::string& gpus) {
  auto labels = json::parse(n.labels_json, nullptr, false);
  return {{"name", n.name},
          {"address", n.address},
          {"devices", parsed_or(n.devices_json, json::array())},
          {"agent", parsed_or(n.agent_json, json::object())},
          {"telemetry", gpus.empty() ? json() : parsed_or(gpus, json())},
          {"cluster", n.cluster},
          {"model", n.model},
          {"gpus", n.gpus},
          {"block", n.block},
          {"labels", labels.is_discarded() ? json::object() : labels},
          {"health", n.health},
          {"health_reason", n.health_reason},
          {"cordoned", n.cordoned},
          {"simulated", n.simulated},
          {"registered_at", n.registered_at},
          {"last_heartbeat", n.last_heartbeat}};
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace allot::server
