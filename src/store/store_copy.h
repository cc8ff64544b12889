// Moving a server's state from its SQLite file into PostgreSQL (`allot store copy`): every table,
// row for row, in one PostgreSQL transaction, each table's row count checked before COMMIT.
//
// Both schemas are first brought to this build's version (as `allot server` would at start), so
// the tables and columns are the same on both sides. Rows keep their ids (jobs, tokens, the
// ledger, the audit log) and their order (PostgreSQL's `ord` columns are given in SQLite's rowid
// order); PostgreSQL's sequences are moved past the copied ids. The source is read in one read
// transaction (a consistent snapshot), but stop the server first: what it writes after the copy
// is not in the target.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace allot::store {

struct CopyOptions {
  // Replace what the target holds (every table emptied first). Without it a target that holds
  // any row is refused, naming the table.
  bool force = false;
};

struct CopyReport {
  std::vector<std::pair<std::string, std::int64_t>> tables;  // table, rows copied (in order)
  int schema_version = 0;
};

// `from`: a SQLite file (it must exist); `to`: a libpq URI. Errors name the field "from", "to"
// or "store", and the table where a table is to blame.
core::Result<CopyReport> copy_sqlite_to_postgres(const std::string& from, const std::string& to,
                                                 CopyOptions opts = {});

}  // namespace allot::store
