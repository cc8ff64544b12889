// A throwaway PostgreSQL for the tests: one cluster per test binary (started by the first test
// that needs it, stopped by a GoogleTest global environment), made with Debian's postgresql-15
// binaries (initdb, pg_ctl) in a temporary directory and reached over a unix socket there; no
// system service, no TCP port. As root (CI), initdb and postgres run as `nobody`, since postgres
// refuses to run as root.
//
// If the binaries are missing the PostgreSQL tests fail with the reason (scripts/install-deps
// installs them); ALLOT_SKIP_POSTGRES=1 skips them instead, saying so. ALLOT_PG_BIN overrides
// the directory of the binaries (default /usr/lib/postgresql/15/bin).
#pragma once

#include <string>

namespace allot::store::testing {

class PostgresCluster {
 public:
  // The binary's cluster, started on first use and stopped at exit.
  static PostgresCluster& get();

  // Makes and starts the cluster, once (the first test that needs it).
  void prepare();
  // Stops the server and removes its directory (at the end of the tests).
  void shutdown();

  // Non-empty: the tests must skip, with this message.
  const std::string& skip_reason() const { return skip_; }
  // Non-empty: the cluster could not start (the tests must fail with this message).
  const std::string& error() const { return error_; }

  // A new, empty database: its libpq URI ("" and error() on failure).
  std::string fresh_database();
  // A URI to the maintenance database, for tests that manage connections.
  std::string admin_uri() const { return uri("postgres"); }
  std::string uri(const std::string& db) const;

  // Stops and starts the server (the data stays): a lost server for the tests.
  bool stop();
  bool start();

  ~PostgresCluster();

 private:
  PostgresCluster() = default;
  bool run(const std::string& what, const std::string& command);

  std::string bin_, dir_, skip_, error_;
  int next_db_ = 0;
  bool running_ = false;
  bool prepared_ = false;
};

}  // namespace allot::store::testing
