#include "cli/secrets.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

extern char** environ;

namespace allot::cli {

TokenRead read_token_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return {"", "cannot read " + path + ": " + std::strerror(errno)};
  }
  if (!S_ISREG(st.st_mode)) return {"", path + " is not a regular file"};
  const unsigned mode = st.st_mode & 07777;
  if ((mode & 077) != 0) {
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", mode);
    return {"", path + " may be read or written by its group or others (mode " + octal +
                    "): a token file must be private to its owner; run 'chmod 600 " + path +
                    "' (and replace the token if others may have read it)"};
  }
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return {"", "cannot read a token from " + path};
  const auto first = line.find_first_not_of(" \t");
  const auto last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos) return {"", path + " is empty: its first line must be the token"};
  return {line.substr(first, last - first + 1), ""};
}

std::string take_secret_from_env(const char* name) {
  const std::size_t n = std::strlen(name);
  std::string value;
  bool found = false;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, name, n) == 0 && (*e)[n] == '=') {
      if (!found) value = *e + n + 1;
      found = true;
      // The strings the process started with are what /proc/PID/environ reads back.
      std::memset(*e + n + 1, 0, std::strlen(*e + n + 1));
    }
  }
  if (found) ::unsetenv(name);
  return value;
}

void blank_argument(char* arg) {
  if (arg) std::memset(arg, 'x', std::strlen(arg));
}

}  // namespace allot::cli
