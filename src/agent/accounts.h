// Which Unix account on this node a job's owner runs as. The owner is the subject of the token
// that submitted the job; by default the account of the same name. A map file names the
// exceptions, one per line:
//
//   # subject   account
//   ann.smith   asmith
//   ci-bot      svc-ci
//
// Blank lines and lines starting with '#' are skipped. Each subject appears once; both fields are
// names (letters, digits, '.', '_', '-', '@'; an account may not start with '-').
#pragma once

#include <map>
#include <string>

#include "core/status.h"

namespace allot::agent {

struct AccountMap {
  std::map<std::string, std::string> exceptions;  // subject -> account
  std::string source;                             // the file it came from ("" = none)

  // The account `subject` runs as.
  std::string account_for(const std::string& subject) const;
};

// Reads a map file; every malformed line is refused with its line number and why.
core::Result<AccountMap> parse_account_map(const std::string& text, const std::string& source);
core::Result<AccountMap> load_account_map(const std::string& path);

}  // namespace allot::agent
