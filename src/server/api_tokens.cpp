// Who is asking and with what: health, whoami, and minting, listing and revoking tokens (each
// minting and revocation audited).

#include "server/api_impl.h"

namespace allot::server {

namespace {
// A token a person other than an administrator may list and revoke: a user token of a member of a
// budget it manages, or a service token of its own or of such a member.
bool may_touch(const Principal& p, const store::TokenRecord& t, const Members& members) {
  if (t.role == "user") return can_manage_user(p, t.subject, members);
  return t.role == "service" && can_manage_service_token(p, t.subject, members);
}
}  // namespace

void ApiServer::Impl::install_identity_routes() {
  route("GET", "/api/v1/health", [this](const auto&, auto& res) {
    auto snap = ctl->snapshot();
    json j = {{"status", "ok"}, {"cycles", snap ? snap->cycles : 0}};
    if (opts.leader_epoch != 0) {
      j["role"] = "leader";
      j["epoch"] = opts.leader_epoch;
    }
    send(res, 200, j);
  });
  // Prometheus (server/prometheus.h): an admin or a metrics token.
  route("GET", "/metrics", [this](const auto& req, auto& res) {
    auto p = authenticate(req, Narrow::Metrics);
    require(p.is_admin() || p.role == "metrics", "read metrics (an admin or metrics token)");
    if (!opts.prometheus) throw HttpError{503, "", "metrics are not enabled on this server"};
    res.set_content(scrape(*opts.prometheus, *store, *ctl), kPrometheusContentType);
  });
  route("GET", "/api/v1/whoami", [this](const auto& req, auto& res) {
    auto p = authenticate(req);
    send(res, 200, {{"role", p.role}, {"subject", p.subject}, {"scope", p.scope}});
  });
}

void ApiServer::Impl::install_token_routes() {
  // ---- tokens ----
  route("GET", "/api/v1/tokens", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    check_query(req, {});
    require(p.is_human(),
            "list tokens (administrators; managers their members' tokens; everyone their own "
            "service tokens)");
    auto snap = ctl->snapshot();
    json out = {{"tokens", json::array()}};
    for (const auto& t : store->tokens()) {
      if (!p.is_admin() && !may_touch(p, t, snap->members)) continue;
      out["tokens"].push_back({{"id", t.id},
                               {"name", t.name},
                               {"role", t.role},
                               {"subject", t.subject},
                               {"scope", t.scope},
                               {"created", t.created},
                               {"revoked", t.revoked != 0}});
    }
    send(res, 200, out);
  });
  route("POST", "/api/v1/tokens", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    // Who may create tokens at all comes before what the request says: administrators and
    // managers; anyone else only a service token (the body is read for that alone).
    const char* who =
        "create tokens (administrators; managers create user tokens for themselves; everyone "
        "service tokens for the services they may see)";
    require(p.is_human(), who);
    auto body = parse_body(req, {"name", "role", "subject", "scope"});
    if (!p.is_admin() && p.manages.empty()) {
      require(body.contains("role") && body["role"] == "service", who);
    }
    auto name = str_field(body, "name", true);
    auto role = str_field(body, "role", true);
    auto subject = str_field(body, "subject", false);
    auto scope = str_field(body, "scope", false, 512);
    if (!valid_name(name)) throw HttpError{400, "name", "must be a name"};
    if (!valid_role(role)) {
      throw HttpError{400, "role", "must be admin, manager, user, agent, metrics or service"};
    }
    // A service token acts as the person who reports for the service: by default its maker.
    if (subject.empty()) subject = role == "service" ? p.subject : name;
    if (!valid_name(subject)) throw HttpError{400, "subject", "must be a user name"};
    if (role == "manager" && !valid_budget_path(scope)) {
      throw HttpError{400, "scope", "a manager token needs the budget path it manages"};
    }
    if (role == "agent" && !valid_name(scope)) {
      throw HttpError{400, "scope", "an agent token needs the name of its node"};
    }
    if (role == "service") {
      if (!valid_name(scope)) {
        throw HttpError{400, "scope", "a service token needs the name of its service"};
      }
      // The service must exist and its maker see it (404 as for the service itself).
      auto snap = ctl->snapshot();
      auto it = snap->services->find(scope);
      if (it == snap->services->end() ||
          !can_see_service(p, it->second.value("owner", ""), it->second.value("budget", ""))) {
        throw HttpError{404, "scope", "no such service"};
      }
    }
    if ((role == "admin" || role == "user" || role == "metrics") && !scope.empty()) {
      throw HttpError{400, "scope", "only manager, agent and service tokens have a scope"};
    }
    if (!p.is_admin()) {
      // A token is a credential of one principal: minting one for another would let a manager
      // act as anyone it can add as a member (docs/api.md, "Identity"). A manager may mint user
      // tokens for itself only, whose rights are within its own; anyone service tokens for
      // itself, whose only right is to report a load.
      if (role != "user" && role != "service") {
        throw HttpError{403, "role", "managers create user and service tokens only"};
      }
      if (subject != p.subject) {
        throw HttpError{403, "subject",
                        "a token for another principal (" + subject +
                            ") is minted by an administrator; you may create tokens for " +
                            p.subject + " only"};
      }
    }
    auto secret = create_token(*store, name, role, subject, scope, ctl->now());
    if (!secret.ok()) check(secret.error(), 409);
    auto rec = store->token_by_hash(sha256_hex(secret.value()));
    // Who minted which credential for whom is audited like a change of rights (path "/").
    audit_token(p, "", token_words(rec ? rec->id : 0, name, role, subject, scope));
    send(res, 201,
         {{"id", rec ? rec->id : 0},
          {"token", secret.value()},
          {"role", role},
          {"subject", subject},
          {"scope", scope}});
  });
  route("DELETE", "/api/v1/tokens/{id}",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          require(p.is_human(),
                  "revoke tokens (administrators; managers their members' tokens; everyone "
                  "their own service tokens)");
          std::int64_t id = 0;
          try {
            id = std::stoll(req.matches[1]);
          } catch (...) {
            throw HttpError{404, "id", "no such token"};  // out of range: no token has it
          }
          std::optional<store::TokenRecord> found;
          for (const auto& t : store->tokens()) {
            if (t.id == id) found = t;
          }
          if (!found) throw HttpError{404, "id", "no such token"};
          if (!p.is_admin()) {
            auto snap = ctl->snapshot();
            // A token a manager may not touch is not shown to it either: 404, not 403.
            if (!may_touch(p, *found, snap->members)) throw HttpError{404, "id", "no such token"};
          }
          auto st = store->write({op::RevokeToken{id, ctl->now()}});
          if (!st.ok()) check(st.error(), 503);
          audit_token(p, token_words(id, found->name, found->role, found->subject, found->scope),
                      "revoked");
          {
            std::lock_guard lk(token_mu);
            token_cache.clear();
          }
          send(res, 200, {{"id", id}, {"revoked", true}});
        });
}

}  // namespace allot::server
