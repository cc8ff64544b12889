// A run's local stdout or stderr copy, bounded: the first `cap` bytes of what the job writes are
// kept as they come; past that a marker line says the cap was reached and the rest is dropped,
// except the last `tail` bytes, which are kept in memory and written at the end with a second
// marker saying how much was dropped. So a job that prints without end cannot fill the node's
// disk, and its log still ends with its last words (a traceback, say).
//
// The log is only ever appended to: the agent ships it to the server by offset while it grows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace allot::agent {

class CappedLog {
 public:
  // `cap` <= 0: no cap. `fd` stays the caller's.
  CappedLog(int fd, std::int64_t cap, std::size_t tail, std::string stream);

  void write(const char* data, std::size_t n);
  // The job has ended: writes the dropped count and the kept tail, if anything was dropped.
  void finish();

  std::int64_t seen() const { return seen_; }
  std::int64_t dropped() const;

 private:
  void put(const char* data, std::size_t n);

  int fd_;
  std::int64_t cap_;
  std::size_t tail_;
  std::string stream_;
  std::int64_t seen_ = 0;  // bytes the job wrote
  std::int64_t kept_ = 0;  // of them, written to the log as they came
  std::string last_;       // past the cap: the latest bytes (at most 2 x tail_, trimmed to tail_)
  bool marked_ = false;    // the cap's marker is written
  bool finished_ = false;
};

}  // namespace allot::agent
