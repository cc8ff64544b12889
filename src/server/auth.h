// API tokens and roles. A token is "allot_" + 40 random hex digits; the store keeps only its
// SHA-256. Roles: admin (everything); manager of a budget subtree (its budgets, jobs and usage);
// user (submits to budgets they are a member of; sees and cancels their own jobs); agent (acts
// only for its node); metrics (reads GET /metrics and nothing else); service (reports the load of
// the one service it is scoped to, as its subject, and nothing else).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "store/store.h"

namespace allot::server {

std::string sha256_hex(const std::string& data);
std::string new_token_secret();

struct Principal {
  std::int64_t token_id = 0;
  std::string role;     // admin, manager, user, agent, metrics, service
  std::string subject;  // user name
  std::string scope;    // manager: budget path; agent: node name; service: service name
  // Budget subtrees it manages: a manager token's scope, and the budgets whose owners list the
  // subject (filled per request from the budget tree).
  std::vector<std::string> manages;
  bool is_admin() const { return role == "admin"; }
  bool is_human() const { return role != "agent" && role != "service"; }
};

using Members = std::map<std::string, std::vector<std::string>>;  // budget path -> users

// Fills p.manages from the token and the budgets' owners (user -> budgets they own).
void add_managed(Principal& p, const std::map<std::string, std::vector<std::string>>& owned_by);

bool valid_role(const std::string& role);
// `path` is `scope` or below it.
bool path_within(const std::string& path, const std::string& scope);
// `user` is a member of `budget` or of one of its ancestors.
bool is_member(const std::map<std::string, std::vector<std::string>>& members,
               const std::string& budget, const std::string& user);

bool can_submit(const Principal& p, const std::string& budget, const Members& members);
bool can_see_job(const Principal& p, const store::JobRecord& job);
// A service is seen as a job of its owner in its budget is.
bool can_see_service(const Principal& p, const std::string& owner, const std::string& budget);
// Service tokens `p` may list and revoke: its own subject's, and a manager's members'.
bool can_manage_service_token(const Principal& p, const std::string& subject,
                              const Members& members);
// Set share, members or owners, remove: strictly below a managed budget (not one's own share).
bool can_manage_budget(const Principal& p, const std::string& path);
bool can_see_budget_usage(const Principal& p, const std::string& path);
// The budget tree a person sees: admins all; others the budgets they manage or are members of,
// everything below those, and their ancestors (so the tree reads from the root).
bool can_see_budget(const Principal& p, const std::string& path, const Members& members);
bool can_act_for_node(const Principal& p, const std::string& node);
// User tokens a manager may create and revoke: for members of budgets within what it manages.
bool can_manage_user(const Principal& p, const std::string& user, const Members& members);

}  // namespace allot::server
