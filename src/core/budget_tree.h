// The budget tree: organisation -> program -> project -> researcher. Each node holds a share of its
// parent; a leaf's allocated fraction of a cluster is the product of normalised shares down its
// path. Shares are managed data: the tree may change while jobs run (version() tells readers to
// refresh).
//
// Thread-safety: none; owned by one Scheduler and used by one thread at a time, like all of
// src/core (which has no threads, I/O or clock).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/types.h"

namespace allot::core {

struct BudgetNode {
  BudgetId id = 0;
  BudgetId parent = kNoBudget;                 // kNoBudget for the root
  std::string name;                            // last path component
  std::string path;                            // "/" for the root, "/org/program/project" otherwise
  double share = 1.0;                          // weight among siblings
  std::map<ClusterId, double> cluster_shares;  // optional per-cluster weight overriding share
  std::vector<BudgetId> children;              // in creation order
  int depth = 0;
  bool removed = false;
};

class BudgetTree {
 public:
  static constexpr std::size_t kMaxNodes = 1 << 20;
  static constexpr std::size_t kMaxNameLength = 128;

  BudgetTree();  // holds only the root "/"

  BudgetId root() const { return 0; }
  // Adds a child of `parent` with the given share. Names are [A-Za-z0-9._-]+, unique among
  // siblings.
  Result<BudgetId> add(BudgetId parent, std::string_view name, double share);
  // Adds every missing node along `path` (e.g. "/ai/nlp/olmo"), each with share 1 unless it exists.
  Result<BudgetId> ensure_path(std::string_view path, double leaf_share = 1.0);
  Status set_share(BudgetId id, double share);
  Status set_cluster_share(BudgetId id, ClusterId cluster, std::optional<double> share);
  // Removes a leaf (its id is kept, marked removed, so existing usage records stay meaningful).
  Status remove(BudgetId id);

  std::optional<BudgetId> find(std::string_view path) const;
  const BudgetNode& node(BudgetId id) const { return nodes_.at(id); }
  // node(id).parent, from a dense array: the walks up a path (funding, ranking) read only this.
  BudgetId parent(BudgetId id) const { return parents_[id]; }
  std::size_t size() const { return nodes_.size(); }
  bool is_leaf(BudgetId id) const;
  bool valid(BudgetId id) const { return id < live_.size() && live_[id]; }
  // Root first, then down to `id`.
  std::vector<BudgetId> path_to(BudgetId id) const;
  // Weight of `id` for `cluster` (its per-cluster share if set, else its share).
  double share_for(BudgetId id, ClusterId cluster) const;
  // The product of normalised shares from the root down to `id`, for `cluster`. Root = 1.
  double allocated_fraction(BudgetId id, ClusterId cluster) const;
  // Every node's allocated fraction for `cluster`, indexed by BudgetId.
  std::vector<double> allocated_fractions(ClusterId cluster) const;
  // The lowest common ancestor of two nodes.
  BudgetId common_ancestor(BudgetId a, BudgetId b) const;
  // The ancestor of `id` (or `id` itself) that is a child of `ancestor`; `id` if id == ancestor.
  BudgetId child_on_path(BudgetId ancestor, BudgetId id) const;

  // Bumped on every change, so that derived data (fractions) can be cached.
  std::uint64_t version() const { return version_; }

 private:
  std::vector<BudgetNode> nodes_;
  std::vector<BudgetId> parents_;  // nodes_[i].parent (a node's parent never changes)
  std::vector<char> live_;         // !nodes_[i].removed
  std::uint64_t version_ = 1;
};

}  // namespace allot::core
