#include "server/auth.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <stdexcept>

namespace allot::server {

namespace {
std::string hex(const unsigned char* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}
}  // namespace

std::string sha256_hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("SHA-256 failed");
  }
  return hex(md, len);
}

std::string new_token_secret() {
  unsigned char buf[20];
  if (RAND_bytes(buf, sizeof buf) != 1) throw std::runtime_error("RAND_bytes failed");
  return "allot_" + hex(buf, sizeof buf);
}

bool valid_role(const std::string& role) {
  return role == "admin" || role == "manager" || role == "user" || role == "agent" ||
         role == "metrics" || role == "service";
}

bool path_within(const std::string& path, const std::string& scope) {
  if (scope == "/") return !path.empty() && path[0] == '/';
  return path == scope || (path.size() > scope.size() &&
                           path.compare(0, scope.size(), scope) == 0 && path[scope.size()] == '/');
}

bool is_member(const std::map<std::string, std::vector<std::string>>& members,
               const std::string& budget, const std::string& user) {
  std::string path = budget;
  for (;;) {
    auto it = members.find(path);
    if (it != members.end()) {
      for (const auto& m : it->second) {
        if (m == user) return true;
      }
    }
    if (path == "/" || path.empty()) return false;
    auto slash = path.rfind('/');
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
}

void add_managed(Principal& p, const std::map<std::string, std::vector<std::string>>& owned_by) {
  p.manages.clear();
  if (p.role == "manager" && !p.scope.empty()) p.manages.push_back(p.scope);
  if (p.role != "manager" && p.role != "user") return;
  auto it = owned_by.find(p.subject);
  if (it != owned_by.end()) p.manages.insert(p.manages.end(), it->second.begin(), it->second.end());
}

namespace {
bool within_any(const std::string& path, const std::vector<std::string>& scopes) {
  for (const auto& s : scopes) {
    if (path_within(path, s)) return true;
  }
  return false;
}
}  // namespace

bool can_submit(const Principal& p, const std::string& budget, const Members& members) {
  if (p.role == "admin") return true;
  if (p.role != "manager" && p.role != "user") return false;
  return within_any(budget, p.manages) || is_member(members, budget, p.subject);
}

bool can_see_job(const Principal& p, const store::JobRecord& job) {
  if (p.role == "admin") return true;
  if (p.role == "agent") return false;
  if (job.owner == p.subject) return true;
  return within_any(job.budget, p.manages);
}

bool can_see_service(const Principal& p, const std::string& owner, const std::string& budget) {
  store::JobRecord as_job;
  as_job.owner = owner;
  as_job.budget = budget;
  return can_see_job(p, as_job);
}

bool can_manage_service_token(const Principal& p, const std::string& subject,
                              const Members& members) {
  return p.is_admin() || (p.is_human() && p.subject == subject) ||
         can_manage_user(p, subject, members);
}

bool can_manage_budget(const Principal& p, const std::string& path) {
  if (p.role == "admin") return true;
  if (p.role == "agent") return false;
  // A manager shapes the inside of its subtree, not its own share among its siblings.
  for (const auto& s : p.manages) {
    if (path != s && path_within(path, s)) return true;
  }
  return false;
}

bool can_see_budget_usage(const Principal& p, const std::string& path) {
  if (p.role == "admin") return true;
  if (p.role == "agent") return false;
  return within_any(path, p.manages);
}

bool can_see_budget(const Principal& p, const std::string& path, const Members& members) {
  if (p.role == "admin") return true;
  if (p.role == "agent") return false;
  auto visible_from = [&](const std::string& root) {
    return path_within(path, root) || path_within(root, path);  // below it, or an ancestor
  };
  for (const auto& s : p.manages) {
    if (visible_from(s)) return true;
  }
  for (const auto& [b, users] : members) {
    if (std::find(users.begin(), users.end(), p.subject) != users.end() && visible_from(b)) {
      return true;
    }
  }
  return false;
}

bool can_act_for_node(const Principal& p, const std::string& node) {
  return p.role == "admin" || (p.role == "agent" && p.scope == node);
}

bool can_manage_user(const Principal& p, const std::string& user, const Members& members) {
  if (p.role == "admin") return true;
  if (p.manages.empty() || p.role == "agent") return false;
  for (const auto& [b, users] : members) {
    if (within_any(b, p.manages) && std::find(users.begin(), users.end(), user) != users.end()) {
      return true;
    }
  }
  return false;
}

}  // namespace allot::server
