#include "store/postgres_ops.h"

#include <type_traits>
#include <vector>

#include "store/job_columns.h"

namespace allot::store {

const std::string kPgNodeCols =
    "name, cluster, model, gpus, block, labels, health, health_reason, cordoned, simulated, "
    "registered_at, last_heartbeat, address, devices, agent, timed_out";

std::string pg_placeholders(int from, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += (i ? ",$" : "$") + std::to_string(from + i);
  return out;
}

namespace {

// Writes every column of a job (inserting it if it is new), leaving the creation event's.
std::string upsert_job_sql() {
  return "INSERT INTO jobs (" + kJobColumns + ") VALUES (" + pg_placeholders(1, kJobColumnCount) +
         ") ON CONFLICT (id) DO UPDATE SET " + job_upsert_set();
}

}  // namespace

const std::string& insert_jobs_sql(int rows) {
  static const std::vector<std::string> sql = [] {
    std::vector<std::string> out;
    for (int n = 1; n <= kMaxInsertJobRows; n *= 2) {
      std::string q =
          "INSERT INTO jobs (" + kJobColumns + ", created_state, created_reason) VALUES ";
      for (int i = 0; i < n; ++i) {
        q += (i ? ",(" : "(") + pg_placeholders(1 + i * kInsertJobParams, kInsertJobParams) + ")";
      }
      out.push_back(q + " ON CONFLICT DO NOTHING RETURNING id");
    }
    return out;
  }();
  std::size_t k = 0;
  while ((1 << (k + 1)) <= rows && k + 1 < sql.size()) ++k;
  return sql[k];
}

void add_insert_job_params(PgParams& p, const JobRecord& j) {
  job_column_values(j, [&p](const auto& v) { p.add(v); });
  p.all(j.state, j.reason);  // the creation event: the state and reason it starts in
}

PgStatement write_statement(const WriteOp& w) {
  PgStatement st;
  std::visit(
      [&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, op::InsertJob>) {
          st.sql = &insert_jobs_sql(1);
          add_insert_job_params(st.params, o.job);
        } else if constexpr (std::is_same_v<T, op::UpdateJob>) {
          static const std::string sql = upsert_job_sql();
          st.sql = &sql;
          job_column_values(o.job, [&st](const auto& v) { st.params.add(v); });
        } else if constexpr (std::is_same_v<T, op::AddEvent>) {
          static const std::string sql =
              "INSERT INTO job_events (job_id, time, from_state, to_state, reason) VALUES "
              "($1,$2,$3,$4,$5)";
          const auto& e = o.event;
          st.sql = &sql;
          st.params.all(static_cast<std::int64_t>(e.job), e.time, e.from, e.to, e.reason);
        } else if constexpr (std::is_same_v<T, op::PutBudget>) {
          static const std::string sql =
              "INSERT INTO budgets (path, share, members, removed, owners, submit_limits, "
              "default_min_runtime) VALUES ($1,$2,$3,$4,$5,$6,$7) ON CONFLICT (path) DO UPDATE "
              "SET share = excluded.share, members = excluded.members, removed = "
              "excluded.removed, owners = excluded.owners, submit_limits = "
              "excluded.submit_limits, default_min_runtime = excluded.default_min_runtime";
          const auto& b = o.budget;
          st.sql = &sql;
          st.params.all(b.path, b.share, name_list(b.members), b.removed, name_list(b.owners),
                        b.submit_limits, b.default_min_runtime);
        } else if constexpr (std::is_same_v<T, op::AddAudit>) {
          static const std::string sql =
              "INSERT INTO budget_audit (time, actor, path, field, old_value, new_value, "
              "actor_token) VALUES ($1,$2,$3,$4,$5,$6,$7)";
          const auto& a = o.entry;
          st.sql = &sql;
          st.params.all(a.time, a.actor, a.path, a.field, a.old_value, a.new_value, a.actor_token);
        } else if constexpr (std::is_same_v<T, op::PutNode>) {
          // As SQLite's REPLACE: every column, and a new place in the listing order.
          static const std::string sql = [] {
            std::string set;
            for (const char* c : {"cluster", "model", "gpus", "block", "labels", "health",
                                  "health_reason", "cordoned", "simulated", "registered_at",
                                  "last_heartbeat", "address", "devices", "agent", "timed_out"}) {
              set += std::string(c) + " = excluded." + c + ", ";
            }
            return "INSERT INTO nodes (" + kPgNodeCols + ") VALUES (" + pg_placeholders(1, 16) +
                   ") ON CONFLICT (name) DO UPDATE SET " + set +
                   "ord = nextval(pg_get_serial_sequence('nodes', 'ord'))";
          }();
          const auto& n = o.node;
          st.sql = &sql;
          st.params.all(n.name, n.cluster, n.model, n.gpus, n.block, n.labels_json, n.health,
                        n.health_reason, n.cordoned, n.simulated, n.registered_at, n.last_heartbeat,
                        n.address, n.devices_json, n.agent_json, n.timed_out);
        } else if constexpr (std::is_same_v<T, op::TouchNode>) {
          static const std::string sql = "UPDATE nodes SET last_heartbeat = $1 WHERE name = $2";
          st.sql = &sql;
          st.params.all(o.at, o.name);
        } else if constexpr (std::is_same_v<T, op::PutToken>) {
          static const std::string sql =
              "INSERT INTO tokens (hash, name, role, subject, scope, created, revoked) VALUES "
              "($1,$2,$3,$4,$5,$6,$7) ON CONFLICT DO NOTHING";
          const auto& t = o.token;
          st.sql = &sql;
          st.params.all(t.hash, t.name, t.role, t.subject, t.scope, t.created, t.revoked);
        } else if constexpr (std::is_same_v<T, op::RevokeToken>) {
          static const std::string sql =
              "UPDATE tokens SET revoked = $1 WHERE id = $2 AND revoked = 0";
          st.sql = &sql;
          st.params.all(o.at, o.id);
        } else if constexpr (std::is_same_v<T, op::AddLedger>) {
          static const std::string sql =
              "INSERT INTO ledger (job_id, owner, budget, cluster, start, \"end\", milli, "
              "allocated) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)";
          const auto& e = o.entry;
          st.sql = &sql;
          st.params.all(static_cast<std::int64_t>(e.job), e.owner, e.budget, e.cluster, e.start,
                        e.end, e.milli, e.allocated);
        } else if constexpr (std::is_same_v<T, op::AddNodeHealth>) {
          static const std::string sql =
              "INSERT INTO node_health (node, time, health, cordoned, gpus, reason) VALUES "
              "($1,$2,$3,$4,$5,$6)";
          const auto& e = o.event;
          st.sql = &sql;
          st.params.all(e.node, e.time, e.health, e.cordoned, e.gpus, e.reason);
        } else if constexpr (std::is_same_v<T, op::PutUserLimits>) {
          static const std::string sql =
              "INSERT INTO user_limits (user_name, limits) VALUES ($1,$2) ON CONFLICT (user_name) "
              "DO UPDATE SET limits = excluded.limits";
          st.sql = &sql;
          st.params.all(o.record.user, o.record.limits);
        } else if constexpr (std::is_same_v<T, op::PutService>) {
          static const std::string sql =
              "INSERT INTO services (name, owner, budget, spec_json, state_json, created, "
              "updated, removed) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT (name) DO UPDATE "
              "SET owner = excluded.owner, budget = excluded.budget, spec_json = "
              "excluded.spec_json, state_json = excluded.state_json, created = excluded.created, "
              "updated = excluded.updated, removed = excluded.removed";
          const auto& v = o.service;
          st.sql = &sql;
          st.params.all(v.name, v.owner, v.budget, v.spec_json, v.state_json, v.created, v.updated,
                        std::int64_t{v.removed ? 1 : 0});
        } else {
          static const std::string none = "SELECT 1";  // AddTelemetry: apply_telemetry
          st.sql = &none;
        }
      },
      w);
  return st;
}

}  // namespace allot::store
