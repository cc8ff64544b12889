#include "agent/accounts.h"

#include <fstream>
#include <sstream>

namespace allot::agent {

namespace {

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 64 || s[0] == '-') return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-' || c == '@';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string AccountMap::account_for(const std::string& subject) const {
  auto it = exceptions.find(subject);
  return it == exceptions.end() ? subject : it->second;
}

core::Result<AccountMap> parse_account_map(const std::string& text, const std::string& source) {
  AccountMap map;
  map.source = source;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string where = source + ":" + std::to_string(number);
    std::istringstream fields(line);
    std::string subject, account, extra;
    if (!(fields >> subject) || subject[0] == '#') continue;
    if (!(fields >> account)) {
      return core::Error{"user_map", where + ": '" + subject + "' has no account after it"};
    }
    if (fields >> extra && extra[0] != '#') {
      return core::Error{"user_map",
                         where + ": expected 'SUBJECT ACCOUNT', found more after the account"};
    }
    if (!valid_name(subject)) {
      return core::Error{"user_map", where + ": subject '" + subject + "' is not a name"};
    }
    if (!valid_name(account)) {
      return core::Error{"user_map", where + ": account '" + account + "' is not an account name"};
    }
    if (!map.exceptions.emplace(subject, account).second) {
      return core::Error{"user_map", where + ": subject '" + subject + "' is mapped twice"};
    }
  }
  return map;
}

core::Result<AccountMap> load_account_map(const std::string& path) {
  std::ifstream in(path);
  if (!in) return core::Error{"user_map", "cannot read " + path};
  std::stringstream text;
  text << in.rdbuf();
  return parse_account_map(text.str(), path);
}

}  // namespace allot::agent
