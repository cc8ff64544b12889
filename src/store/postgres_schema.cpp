#include "store/postgres_schema.h"

namespace allot::store {

namespace {

// As SQLite's, with PostgreSQL's types: INTEGER -> BIGINT, REAL -> DOUBLE PRECISION. Where SQLite
// lists rows in rowid order, these tables have an `ord` column from a sequence instead (nodes take
// a new one when replaced, as REPLACE gives a new rowid). "end" is a reserved word here.
const char* const kMigrationList[] = {
    R"sql(
CREATE TABLE jobs (
  id BIGINT PRIMARY KEY,
  owner TEXT NOT NULL,
  idem_key TEXT NOT NULL,
  name TEXT NOT NULL,
  budget TEXT NOT NULL,
  spec TEXT NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  submit_time BIGINT NOT NULL,
  updated_at BIGINT NOT NULL,
  cluster TEXT NOT NULL,
  placement TEXT NOT NULL,
  allocated BIGINT NOT NULL,
  protected_until BIGINT NOT NULL,
  run_start BIGINT NOT NULL,
  seg_start BIGINT NOT NULL,
  milli BIGINT NOT NULL,
  runs BIGINT NOT NULL,
  exit_code BIGINT
);
CREATE UNIQUE INDEX jobs_idem ON jobs(owner, idem_key);
CREATE INDEX jobs_state ON jobs(state, id);
CREATE INDEX jobs_owner ON jobs(owner, id);
CREATE INDEX jobs_budget ON jobs(budget, id);
CREATE TABLE job_events (
  job_id BIGINT NOT NULL,
  time BIGINT NOT NULL,
  from_state TEXT NOT NULL,
  to_state TEXT NOT NULL,
  reason TEXT NOT NULL,
  ord BIGSERIAL
);
CREATE INDEX job_events_job ON job_events(job_id, ord);
CREATE TABLE budgets (
  path TEXT PRIMARY KEY,
  share DOUBLE PRECISION NOT NULL,
  members TEXT NOT NULL,
  removed BIGINT NOT NULL,
  ord BIGSERIAL
);
CREATE TABLE budget_audit (
  id BIGSERIAL PRIMARY KEY,
  time BIGINT NOT NULL,
  actor TEXT NOT NULL,
  path TEXT NOT NULL,
  field TEXT NOT NULL,
  old_value TEXT NOT NULL,
  new_value TEXT NOT NULL
);
CREATE TABLE nodes (
  name TEXT PRIMARY KEY,
  cluster TEXT NOT NULL,
  model TEXT NOT NULL,
  gpus BIGINT NOT NULL,
  block TEXT NOT NULL,
  labels TEXT NOT NULL,
  health TEXT NOT NULL,
  health_reason TEXT NOT NULL,
  cordoned BIGINT NOT NULL,
  simulated BIGINT NOT NULL,
  registered_at BIGINT NOT NULL,
  last_heartbeat BIGINT NOT NULL,
  ord BIGSERIAL
);
CREATE TABLE tokens (
  id BIGSERIAL PRIMARY KEY,
  hash TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  role TEXT NOT NULL,
  subject TEXT NOT NULL,
  scope TEXT NOT NULL,
  created BIGINT NOT NULL,
  revoked BIGINT NOT NULL
);
CREATE TABLE ledger (
  id BIGSERIAL PRIMARY KEY,
  job_id BIGINT NOT NULL,
  owner TEXT NOT NULL,
  budget TEXT NOT NULL,
  cluster TEXT NOT NULL,
  start BIGINT NOT NULL,
  "end" BIGINT NOT NULL,
  milli BIGINT NOT NULL,
  allocated BIGINT NOT NULL
);
CREATE INDEX ledger_end ON ledger("end");
CREATE INDEX ledger_job ON ledger(job_id);
)sql",
    // 2: what agents register (address, devices, agent), who marked a node down, the node health
    // history (availability) and per-job telemetry summaries (utilization and flags).
    R"sql(
ALTER TABLE nodes ADD COLUMN address TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN devices TEXT NOT NULL DEFAULT '[]';
ALTER TABLE nodes ADD COLUMN agent TEXT NOT NULL DEFAULT '{}';
ALTER TABLE nodes ADD COLUMN timed_out BIGINT NOT NULL DEFAULT 0;
CREATE TABLE node_health (
  node TEXT NOT NULL,
  time BIGINT NOT NULL,
  health TEXT NOT NULL,
  cordoned BIGINT NOT NULL,
  gpus BIGINT NOT NULL,
  reason TEXT NOT NULL,
  ord BIGSERIAL
);
CREATE INDEX node_health_time ON node_health(time);
CREATE TABLE job_telemetry (
  job_id BIGINT NOT NULL,
  run BIGINT NOT NULL,
  budget TEXT NOT NULL,
  samples BIGINT NOT NULL,
  seconds DOUBLE PRECISION NOT NULL,
  gpu_seconds DOUBLE PRECISION NOT NULL,
  used_gpu_seconds DOUBLE PRECISION NOT NULL,
  util_sum DOUBLE PRECISION NOT NULL,
  util_peak DOUBLE PRECISION NOT NULL,
  mem_peak_mib BIGINT NOT NULL,
  mem_total_mib BIGINT NOT NULL,
  cpu_sum DOUBLE PRECISION NOT NULL,
  io_sum DOUBLE PRECISION NOT NULL,
  first_time BIGINT NOT NULL,
  last_time BIGINT NOT NULL,
  PRIMARY KEY (job_id, run)
);
CREATE INDEX job_telemetry_last ON job_telemetry(last_time);
)sql",
    // 3: budget owners (users who manage a budget).
    R"sql(
ALTER TABLE budgets ADD COLUMN owners TEXT NOT NULL DEFAULT '';
)sql",
    // 4: listing a budget's jobs in some states without walking every job in those states.
    R"sql(
