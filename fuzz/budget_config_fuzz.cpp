// The simulator's budget-tree reader (src/sim/budget_config.cpp) on any YAML. Contract:
// - no exception escapes; a refusal names the file, line and field;
// - an accepted tree has one entry per budget (parents first) with a finite positive share, and
//   builds into a core budget tree holding exactly those budgets with those shares: whatever the
//   tree would refuse, the reader refuses first, naming the line.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "check.h"
#include "core/budget_tree.h"
#include "sim/budget_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = allot::sim::parse_budget_config(text, "budgets.yaml");
  if (!r.ok()) {
    allot::fuzz::check_error(r.error());
    FUZZ_CHECK(r.error().field.rfind("budgets.yaml", 0) == 0, "error without the file: %s",
               r.error().message().c_str());
    return 0;
  }
  const auto& c = r.value();
  FUZZ_CHECK(!c.budgets.empty(), "accepted an empty tree");
  std::set<std::string> seen;
  for (const auto& e : c.budgets) {
    FUZZ_CHECK(e.path.size() > 1 && e.path[0] == '/', "path '%s'", e.path.c_str());
    FUZZ_CHECK(std::isfinite(e.share) && e.share > 0, "%s: share %g", e.path.c_str(), e.share);
    FUZZ_CHECK(seen.insert(e.path).second, "%s given twice", e.path.c_str());
    const auto parent = e.path.substr(0, e.path.rfind('/'));
    FUZZ_CHECK(parent.empty() || seen.count(parent), "%s before its parent", e.path.c_str());
  }
  allot::core::BudgetTree tree;
  auto st = allot::sim::apply_budgets(c, tree);
  FUZZ_CHECK(st.ok(), "accepted, but the tree refuses it: %s", st.error().message().c_str());
  for (const auto& e : c.budgets) {
    auto id = tree.find(e.path);
    FUZZ_CHECK(id && tree.node(*id).share == e.share, "%s missing or with another share",
               e.path.c_str());
  }
  return 0;
}
