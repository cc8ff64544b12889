// A run's state directory, <state_dir>/runs/<job>.<run>/, written by the shim and the runner and
// read back by a restarted agent (Runner::recover()):
//
//   stdout, stderr  the job's output (appended; they outlive forget())
//   shim.log        the shim's own diagnostics
//   pid             written by the shim once the job runs: job pid and start time, shim pid and
//                   start time, start (ms since the epoch), the cgroups it was put in
//   exit            written by the shim when the job ended: exit code, signal, error
//   stop            written by the runner on stop(): when SIGKILL is due (ms since the epoch)
//
// Each record is a few "key value" lines, written to a temporary file and renamed into place, so
// a reader sees all of it or none.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace allot::agent {

struct PidRecord {
  pid_t job_pid = 0;  // also its session and process group id
  std::uint64_t job_start = 0;
  pid_t shim_pid = 0;
  std::uint64_t shim_start = 0;
  std::int64_t started_ms = 0;
  std::string cgroup;          // the run's cgroup v2 directory, "" if none
  std::string devices_cgroup;  // its cgroup v1 devices directory, "" if none
};

struct ExitRecord {
  int exit_code = 0;  // 128 + signal when killed by one
  int signal = 0;     // 0: exited on its own
  std::string error;  // why it could not start, "" otherwise
};

struct StopRecord {
  std::int64_t kill_at_ms = 0;
  std::int64_t term_at_ms = 0;  // > 0: a warned stop whose SIGTERM is still due then
};

// The file names above, under a run's directory.
struct RunFiles {
  std::string dir;
  std::string path(const char* name) const { return dir + "/" + name; }
};

bool write_pid_record(const RunFiles& run, const PidRecord& r);
bool write_exit_record(const RunFiles& run, const ExitRecord& r);
bool write_stop_record(const RunFiles& run, const StopRecord& r);
// The warning a job gets before a stop with notice: the file $ALLOT_STOP_NOTICE names, holding
// "term_at <epoch s>" and "kill_at <epoch s>" lines.
bool write_stop_notice(const RunFiles& run, const StopRecord& r);
// The signal the job named in ALLOT_STOP_SIGNAL (a number), kept beside the run so that an
// agent that restarts still warns the job with it; 0 when there is none.
bool write_notice_signal(const RunFiles& run, int signal);
int read_notice_signal(const RunFiles& run);
std::optional<PidRecord> read_pid_record(const RunFiles& run);
std::optional<ExitRecord> read_exit_record(const RunFiles& run);
std::optional<StopRecord> read_stop_record(const RunFiles& run);
// Whether the run left a record of its start or its end (a forgotten run has neither: only logs).
bool has_run_records(const RunFiles& run);
// Removes the pid, exit, stop and notice-signal records (the logs stay).
void remove_run_records(const RunFiles& run);

std::int64_t epoch_ms();

}  // namespace allot::agent
