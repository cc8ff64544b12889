// The embedded store: one SQLite file in WAL mode with synchronous=FULL, so a committed
// transaction is on disk. Writes go through a single writer thread that group-commits: every
// batch queued while the previous transaction was being committed is applied in the next one
// (each in its own savepoint, so one failing batch does not undo the others), and each caller is
// acknowledged only after that transaction commits. Reads use a pool of read-only connections and
// never wait for the writer.
#pragma once

#include <memory>
#include <string>

#include "store/store.h"

namespace allot::store {

struct SqliteOptions {
  std::size_t max_batches_per_commit = 4096;
  // A bound on the database file, in pages (4 KiB); 0: none. Writes beyond it fail as they would
  // on a full disk, and acknowledge nothing they did not commit.
  std::int64_t max_pages = 0;
  // The committing writer copies the WAL into the database (and syncs both) once the WAL holds
  // this many pages. SQLite's default, 1000, stalled the group commit for a checkpoint every ~14
  // groups under a submit storm; fewer, larger ones cost less in all (docs/benchmarks.md).
  int wal_checkpoint_pages = 4000;
};

// Opens (creating if needed) the database at `path` and runs pending schema migrations.
core::Result<std::unique_ptr<Store>> open_sqlite(const std::string& path, SqliteOptions opts = {});

// The number of schema migrations this build knows.
int sqlite_schema_latest();

}  // namespace allot::store
