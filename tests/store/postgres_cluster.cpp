#include "postgres_cluster.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace allot::store::testing {

namespace fs = std::filesystem;

PostgresCluster& PostgresCluster::get() {
  static PostgresCluster cluster;
  return cluster;
}

namespace {
// Stops the cluster when the tests are done (it starts on first use, so that a run of only
// SQLite tests starts none).
class StopAtEnd : public ::testing::Environment {
 public:
  void TearDown() override { PostgresCluster::get().shutdown(); }
};
[[maybe_unused]] auto* const kStopAtEnd = ::testing::AddGlobalTestEnvironment(new StopAtEnd);
}  // namespace

void PostgresCluster::prepare() {
  if (prepared_) return;
  prepared_ = true;
  if (const char* s = std::getenv("ALLOT_SKIP_POSTGRES"); s && std::string(s) == "1") {
    skip_ = "PostgreSQL tests skipped: ALLOT_SKIP_POSTGRES=1";
    return;
  }
  const char* b = std::getenv("ALLOT_PG_BIN");
  bin_ = b && *b ? b : "/usr/lib/postgresql/15/bin";
  for (const char* tool : {"initdb", "pg_ctl", "postgres"}) {
    if (::access((bin_ + "/" + tool).c_str(), X_OK) != 0) {
      error_ = "PostgreSQL tests need " + bin_ + "/" + tool +
               " (Debian's postgresql-15: run scripts/install-deps), or ALLOT_SKIP_POSTGRES=1 to "
               "skip them";
      return;
    }
  }
  std::string templ = (fs::temp_directory_path() / "allot-pg-XXXXXX").string();
  if (!::mkdtemp(templ.data())) {
    error_ = "cannot make a temporary directory for PostgreSQL";
    return;
  }
  dir_ = templ;
  if (::geteuid() == 0 && !run("chown", "chown nobody:nogroup " + dir_)) return;
  if (!run("initdb", bin_ + "/initdb -D " + dir_ + "/data -U allot --auth=trust -E UTF8 " +
                         "--locale=C.UTF-8 --no-sync")) {
    return;
  }
  std::ofstream conf(dir_ + "/data/postgresql.conf", std::ios::app);
  conf << "listen_addresses = ''\nunix_socket_directories = '" << dir_
       << "'\nport = 5432\nmax_connections = 60\nshared_buffers = 32MB\n"
       // Nothing here tests power loss: without fsync, a database per test and a restart cost
       // milliseconds instead of seconds on a slow disk. The store still commits with
       // synchronous_commit on; production keeps fsync on (docs/store.md).
       << "fsync = off\n";
  conf.close();
  start();
}

PostgresCluster::~PostgresCluster() {
  shutdown();
}

void PostgresCluster::shutdown() {
  if (running_) run("pg_ctl-stop", bin_ + "/pg_ctl stop -w -m immediate -D " + dir_ + "/data");
  running_ = false;
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    dir_.clear();
  }
}

bool PostgresCluster::run(const std::string& what, const std::string& command) {
  // As root, as nobody: postgres will not run as root.
  const std::string as = ::geteuid() == 0 && what != "chown"
                             ? "setpriv --reuid=nobody --regid=nogroup --clear-groups "
                             : "";
  const std::string log = dir_ + "/" + what + ".log";
  const std::string line = "cd " + dir_ + " && " + as + command + " >" + log + " 2>&1";
  if (std::system(line.c_str()) == 0) return true;
  std::ifstream in(log);
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  error_ = what + " failed (" + command + "): " + out;
  return false;
}

bool PostgresCluster::start() {
  running_ = run("pg_ctl",
                 bin_ + "/pg_ctl start -w -t 60 -D " + dir_ + "/data -l " + dir_ + "/server.log");
  return running_;
}

bool PostgresCluster::stop() {
  running_ = !run("pg_ctl-stop", bin_ + "/pg_ctl stop -w -m fast -D " + dir_ + "/data");
  return !running_;
}

std::string PostgresCluster::uri(const std::string& db) const {
  return "postgresql://allot@/" + db + "?host=" + dir_ + "&port=5432";
}

std::string PostgresCluster::fresh_database() {
  prepare();
  if (!error_.empty() || !skip_.empty()) return "";
  const std::string name = "t" + std::to_string(++next_db_);
  PGconn* c = PQconnectdb(admin_uri().c_str());
  std::string err;
  if (PQstatus(c) != CONNECTION_OK) {
    err = PQerrorMessage(c);
  } else {
    PGresult* r = PQexec(c, ("CREATE DATABASE " + name).c_str());
    if (PQresultStatus(r) != PGRES_COMMAND_OK) err = PQresultErrorMessage(r);
    PQclear(r);
  }
  PQfinish(c);
  if (!err.empty()) {
    error_ = "cannot create a database: " + err;
    return "";
  }
  return uri(name);
}

}  // namespace allot::store::testing
