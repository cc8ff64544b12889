// The production store: PostgreSQL through libpq, behind the same Store interface and with the
// same guarantees as the SQLite one (sqlite_store.h).
//
// Writes go through one writer thread with its own connection that group-commits: every batch
// queued while the previous transaction was committing is applied in the next one, each in its
// own savepoint (so one failing batch does not undo the others), and each caller is acknowledged
// only after COMMIT returns. The writer session runs with synchronous_commit on (raised from off
// if the server's default is off), so COMMIT returns once the WAL is flushed: durable.
// Reads use a bounded pool of connections (at most max_readers open; a reader waits for one
// when all are in use) and never wait for the writer.
//
// A lost connection does not crash anything. The writer connects again and runs the group again
// when nothing of it can have committed; when the connection broke during COMMIT itself it asks
// PostgreSQL what became of the transaction (txid_status) before answering or retrying. It keeps
// trying for reconnect_for, then fails the group's batches with a Status (field "store"; "commit
// outcome unknown" if the COMMIT's fate could not be learnt). A read also tries again for
// reconnect_for, then throws std::runtime_error as the SQLite store's reads do on an I/O error.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "store/store.h"

namespace allot::store {

struct PostgresOptions {
  std::size_t max_batches_per_commit = 4096;
  // Batches waiting for the writer; beyond, write() fails at once (field "store") rather than
  // queue without bound while PostgreSQL is slow or away.
  std::size_t max_queued_batches = 65536;
  // Read connections open at once (each one a PostgreSQL backend process).
  std::size_t max_readers = 8;
  // How long a write or a read keeps trying to reach PostgreSQL again after losing it (a restart,
  // a failover) before it fails.
  std::chrono::milliseconds reconnect_for{30'000};
  // The leader lease's epoch this server holds (postgres_lease.h); 0: none (one server alone).
  // Each write transaction then locks the lease row and checks the epoch is still this one: once
  // another server has taken the lease, every write fails (field "store", "fenced: ...").
  std::int64_t fence_epoch = 0;
};

// Connects to `uri` (a libpq connection URI, postgres://user@host:port/db?...), runs pending schema
// migrations (serialised across servers by an advisory lock) and starts the writer.
core::Result<std::unique_ptr<Store>> open_postgres(const std::string& uri,
                                                   PostgresOptions opts = {});

// Whether a write failed because another server took the leader lease (fence_epoch): the writer
// is a deposed leader, and none of its later writes will succeed either.
bool is_fenced(const core::Error& e);

// The number of schema migrations this build knows (equal to sqlite_schema_latest()).
int postgres_schema_latest();

}  // namespace allot::store
