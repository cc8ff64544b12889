// One libpq connection with its prepared statements (named by the SQL text they run, prepared on
// first use and again after a reconnect), text-format parameters and results. Not thread-safe: a
// connection belongs to one thread at a time (the store's writer, or a reader holding it from the
// pool).
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace allot::store {

// Parameters in text format, $1, $2, ... in the order they are added.
class PgParams {
 public:
  PgParams& add(std::int64_t v);
  PgParams& add(int v) { return add(static_cast<std::int64_t>(v)); }
  PgParams& add(bool v) { return add(static_cast<std::int64_t>(v ? 1 : 0)); }
  PgParams& add(double v);
  PgParams& add(std::string v);
  PgParams& add(const char* v) { return add(std::string(v)); }
  PgParams& add(const std::optional<int>& v);
  template <typename... A>
  PgParams& all(const A&... a) {
    (add(a), ...);
    return *this;
  }
  std::size_t size() const { return values_.size(); }
  // Pointers into this object: valid while it lives unchanged.
  std::vector<const char*> pointers() const;

 private:
  std::vector<std::string> values_;
  std::vector<bool> null_;
};

// A statement's result. ok(): it ran (rows or a command); else error() and sqlstate() say why.
class PgResult {
 public:
  PgResult() = default;
  explicit PgResult(PGresult* r) : r_(r, &PQclear) {}
  bool ok() const;
  std::string error() const;
  std::string sqlstate() const;  // "23505": a unique key taken; "" when none
  int rows() const { return r_ ? PQntuples(r_.get()) : 0; }
  std::int64_t affected() const;  // rows an INSERT/UPDATE changed
  bool null(int row, int col) const { return PQgetisnull(r_.get(), row, col) != 0; }
  std::string text(int row, int col) const;
  std::int64_t integer(int row, int col) const;
  double real(int row, int col) const;

 private:
  std::unique_ptr<PGresult, void (*)(PGresult*)> r_{nullptr, &PQclear};
};

class PgConn {
 public:
  explicit PgConn(std::string uri) : uri_(std::move(uri)) {}
  PgConn(const PgConn&) = delete;
  PgConn& operator=(const PgConn&) = delete;
  ~PgConn();

  // Connects (again, if it was): forgets the statements prepared on the old connection.
  core::Status connect();
  // False once the server is gone (a lost connection): connect() again before use.
  bool healthy() const { return c_ && PQstatus(c_) == CONNECTION_OK; }
  // Runs one or more statements without parameters (BEGIN, COMMIT, a migration).
  PgResult run(const std::string& sql);
  // Runs `sql` ($1.. placeholders) as a statement prepared on this connection.
  PgResult exec(const std::string& sql, const PgParams& params);
  // True inside a transaction that a failed statement aborted.
  bool tx_failed() const { return c_ && PQtransactionStatus(c_) == PQTRANS_INERROR; }
  std::string last_error() const;

 private:
  std::string uri_;
  PGconn* c_ = nullptr;
  std::unordered_map<std::string, std::string> prepared_;  // SQL text -> statement name
};

}  // namespace allot::store
