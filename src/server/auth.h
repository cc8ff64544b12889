// API tokens and roles. A token is "allot_" + 40 random hex digits; the store keeps only its
// SHA-256. Roles: admin (everything); manager of a budget subtree (its budgets, jobs and usage);
// user (submits to budgets they are a member of; sees and cancels their own jobs); agent (acts
// only for its node).
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
  std::string role;     // admin, manager, user, agent
  std::string subject;  // user name
  std::string scope;    // manager: budget path; agent: node name
  bool is_admin() const { return role == "admin"; }
};

bool valid_role(const std::string& role);
// `path` is `scope` or below it.
bool path_within(const std::string& path, const std::string& scope);
// `user` is a member of `budget` or of one of its ancestors.
bool is_member(const std::map<std::string, std::vector<std::string>>& members,
               const std::string& budget, const std::string& user);

bool can_submit(const Principal& p, const std::string& budget,
                const std::map<std::string, std::vector<std::string>>& members);
bool can_see_job(const Principal& p, const store::JobRecord& job);
bool can_manage_budget(const Principal& p, const std::string& path);  // set share / members
bool can_see_budget_usage(const Principal& p, const std::string& path);
bool can_act_for_node(const Principal& p, const std::string& node);

}  // namespace allot::server
