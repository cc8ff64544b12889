#include "store/store_copy.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "store/postgres_conn.h"
#include "store/postgres_ops.h"
#include "store/postgres_store.h"
#include "store/sqlite_store.h"

namespace allot::store {
namespace {

using core::Error;

// Rows per INSERT: at most ~30 columns, so far below PostgreSQL's 65,535 parameters.
constexpr int kRowsPerInsert = 100;

std::string ident(const std::string& name) {
  return "\"" + name + "\"";  // table and column names are allot's own: no quote in them
}

// A read-only SQLite connection that finishes itself.
struct Sqlite {
  sqlite3* db = nullptr;
  ~Sqlite() {
    if (db) sqlite3_close(db);
  }
  std::string error() const { return db ? sqlite3_errmsg(db) : "out of memory"; }
};
struct Statement {
  sqlite3_stmt* st = nullptr;
  ~Statement() {
    if (st) sqlite3_finalize(st);
  }
};

// The source's tables (not SQLite's own, not the schema version) and their columns, in order.
core::Result<std::vector<std::pair<std::string, std::vector<std::string>>>> source_tables(
    const Sqlite& src) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  Statement list;
  if (sqlite3_prepare_v2(src.db,
                         "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                         "'sqlite_%' AND name <> 'schema_version' ORDER BY name",
                         -1, &list.st, nullptr) != SQLITE_OK) {
    return Error{"from", "cannot list its tables: " + src.error()};
  }
  while (sqlite3_step(list.st) == SQLITE_ROW) {
    out.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(list.st, 0)),
                     std::vector<std::string>{});
  }
  for (auto& [table, cols] : out) {
    Statement info;
    const auto sql = "PRAGMA table_info(" + ident(table) + ")";
    if (sqlite3_prepare_v2(src.db, sql.c_str(), -1, &info.st, nullptr) != SQLITE_OK) {
      return Error{"from", "table " + table + ": " + src.error()};
    }
    while (sqlite3_step(info.st) == SQLITE_ROW) {
      cols.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(info.st, 1)));
    }
  }
  return out;
}

// Adds column `i` of the current row, exactly (doubles in full precision, NULL as NULL).
void add_value(PgParams& p, sqlite3_stmt* st, int i) {
  switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL:
      p.add(std::optional<int>());
      break;
    case SQLITE_INTEGER:
      p.add(static_cast<std::int64_t>(sqlite3_column_int64(st, i)));
      break;
    case SQLITE_FLOAT:
      p.add(sqlite3_column_double(st, i));
      break;
    default:
      p.add(std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, i)),
                        static_cast<std::size_t>(sqlite3_column_bytes(st, i))));
  }
}

class Copier {
 public:
  Copier(Sqlite& src, PgConn& dst) : src_(src), dst_(dst) {}

  // The target's tables (without the schema version and the leader lease): each must be empty,
  // unless `force`, which empties them all.
  core::Status prepare_target(const std::vector<std::string>& source, bool force) {
    auto r = dst_.run(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename NOT "
        "IN ('schema_version', 'leader_lease') ORDER BY tablename");
    if (!r.ok()) return Error{"to", "cannot list its tables: " + r.error()};
    std::vector<std::string> target;
    target.reserve(static_cast<std::size_t>(r.rows()));
    for (int i = 0; i < r.rows(); ++i) target.push_back(r.text(i, 0));
    for (const auto& t : source) {
      if (std::find(target.begin(), target.end(), t) == target.end()) {
        return Error{"to", "table " + t + " of the SQLite file is missing in PostgreSQL"};
      }
    }
    std::string all;
    for (const auto& t : target) {
      auto n = dst_.run("SELECT COUNT(*) FROM " + ident(t));
      if (!n.ok()) return Error{"to", "table " + t + ": " + n.error()};
      if (n.integer(0, 0) > 0 && !force) {
        return Error{"to", "the target is not empty: table " + t + " holds " + n.text(0, 0) +
                               " rows (--force empties every table first)"};
      }
      all += (all.empty() ? "" : ", ") + ident(t);
    }
    if (force && !all.empty()) {
      if (auto t = dst_.run("TRUNCATE " + all + " RESTART IDENTITY"); !t.ok()) {
        return Error{"to", "cannot empty the target: " + t.error()};
      }
    }
    return core::ok_status();
  }

