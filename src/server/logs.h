// Job logs as the agents upload them (docs/agent-protocol.md, "Logs"): one stream per (job, run,
// node, stdout|stderr), kept as files under a directory next to the database:
//
//   <dir>/<job>/<run>.<node>.<stream>        the first 32 MiB of the stream
//   <dir>/<job>/<run>.<node>.<stream>.<k>    1 MiB chunk k of what follows (only the chunks that
//                                            hold the latest 32 MiB are kept)
//   <dir>/<job>/<run>.<node>.<stream>.final  the agent said nothing more will come
//   <dir>/<job>/<run>.nodes                  the run's nodes in rank order, one per line
//
// Offsets are positions in the whole stream as the job wrote it. Appends are idempotent by offset
// and on disk (fdatasync) before they are acknowledged. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/types.h"

namespace allot::server {

struct LogLimits {
  std::int64_t head = 32LL << 20;  // kept from the start of a stream
  std::int64_t tail = 32LL << 20;  // kept from its end
  std::int64_t chunk = 1LL << 20;  // granularity of the tail on disk
  std::int64_t max_append = 1 << 20;
};

struct LogRead {
  std::string data;
  std::int64_t start = 0;   // where `data` begins (past `offset` when bytes were dropped there)
  std::int64_t next = 0;    // the offset to ask for next
  std::int64_t length = 0;  // the stream's length so far
  bool final = false;       // the agent marked the stream complete
};

// The files of the uploaded job logs under one directory. Thread-safe (one mutex over the
// streams' state; file writes under it).
class LogStore {
 public:
  explicit LogStore(std::string dir, LogLimits limits = {});

  // Appends `data` at `offset`: bytes the store has already are skipped; an offset past the
  // stream's length is refused (field "offset", the reason names the length). Returns the new
  // length.
  core::Result<std::int64_t> append(core::JobId job, int run, const std::string& node,
                                    const std::string& stream, std::int64_t offset,
                                    const std::string& data, bool final);
  // Up to `max` bytes from `offset` (an offset past the end is refused).
  core::Result<LogRead> read(core::JobId job, int run, const std::string& node,
                             const std::string& stream, std::int64_t offset, std::int64_t max);
  // The run's nodes in rank order, as recorded by set_nodes (empty if never recorded).
  std::vector<std::string> nodes(core::JobId job, int run) const;
  void set_nodes(core::JobId job, int run, const std::vector<std::string>& nodes);
  const std::string& dir() const { return dir_; }

 private:
  struct Stream {
    std::int64_t length = 0;
    std::int64_t first_chunk = 0;  // lowest chunk index still on disk
    bool final = false;
  };
  std::string base(core::JobId job, int run, const std::string& node,
                   const std::string& stream) const;
  Stream& state(const std::string& base);
  core::Status write_at(const std::string& base, Stream& s, const std::string& bytes);

  // Set at construction, then only read.
  std::string dir_;
  LogLimits limits_;

  mutable std::mutex mu_;
  // Guarded by mu_.
  std::map<std::string, Stream> streams_;
};

}  // namespace allot::server
