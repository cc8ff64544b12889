#include "agent/server_client.h"

#include <httplib.h>

namespace allot::agent {

using json = nlohmann::json;

struct ServerClient::Impl {
  ServerAddress addr;
  std::unique_ptr<httplib::Client> cli;

  httplib::Client& client() {
    if (!cli) {
      cli = std::make_unique<httplib::Client>(addr.url);
      cli->set_connection_timeout(2);
      cli->set_read_timeout(5);
      cli->set_write_timeout(5);
      cli->set_keep_alive(true);
      if (!addr.cacert.empty()) cli->set_ca_cert_path(addr.cacert);
      if (addr.insecure) cli->enable_server_certificate_verification(false);
      cli->set_default_headers({{"Authorization", "Bearer " + addr.token}});
    }
    return *cli;
  }

  Reply finish(const httplib::Result& r) {
    Reply out;
    if (!r) {
      out.error = httplib::to_string(r.error());
      cli.reset();  // a fresh connection next time
      return out;
    }
    out.status = r->status;
    if (!r->body.empty()) {
      out.body = json::parse(r->body, nullptr, false);
      if (out.body.is_discarded()) out.body = json();
    }
    if (!out.ok()) {
      if (out.body.is_object() && out.body.contains("error")) {
        const auto& e = out.body["error"];
        out.error = e.value("field", "") + ": " + e.value("reason", "");
      } else {
        out.error = "HTTP " + std::to_string(r->status);
      }
    }
    return out;
  }
};

ServerClient::ServerClient(ServerAddress addr) : impl_(std::make_unique<Impl>()) {
  impl_->addr = std::move(addr);
}

ServerClient::~ServerClient() = default;

Reply ServerClient::get(const std::string& path) {
  return impl_->finish(impl_->client().Get(path));
}

Reply ServerClient::post(const std::string& path, const json& body) {
  return impl_->finish(impl_->client().Post(path, body.dump(), "application/json"));
}

Reply ServerClient::post_bytes(const std::string& path, const std::string& bytes) {
  return impl_->finish(impl_->client().Post(path, bytes, "application/octet-stream"));
}

std::string node_path(const std::string& prefix, const std::string& node,
                      const std::string& suffix) {
  // Node names are [A-Za-z0-9._@-]: nothing to escape but '@'.
  std::string escaped;
  for (char c : node) escaped += c == '@' ? std::string("%40") : std::string(1, c);
  return prefix + escaped + suffix;
}

}  // namespace allot::agent
