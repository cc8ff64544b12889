// The jobs table's columns, once for both backends (sqlite_store.cpp, postgres_ops.cpp and
// postgres_store.cpp): their names in order, a job's values for them, a job read back from a row
// of them, and the SET list of the upsert that writes them all. A column added to jobs is added
// here, and both stores bind and read it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "store/store.h"

namespace allot::store {

// Every column a job's record fills, in the order of job_column_values and job_from_row (not
// the creation event's, created_state and created_reason, which only an insert writes).
inline const std::string kJobColumns =
    "id, owner, idem_key, name, budget, spec, state, reason, submit_time, updated_at, cluster, "
    "placement, allocated, protected_until, run_start, seg_start, milli, runs, exit_code, held_by, "
    "after_ok, after_any, array_job, array_index, array_limit";
constexpr int kJobColumnCount = 25;

// Calls put(value) for each column of kJobColumns, in order; values are std::int64_t, int,
// bool, std::string or std::optional<int> (exit_code: NULL while none).
template <typename Put>
void job_column_values(const JobRecord& j, Put&& put) {
  put(static_cast<std::int64_t>(j.id));
  put(j.owner);
  put(j.idempotency_key);
  put(j.name);
  put(j.budget);
  put(j.spec_json);
  put(j.state);
  put(j.reason);
  put(static_cast<std::int64_t>(j.submit_time));
  put(static_cast<std::int64_t>(j.updated_at));
  put(j.cluster);
  put(j.placement_json);
  put(j.allocated);
  put(static_cast<std::int64_t>(j.protected_until));
  put(static_cast<std::int64_t>(j.run_start));
  put(static_cast<std::int64_t>(j.seg_start));
  put(j.milli);
  put(j.runs);
  put(j.exit_code);
  put(j.held_by);
  put(id_list(j.after));
  put(id_list(j.after_any));
  put(static_cast<std::int64_t>(j.array_job));
  put(j.array_index);
  put(j.array_limit);
}

// A job from a row whose first columns are kJobColumns in order. Row: integer(col) ->
// std::int64_t, text(col) -> std::string, null(col) -> bool.
template <typename Row>
JobRecord job_from_row(const Row& r) {
  JobRecord j;
  j.id = static_cast<JobId>(r.integer(0));
  j.owner = r.text(1);
  j.idempotency_key = r.text(2);
  j.name = r.text(3);
  j.budget = r.text(4);
  j.spec_json = r.text(5);
  j.state = r.text(6);
  j.reason = r.text(7);
  j.submit_time = r.integer(8);
  j.updated_at = r.integer(9);
  j.cluster = r.text(10);
  j.placement_json = r.text(11);
  j.allocated = r.integer(12) != 0;
  j.protected_until = r.integer(13);
  j.run_start = r.integer(14);
  j.seg_start = r.integer(15);
  j.milli = r.integer(16);
  j.runs = static_cast<int>(r.integer(17));
  if (!r.null(18)) j.exit_code = static_cast<int>(r.integer(18));
  j.held_by = r.text(19);
  j.after = parse_id_list(r.text(20));
  j.after_any = parse_id_list(r.text(21));
  j.array_job = static_cast<JobId>(r.integer(22));
  j.array_index = static_cast<int>(r.integer(23));
  j.array_limit = static_cast<int>(r.integer(24));
  return j;
}

// "owner = excluded.owner, ...": every column but id, for INSERT ... ON CONFLICT (id) DO UPDATE
// SET (the same words on both backends), leaving the creation event's columns as they were.
inline std::string job_upsert_set() {
  std::string set;
  for (std::size_t start = 0; start < kJobColumns.size();) {
    auto end = kJobColumns.find(',', start);
    if (end == std::string::npos) end = kJobColumns.size();
    const auto col = kJobColumns.substr(start, end - start);
    if (col != "id") set += (set.empty() ? "" : ", ") + col + " = excluded." + col;
    start = kJobColumns.find_first_not_of(", ", end);
    if (start == std::string::npos) break;
  }
  return set;
}

}  // namespace allot::store
