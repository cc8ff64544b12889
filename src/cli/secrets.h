// Secrets given to `allot agent` and the client commands: a token file that only its owner may
// read, and the clean-up that keeps a token given in the environment or on the command line from
// staying visible to other local users (`ps`, /proc/PID/cmdline and /proc/PID/environ).
#pragma once

#include <string>

namespace allot::cli {

struct TokenRead {
  std::string token;  // the file's first line, without surrounding blanks
  std::string error;  // why it cannot be used (non-empty: token is empty)
};

// Reads a token from `path`, which must be a regular file that neither its group nor others may
// read or write (mode 0600 or 0400): a token readable by others is already leaked, and using it
// anyway would hide that.
TokenRead read_token_file(const std::string& path);

// Returns environment variable `name` (empty if unset) and removes it from this process's
// environment, first overwriting its bytes where /proc/self/environ shows them, so that neither
// child processes nor other readers of /proc see it afterwards.
std::string take_secret_from_env(const char* name);

// Overwrites a command-line argument in place (with 'x'), so that `ps` stops showing it. The
// argument was visible until now: this narrows the window, it does not close it.
void blank_argument(char* arg);

}  // namespace allot::cli
