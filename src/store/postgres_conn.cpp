#include "store/postgres_conn.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace allot::store {

using core::Error;
using core::Status;

PgParams& PgParams::add(std::int64_t v) {
  values_.push_back(std::to_string(v));
  null_.push_back(false);
  return *this;
}
PgParams& PgParams::add(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);  // round-trips every double
  values_.emplace_back(buf);
  null_.push_back(false);
  return *this;
}
PgParams& PgParams::add(std::string v) {
  values_.push_back(std::move(v));
  null_.push_back(false);
  return *this;
}
PgParams& PgParams::add(const std::optional<int>& v) {
  values_.push_back(v ? std::to_string(*v) : std::string());
  null_.push_back(!v);
  return *this;
}
std::vector<const char*> PgParams::pointers() const {
  std::vector<const char*> out(values_.size());
  for (std::size_t i = 0; i < values_.size(); ++i) out[i] = null_[i] ? nullptr : values_[i].c_str();
  return out;
}

bool PgResult::ok() const {
  if (!r_) return false;
  const auto st = PQresultStatus(r_.get());
  return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}
std::string PgResult::error() const {
  if (!r_) return "no result (the connection is lost)";
  std::string msg = PQresultErrorMessage(r_.get());
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  return msg.empty() ? "unknown error" : msg;
}
std::string PgResult::sqlstate() const {
  const char* s = r_ ? PQresultErrorField(r_.get(), PG_DIAG_SQLSTATE) : nullptr;
  return s ? s : "";
}
std::int64_t PgResult::affected() const {
  const char* s = r_ ? PQcmdTuples(r_.get()) : nullptr;
  return s && *s ? std::strtoll(s, nullptr, 10) : 0;
}
std::string PgResult::text(int row, int col) const {
  return {PQgetvalue(r_.get(), row, col),
          static_cast<std::size_t>(PQgetlength(r_.get(), row, col))};
}
std::int64_t PgResult::integer(int row, int col) const {
  return std::strtoll(PQgetvalue(r_.get(), row, col), nullptr, 10);
}
double PgResult::real(int row, int col) const {
  return std::strtod(PQgetvalue(r_.get(), row, col), nullptr);
}

PgConn::~PgConn() {
  if (c_) PQfinish(c_);
}

Status PgConn::connect() {
  if (c_) PQfinish(c_);
  prepared_.clear();
  c_ = PQconnectdb(uri_.c_str());
  if (!c_) return Error{"store", "cannot connect to PostgreSQL: out of memory"};
  if (PQstatus(c_) != CONNECTION_OK) {
    return Error{"store", "cannot connect to PostgreSQL: " + last_error()};
  }
  // Notices ("relation ... already exists, skipping") are not errors: not printed on stderr.
  PQsetNoticeProcessor(
      c_, [](void*, const char*) {}, nullptr);
  return core::ok_status();
}

std::string PgConn::last_error() const {
  std::string msg = c_ ? PQerrorMessage(c_) : "not connected";
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  return msg;
}

PgResult PgConn::run(const std::string& sql) {
  return PgResult(c_ ? PQexec(c_, sql.c_str()) : nullptr);
}

PgResult PgConn::exec(const std::string& sql, const PgParams& params) {
  if (!c_) return PgResult();
  auto it = prepared_.find(sql);
  if (it == prepared_.end()) {
    std::string name = "s" + std::to_string(prepared_.size() + 1);
    PgResult r(PQprepare(c_, name.c_str(), sql.c_str(), 0, nullptr));
    if (!r.ok()) return r;
    it = prepared_.emplace(sql, std::move(name)).first;
  }
  const auto values = params.pointers();
  return PgResult(PQexecPrepared(c_, it->second.c_str(), static_cast<int>(values.size()),
                                 values.data(), nullptr, nullptr, 0));
}

}  // namespace allot::store
