// A real server in-process for tests: a SQLite file in a temporary directory, the scheduling loop
// on a clock the test moves, the HTTP API on a free loopback port, and a client. With
// ALLOT_TEST_STORE=postgres the store is a fresh PostgreSQL database of the test binary's own
// cluster instead (tests/store/postgres_cluster.h); job logs still go next to the SQLite path.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "../store/postgres_cluster.h"
#include "server/api.h"
#include "server/controller.h"
#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace allot::server::testing {

using json = nlohmann::json;

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("allot-server-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

struct Reply {
  int status = 0;
  json body;
};

class Harness {
 public:
  explicit Harness(const std::string& db, ApiOptions api = {}, core::Time start = 1'000'000,
                   ControllerOptions base = {}) {
    base_ = base;
    clock_ = std::make_shared<std::atomic<core::Time>>(start);
    db_ = db;
    if (const char* b = std::getenv("ALLOT_TEST_STORE"); b && std::string(b) == "postgres") {
      auto& pg = store::testing::PostgresCluster::get();
      pg.prepare();
      if (!pg.skip_reason().empty()) throw std::runtime_error(pg.skip_reason());
      pg_uri_ = pg.fresh_database();
      if (pg_uri_.empty()) throw std::runtime_error(pg.error());
    }
    api_ = api;
    if (api_.logs_dir.empty()) api_.logs_dir = db + ".logs";
    open();
  }
  ~Harness() { close(); }

  void open() {
    auto s = pg_uri_.empty() ? store::open_sqlite(db_) : store::open_postgres(pg_uri_);
    if (!s.ok()) throw std::runtime_error(s.error().message());
    store_ = std::move(s.value());
    ControllerOptions o = base_;
    auto c = clock_;
    o.clock = [c] { return c->load(); };
    o.tick = std::chrono::hours(1);  // cycles only when the test asks (sync) or on events
    o.min_cycle_interval = std::chrono::hours(1);
    o.sim_default_duration = 600;
    ctl_ = std::make_unique<Controller>(*store_, o);
    if (auto st = ctl_->start(); !st.ok()) throw std::runtime_error(st.error().message());
    api_server_ = std::make_unique<ApiServer>(*store_, *ctl_, api_);
    auto port = api_server_->start();
    if (!port.ok()) throw std::runtime_error(port.error().message());
    port_ = port.value();
    if (admin_.empty()) {
      admin_ = create_token(*store_, "root", "admin", "root", "", now()).value();
    }
  }
  void close() {
    if (api_server_) api_server_->stop();
    api_server_.reset();
    if (ctl_) ctl_->stop();
    ctl_.reset();
    store_.reset();
  }
  void restart() {
    close();
    open();
  }

  core::Time now() const { return clock_->load(); }
  void advance(core::Duration d) { *clock_ += d; }
  void sync() { ctl_->sync(); }
  Controller& ctl() { return *ctl_; }
  store::Store& store() { return *store_; }
  int port() const { return port_; }
  const std::string& admin() const { return admin_; }

  std::string token(const std::string& name, const std::string& role,
                    const std::string& scope = "") {
    return create_token(*store_, name, role, name, scope, now()).value();
  }

  void add_sim_nodes(int n, const std::string& cluster = "local") {
    for (int i = 0; i < n; ++i) {
      store::NodeRecord r;
      r.name = cluster + "-n" + std::to_string(i);
      r.cluster = cluster;
      r.model = "H100";
      r.gpus = 8;
      r.block = "b" + std::to_string(i / 4);
      r.simulated = true;
      ctl_->register_node(r);
    }
  }

  Reply call(const std::string& method, const std::string& path, const json* body = nullptr,
             const std::string& tok = "") {
    httplib::Client cli("127.0.0.1", port_);
    return send(cli, method, path, body ? body->dump() : std::string(), tok.empty() ? admin_ : tok);
  }
  Reply raw(const std::string& method, const std::string& path, const std::string& body,
            const std::string& tok) {
    httplib::Client cli("127.0.0.1", port_);
    return send(cli, method, path, body, tok);
  }
  Reply get(const std::string& path, const std::string& tok = "") {
    return call("GET", path, nullptr, tok);
  }
  Reply post(const std::string& path, const json& body, const std::string& tok = "") {
    return call("POST", path, &body, tok);
  }

  template <typename C>
  static Reply send(C& cli, const std::string& method, const std::string& path,
                    const std::string& body, const std::string& tok) {
    httplib::Headers h;
    if (tok != "-") h.emplace("Authorization", "Bearer " + tok);
    auto r = method == "GET"      ? cli.Get(path.c_str(), h)
             : method == "DELETE" ? cli.Delete(path.c_str(), h)
                                  : cli.Post(path.c_str(), h, body, "application/json");
    Reply out;
    if (!r) return out;
    out.status = r->status;
    out.body = json::parse(r->body, nullptr, false);
    return out;
  }

 private:
  std::shared_ptr<std::atomic<core::Time>> clock_;
  std::string db_;
  std::string pg_uri_;  // ALLOT_TEST_STORE=postgres: the store's database
  ApiOptions api_;
  ControllerOptions base_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> ctl_;
  std::unique_ptr<ApiServer> api_server_;
  int port_ = 0;
  std::string admin_;
};

inline json job(const std::string& key, const std::string& budget = "/lab/a", int gpus = 8) {
  return {{"idempotency_key", key}, {"budget", budget}, {"gpus_per_node", gpus}};
}

}  // namespace allot::server::testing