  // Copies one table in rowid order, checks its count and moves its sequences past the ids.
  core::Result<std::int64_t> table(const std::string& t, const std::vector<std::string>& cols) {
    std::string list;
    for (const auto& c : cols) {
      list += (list.empty() ? "" : ", ") + ident(c);
    }
    Statement rows;
    const auto sql = "SELECT " + list + " FROM " + ident(t) + " ORDER BY rowid";
    if (sqlite3_prepare_v2(src_.db, sql.c_str(), -1, &rows.st, nullptr) != SQLITE_OK) {
      return Error{"from", "table " + t + ": " + src_.error()};
    }
    const int ncols = static_cast<int>(cols.size());
    std::int64_t copied = 0;
    PgParams p;
    int pending = 0;
    auto flush = [&]() -> core::Status {
      if (pending == 0) return core::ok_status();
      std::string insert = "INSERT INTO " + ident(t) + " (" + list + ") VALUES ";
      for (int i = 0; i < pending; ++i) {
        insert += (i ? ",(" : "(") + pg_placeholders(1 + i * ncols, ncols) + ")";
      }
      auto r = dst_.exec(insert, p);
      if (!r.ok()) return Error{"store", "table " + t + ": " + r.error()};
      copied += pending;
      pending = 0;
      p = PgParams();
      return core::ok_status();
    };
    int step = SQLITE_ROW;
    while ((step = sqlite3_step(rows.st)) == SQLITE_ROW) {
      for (int i = 0; i < ncols; ++i) add_value(p, rows.st, i);
      if (++pending == kRowsPerInsert) {
        if (auto s = flush(); !s.ok()) return s.error();
      }
    }
    if (step != SQLITE_DONE) return Error{"from", "table " + t + ": " + src_.error()};
    if (auto s = flush(); !s.ok()) return s.error();

    auto n = dst_.run("SELECT COUNT(*) FROM " + ident(t));
    if (!n.ok()) return Error{"store", "table " + t + ": " + n.error()};
    if (n.integer(0, 0) != copied) {
      return Error{"store", "table " + t + ": " + std::to_string(copied) +
                                " rows copied but PostgreSQL counts " + n.text(0, 0)};
    }
    // Copied ids (BIGSERIAL columns given their values): the next one is past the largest.
    for (const auto& c : cols) {
      auto seq = dst_.exec("SELECT pg_get_serial_sequence($1, $2)", PgParams().all(t, c));
      if (!seq.ok() || seq.rows() != 1 || seq.null(0, 0)) continue;
      auto r = dst_.run("SELECT setval('" + seq.text(0, 0) + "', COALESCE(MAX(" + ident(c) +
                        "), 0) + 1, false) FROM " + ident(t));
      if (!r.ok()) return Error{"store", "table " + t + ": " + r.error()};
    }
    return copied;
  }

 private:
  Sqlite& src_;
  PgConn& dst_;
};

}  // namespace

core::Result<CopyReport> copy_sqlite_to_postgres(const std::string& from, const std::string& to,
                                                 CopyOptions opts) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(from, ec)) {
    return Error{"from", "no SQLite database at " + from};
  }
  CopyReport report;
  // Both schemas at this build's version, as a server start would leave them.
  {
    auto s = open_sqlite(from);
    if (!s.ok()) return Error{"from", s.error().reason};
    report.schema_version = s.value()->schema_version();
  }
  {
    PostgresOptions po;
    po.reconnect_for = std::chrono::milliseconds(0);
    auto s = open_postgres(to, po);
    if (!s.ok()) return Error{"to", s.error().reason};
  }

  Sqlite src;
  if (sqlite3_open_v2(from.c_str(), &src.db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    return Error{"from", "cannot open " + from + ": " + src.error()};
  }
  sqlite3_busy_timeout(src.db, 5000);
  // One read transaction: every table from the same moment.
  if (sqlite3_exec(src.db, "BEGIN", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return Error{"from", src.error()};
  }
  auto tables = source_tables(src);
  if (!tables.ok()) return tables.error();

  PgConn dst(to);
  if (auto s = dst.connect(); !s.ok()) return Error{"to", s.error().reason};
  if (auto b = dst.run("BEGIN"); !b.ok()) return Error{"to", b.error()};
  Copier copier(src, dst);
  std::vector<std::string> names;
  for (const auto& [t, cols] : tables.value()) names.push_back(t);
  if (auto s = copier.prepare_target(names, opts.force); !s.ok()) return s.error();
  for (const auto& [t, cols] : tables.value()) {
    auto n = copier.table(t, cols);
    if (!n.ok()) return n.error();  // the connection closes: PostgreSQL rolls back
    report.tables.emplace_back(t, n.value());
  }
  if (auto c = dst.run("COMMIT"); !c.ok()) return Error{"store", "COMMIT: " + c.error()};
  return report;
}

}  // namespace allot::store