CREATE INDEX jobs_budget_state ON jobs(budget, state, id);
)sql",
    // 5: a job's creation event is kept in its row (one insert less per submission): the state
    // and reason it was inserted with; '' for jobs inserted before, whose creation event is a
    // row of job_events.
    R"sql(
ALTER TABLE jobs ADD COLUMN created_state TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN created_reason TEXT NOT NULL DEFAULT '';
)sql",
    // 6: the id of the token behind each audited change, beside its subject (0 before).
    R"sql(
ALTER TABLE budget_audit ADD COLUMN actor_token BIGINT NOT NULL DEFAULT 0;
)sql",
    // 7: submission limits an administrator set for a budget ('' = the server-wide ones).
    R"sql(
ALTER TABLE budgets ADD COLUMN submit_limits TEXT NOT NULL DEFAULT '';
)sql",
    // 8: Slurm's habits: who holds a job, the jobs it waits for (comma-separated ids; after: to
    // have succeeded, after_any: to have ended) and its place in a job array.
    R"sql(
ALTER TABLE jobs ADD COLUMN held_by TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN after_ok TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN after_any TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN array_job BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN array_index INTEGER NOT NULL DEFAULT -1;
ALTER TABLE jobs ADD COLUMN array_limit INTEGER NOT NULL DEFAULT 0;
)sql",
    // 9: waste telemetry (server/advice.h): the seconds a job's GPUs were idle, and the seconds
    // they were starved by its input pipeline, as each telemetry report classifies its interval.
    R"sql(
ALTER TABLE job_telemetry ADD COLUMN idle_seconds DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE job_telemetry ADD COLUMN starved_seconds DOUBLE PRECISION NOT NULL DEFAULT 0;
)sql",
    // 10: the minimum runtime a budget gives jobs submitted without one (-1: none set).
    R"sql(
ALTER TABLE budgets ADD COLUMN default_min_runtime BIGINT NOT NULL DEFAULT -1;
)sql",
    // 11: submission limits an administrator set for one user (JSON, as a budget's).
    R"sql(
CREATE TABLE user_limits (
  user_name TEXT PRIMARY KEY,
  limits TEXT NOT NULL
);
)sql",
    // 12: inference services (server/service.h): the request and what the server decided.
    R"sql(
CREATE TABLE services (
  name TEXT PRIMARY KEY,
  owner TEXT NOT NULL,
  budget TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  state_json TEXT NOT NULL,
  created BIGINT NOT NULL,
  updated BIGINT NOT NULL,
  removed INTEGER NOT NULL DEFAULT 0
);
)sql",
};

}  // namespace

const std::span<const char* const> kPostgresMigrations{kMigrationList};

}  // namespace allot::store
