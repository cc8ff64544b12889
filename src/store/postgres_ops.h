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

// Many submissions in one statement (postgres_store.cpp: a group's run of one-job batches):
// `rows` rounded down to a power of two, at most kMaxInsertJobRows, each row's kInsertJobParams
// parameters added by add_insert_job_params in order. A row whose id or (owner, key) is taken is
// skipped; RETURNING id names the rows written. A fixed set of texts, so each is prepared once.
constexpr int kMaxInsertJobRows = 256;
constexpr int kInsertJobParams = 27;  // kJobColumnCount and the creation event's two
const std::string& insert_jobs_sql(int rows);
// The largest row count insert_jobs_sql(rows) writes at once.
inline int insert_jobs_chunk(int rows) {
  int n = 1;
  while (n * 2 <= rows && n * 2 <= kMaxInsertJobRows) n *= 2;
  return n;
}
void add_insert_job_params(PgParams& p, const JobRecord& j);

extern const std::string kPgNodeCols;

// "$from,$from+1,...": n placeholders.
std::string pg_placeholders(int from, int n);

}  // namespace allot::store
