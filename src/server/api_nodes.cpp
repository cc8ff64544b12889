// Nodes over HTTP: listing, registration (by administrators or the node's own agent), the
// agent's heartbeat, and the operators' drain, undrain, cordon and uncordon.

#include "server/api_impl.h"

namespace allot::server {

namespace {

// The node registration body's agent fields, validated; they become the record's JSON columns.
void parse_agent_fields(const json& body, store::NodeRecord& n) {
  if (body.contains("address")) {
    n.address = string_in(body, "address", 255, "");
    for (unsigned char c : n.address) {
      if (!(std::isalnum(c) || c == '.' || c == '-' || c == ':' || c == '[' || c == ']' ||
            c == '_' || c == '%')) {
        throw HttpError{400, "address", "must be a host name or IP address, optionally with :port"};
      }
    }
  }
  json devices = json::array();
  each_entry(
      body, "devices", 64, "", {"index", "uuid", "name", "memory_mib", "pci_bus_id", "mig"},
      [&](const json& d, const std::string& where) {
        json out = {{"index", integer_in(d, "index", 0, 63, where, true).value()},
                    {"uuid", string_in(d, "uuid", 128, where)},
                    {"name", string_in(d, "name", 128, where)},
                    {"memory_mib", integer_in(d, "memory_mib", 0, kMaxMib, where).value_or(0)},
                    {"pci_bus_id", string_in(d, "pci_bus_id", 64, where)},
                    {"mig", json::array()}};
        each_entry(
            d, "mig", 64, where, {"uuid", "profile", "milli"},
            [&](const json& m, const std::string& mw) {
              out["mig"].push_back({{"uuid", string_in(m, "uuid", 128, mw)},
                                    {"profile", string_in(m, "profile", 32, mw, true)},
                                    {"milli", integer_in(m, "milli", 1, 1000, mw, true).value()}});
            });
        std::int64_t shares = 0;
        for (const auto& m : out["mig"]) shares += m["milli"].get<std::int64_t>();
        if (shares > core::kWholeGpu) {
          throw HttpError{
              400, where + "mig",
              "its instances add up to more than one GPU (" + std::to_string(shares) + " of 1000)"};
        }
        devices.push_back(std::move(out));
      });
  n.devices_json = devices.dump();
  if (auto a = body.find("agent"); a != body.end()) {
    known_fields(*a, {"version", "backend", "isolation", "achieved"}, "agent");
    json out = {{"version", string_in(*a, "version", 64, "agent.")},
                {"backend", string_in(*a, "backend", 32, "agent.")},
                {"isolation", string_in(*a, "isolation", 512, "agent.")}};
    // What the node achieved, in fields (docs/agent.md, "Isolation reported"); absent from
    // agents older than it.
    if (auto h = a->find("achieved"); h != a->end()) {
      known_fields(*h, {"jobs_as_owner", "cgroup_limits", "cgroup_why_not", "gpu_devices"},
                   "agent.achieved");
      json got = json::object();
      for (const char* f : {"jobs_as_owner", "cgroup_limits"}) {
        auto v = h->find(f);
        if (v == h->end() || !v->is_boolean()) {
          throw HttpError{400, std::string("agent.achieved.") + f, "required: true or false"};
        }
        got[f] = *v;
      }
      got["cgroup_why_not"] = string_in(*h, "cgroup_why_not", 512, "agent.achieved.");
      const auto gpu = string_in(*h, "gpu_devices", 16, "agent.achieved.", true);
      if (gpu != "none" && gpu != "cgroup") {
        throw HttpError{400, "agent.achieved.gpu_devices", "must be none or cgroup"};
      }
      got["gpu_devices"] = gpu;
      out["achieved"] = std::move(got);
    }
    n.agent_json = out.dump();
  }
}

}  // namespace

void ApiServer::Impl::install_node_routes() {
  // ---- nodes ----
  route("GET", "/api/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    json out = {{"nodes", json::array()}};
    for (const auto& n : store->nodes()) out["nodes"].push_back(node_out(n));
    send(res, 200, out);
  });
  route("GET", "/api/v1/nodes/{name}", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    require(p.role != "agent" || p.scope == req.matches[1].str(), "read another node");
    auto n = store->node(req.matches[1]);
    if (!n) throw HttpError{404, "name", "no such node"};
    send(res, 200, node_out(*n));
  });
  route("POST", "/api/v1/nodes", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    auto body = parse_body(req, {"name", "cluster", "model", "gpus", "block", "labels", "address",
                                 "devices", "agent"});
    store::NodeRecord n;
    n.name = str_field(body, "name", true);
    if (!valid_name(n.name)) throw HttpError{400, "name", "must be a name ([A-Za-z0-9._@-])"};
    require(p.is_admin() || (p.role == "agent" && p.scope == n.name), "register node " + n.name);
    n.cluster = str_field(body, "cluster", false);
    if (n.cluster.empty()) n.cluster = "default";
    if (!valid_name(n.cluster)) throw HttpError{400, "cluster", "must be a name"};
    n.model = str_field(body, "model", true, 32);
    n.block = str_field(body, "block", false);
    n.gpus = static_cast<int>(integer_in(body, "gpus", 1, 64, "", true).value());
    if (auto l = body.find("labels"); l != body.end()) {
      if (!l->is_object() || l->size() > 64) {
        throw HttpError{400, "labels", "must be an object of at most 64 string values"};
      }
      for (const auto& [k, v] : l->items()) {
        if (k.size() > 128 || !v.is_string() || v.get<std::string>().size() > 256) {
          throw HttpError{400, "labels", "keys and values must be short strings"};
        }
      }
      n.labels_json = l->dump();
    }
    parse_agent_fields(body, n);
    auto r = ctl->register_node(n);
    if (!r.ok()) check(r.error(), r.error().field == "name" ? 409 : 400);
    ctl->contact(n.name);
    auto out = node_out(r.value().first);
    out["lease_seconds"] = ctl->options().lease_seconds;
    send(res, r.value().second ? 201 : 200, out);
  });
  route("POST", "/api/v1/nodes/{name}/heartbeat",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          const std::string name = req.matches[1];
          require(can_act_for_node(p, name), "act for node " + name);
          auto body = parse_body(req, {"health", "reason"}, true);
          auto health = str_field(body, "health", false);
          auto reason = str_field(body, "reason", false, 512);
          if (!health.empty() && health != "healthy" && health != "unhealthy") {
            throw HttpError{400, "health", "an agent reports healthy or unhealthy"};
          }
          // Contact first: a node marked down for silence is back before its verdict applies.
          if (!ctl->contact(name)) throw HttpError{404, "name", "no such node " + name};
          if (!health.empty()) {
            auto cur = store->node(name);
            // An agent does not undo an operator's drain or down by reporting healthy; its own
            // verdicts (healthy, unhealthy) it may change.
            if (!cur || (cur->health != "healthy" && cur->health != "unhealthy") ||
                cur->health == health) {
              health.clear();
            }
          }
          if (!health.empty()) {
            auto r = ctl->set_node(name, health, reason, std::nullopt);
            if (!r.ok()) check(r.error(), 404);
          }
          auto st = ctl->heartbeat(name);
          if (!st.ok()) check(st.error(), 404);
          send(res, 200, {{"ok", true}, {"lease_seconds", ctl->options().lease_seconds}});
        });
  auto node_admin = [this](const std::string& path, const std::string& health,
                           std::optional<bool> cordon) {
    route("POST", path,
          [this, health, cordon](const httplib::Request& req, httplib::Response& res) {
            auto p = authenticate(req);
            require(p.is_admin(), "drain, undrain or cordon nodes (administrators only)");
            auto body = parse_body(req, {"reason"}, true);
            auto reason = str_field(body, "reason", false, 512);
            if (reason.empty()) reason = "by " + acting(p);
            auto r = ctl->set_node(req.matches[1], health, reason, cordon);
            if (!r.ok()) check(r.error(), 404);
            send(res, 200, node_out(r.value()));
          });
  };
  node_admin("/api/v1/nodes/{name}/drain", "draining", std::nullopt);
  node_admin("/api/v1/nodes/{name}/undrain", "healthy", std::nullopt);
  node_admin("/api/v1/nodes/{name}/cordon", "", true);
  node_admin("/api/v1/nodes/{name}/uncordon", "", false);
}

}  // namespace allot::server
