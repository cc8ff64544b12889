#include "core/budget_tree.h"

#include <cmath>

namespace allot::core {
namespace {
bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > BudgetTree::kMaxNameLength) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Status check_share(double share) {
  if (!std::isfinite(share) || share < 0.0 || share > 1e9) {
    return Error{"share", "must be a finite number between 0 and 1e9"};
  }
  return ok_status();
}
}  // namespace

BudgetTree::BudgetTree() {
  BudgetNode root;
  root.id = 0;
  root.name = "";
  root.path = "/";
  nodes_.push_back(root);
  parents_.push_back(kNoBudget);
  live_.push_back(1);
}

Result<BudgetId> BudgetTree::add(BudgetId parent, std::string_view name, double share) {
  if (!valid(parent)) return Error{"parent", "no such budget"};
  if (!valid_name(name)) {
    return Error{"name", "must be 1-128 characters of letters, digits, '.', '_' or '-'"};
  }
  if (auto st = check_share(share); !st.ok()) return st.error();
  if (nodes_.size() >= kMaxNodes) return Error{"budget", "the tree is full"};
  for (BudgetId c : nodes_[parent].children) {
    if (!nodes_[c].removed && nodes_[c].name == name) {
      return Error{"name", "a sibling is already called '" + std::string(name) + "'"};
    }
  }
  BudgetNode n;
  n.id = static_cast<BudgetId>(nodes_.size());
  n.parent = parent;
  n.name = std::string(name);
  n.path = (parent == root() ? std::string("/") : nodes_[parent].path + "/") + n.name;
  n.share = share;
  n.depth = nodes_[parent].depth + 1;
  nodes_[parent].children.push_back(n.id);
  parents_.push_back(n.parent);
  live_.push_back(1);
  nodes_.push_back(std::move(n));
  ++version_;
  return nodes_.back().id;
}

Result<BudgetId> BudgetTree::ensure_path(std::string_view path, double leaf_share) {
  if (path.empty() || path.front() != '/') return Error{"budget", "a path starts with '/'"};
  BudgetId cur = root();
  std::size_t pos = 1;
  while (pos <= path.size()) {
    std::size_t next = path.find('/', pos);
    if (next == std::string_view::npos) next = path.size();
    std::string_view part = path.substr(pos, next - pos);
    if (part.empty()) {
      if (next == path.size()) break;
      return Error{"budget", "empty path component in '" + std::string(path) + "'"};
    }
    const bool last = next == path.size();
    std::optional<BudgetId> found;
    for (BudgetId c : nodes_[cur].children) {
      if (!nodes_[c].removed && nodes_[c].name == part) found = c;
    }
    if (found) {
      cur = *found;
    } else {
      auto r = add(cur, part, last ? leaf_share : 1.0);
      if (!r.ok()) return r.error();
      cur = r.value();
    }
    pos = next + 1;
  }
  return cur;
}

Status BudgetTree::set_share(BudgetId id, double share) {
  if (!valid(id) || id == root()) return Error{"budget", "no such budget"};
  if (auto st = check_share(share); !st.ok()) return st;
  nodes_[id].share = share;
  ++version_;
  return ok_status();
}

Status BudgetTree::set_cluster_share(BudgetId id, ClusterId cluster, std::optional<double> share) {
  if (!valid(id) || id == root()) return Error{"budget", "no such budget"};
  if (share) {
    if (auto st = check_share(*share); !st.ok()) return st;
    nodes_[id].cluster_shares[cluster] = *share;
  } else {
    nodes_[id].cluster_shares.erase(cluster);
  }
  ++version_;
  return ok_status();
}

Status BudgetTree::remove(BudgetId id) {
  if (!valid(id) || id == root()) return Error{"budget", "no such budget"};
  if (!is_leaf(id)) return Error{"budget", "only a budget without children can be removed"};
  nodes_[id].removed = true;
  live_[id] = 0;
  ++version_;
  return ok_status();
}

std::optional<BudgetId> BudgetTree::find(std::string_view path) const {
  if (path == "/") return root();
  for (const BudgetNode& n : nodes_) {
    if (!n.removed && n.path == path) return n.id;
  }
  return std::nullopt;
}

bool BudgetTree::is_leaf(BudgetId id) const {
  for (BudgetId c : nodes_.at(id).children) {
    if (!nodes_[c].removed) return false;
  }
  return true;
}

std::vector<BudgetId> BudgetTree::path_to(BudgetId id) const {
  std::vector<BudgetId> out;
  for (BudgetId cur = id; cur != kNoBudget; cur = nodes_.at(cur).parent) out.push_back(cur);
  return {out.rbegin(), out.rend()};
}

double BudgetTree::share_for(BudgetId id, ClusterId cluster) const {
  const BudgetNode& n = nodes_.at(id);
  auto it = n.cluster_shares.find(cluster);
  return it != n.cluster_shares.end() ? it->second : n.share;
}

double BudgetTree::allocated_fraction(BudgetId id, ClusterId cluster) const {
  double f = 1.0;
  for (BudgetId cur = id; cur != root(); cur = nodes_.at(cur).parent) {
    const BudgetNode& n = nodes_.at(cur);
    if (n.removed) return 0.0;
    double total = 0.0;
    for (BudgetId s : nodes_[n.parent].children) {
      if (!nodes_[s].removed) total += share_for(s, cluster);
    }
    f *= total > 0.0 ? share_for(cur, cluster) / total : 0.0;
  }
  return f;
}

std::vector<double> BudgetTree::allocated_fractions(ClusterId cluster) const {
  std::vector<double> out(nodes_.size(), 0.0);
  out[root()] = 1.0;
  // Parents are always created before their children, so one pass in id order suffices.
  for (const BudgetNode& n : nodes_) {
    if (n.removed) continue;
    double total = 0.0;
    for (BudgetId c : n.children) {
      if (!nodes_[c].removed) total += share_for(c, cluster);
    }
    for (BudgetId c : n.children) {
      if (nodes_[c].removed) continue;
      out[c] = total > 0.0 ? out[n.id] * share_for(c, cluster) / total : 0.0;
    }
  }
  return out;
}

BudgetId BudgetTree::common_ancestor(BudgetId a, BudgetId b) const {
  while (nodes_.at(a).depth > nodes_.at(b).depth) a = nodes_[a].parent;
  while (nodes_.at(b).depth > nodes_.at(a).depth) b = nodes_[b].parent;
  while (a != b) {
    a = nodes_[a].parent;
    b = nodes_[b].parent;
  }
  return a;
}

BudgetId BudgetTree::child_on_path(BudgetId ancestor, BudgetId id) const {
  if (id == ancestor) return id;
  BudgetId cur = id;
  while (nodes_.at(cur).parent != ancestor) cur = nodes_[cur].parent;
  return cur;
}

}  // namespace allot::core
