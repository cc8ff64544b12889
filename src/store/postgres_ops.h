// The SQL and parameters of each write op on PostgreSQL (postgres_store.cpp runs them in the
// writer's transaction). Inserts of jobs and tokens skip a taken key (ON CONFLICT DO NOTHING,
// 0 rows) rather than fail, which would abort the whole group's transaction.
#pragma once

#include <string>

#include "store/postgres_conn.h"
#include "store/store.h"

namespace allot::store {

struct PgStatement {
  const std::string* sql = nullptr;  // a string that lives as long as the program
  PgParams params;
};

// Not AddTelemetry (two statements: postgres_store.cpp).
PgStatement write_statement(const WriteOp& w);

extern const std::string kPgJobCols;
extern const std::string kPgNodeCols;

// "$from,$from+1,...": n placeholders.
std::string pg_placeholders(int from, int n);

}  // namespace allot::store
