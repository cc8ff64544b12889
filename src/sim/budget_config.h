// A budget tree as YAML: each budget has a name, a share among its siblings, and children.
//
//   budgets:
//     - name: ai
//       share: 3
//       children:
//         - {name: nlp, share: 2}
//         - {name: vision, share: 1}
//     - {name: infra, share: 1}
//
// Jobs name their leaf by path: "/ai/nlp".
#pragma once

#include <string>
#include <vector>

#include "core/budget_tree.h"
#include "core/status.h"

namespace allot::sim {

struct BudgetEntry {
  std::string path;  // "/ai/nlp"
  double share = 1.0;
};

// Parents before children, siblings in file order.
struct BudgetConfig {
  std::vector<BudgetEntry> budgets;
};

core::Result<BudgetConfig> load_budget_config(const std::string& path);
core::Result<BudgetConfig> parse_budget_config(const std::string& yaml_text,
                                               const std::string& file_name);
core::Status apply_budgets(const BudgetConfig& config, core::BudgetTree& tree);

}  // namespace allot::sim
