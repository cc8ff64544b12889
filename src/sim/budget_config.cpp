#include "sim/budget_config.h"

#include <yaml-cpp/yaml.h>

#include "sim/text_file.h"

namespace allot::sim {
namespace {

// `tree` is built alongside, so that whatever the core's tree refuses (a name that is not a name,
// a sibling given twice, a share that is not finite) is refused here, with its line.
core::Status walk(const YAML::Node& list, const std::string& prefix, const std::string& file,
                  core::BudgetTree& tree, core::BudgetId parent, BudgetConfig& out) {
  if (!list.IsSequence()) {
    return core::Error{file + ":" + std::to_string(list.Mark().line + 1) + ": children",
                       "expected a list of budgets"};
  }
  for (const YAML::Node& b : list) {
    const std::string where = file + ":" + std::to_string(b.Mark().line + 1);
    if (!b.IsMap() || !b["name"]) return core::Error{where + ": name", "every budget needs a name"};
    BudgetEntry e;
    const std::string name = b["name"].as<std::string>();
    e.path = prefix + "/" + name;
    if (b["share"]) e.share = b["share"].as<double>();
    if (!(e.share > 0)) return core::Error{where + ": share", "must be positive"};
    auto id = tree.add(parent, name, e.share);
    if (!id.ok()) return core::Error{where + ": " + id.error().field, id.error().reason};
    out.budgets.push_back(e);
    if (b["children"]) {
      if (auto st = walk(b["children"], e.path, file, tree, id.value(), out); !st.ok()) return st;
    }
  }
  return core::ok_status();
}

}  // namespace

core::Result<BudgetConfig> parse_budget_config(const std::string& text, const std::string& file) {
  BudgetConfig c;
  try {
    const YAML::Node root = YAML::Load(text);
    if (!root.IsMap() || !root["budgets"]) {
      return core::Error{file + ": budgets", "expected a mapping with a 'budgets' list"};
    }
    core::BudgetTree tree;
    if (auto st = walk(root["budgets"], "", file, tree, tree.root(), c); !st.ok()) {
      return st.error();
    }
  } catch (const YAML::Exception& e) {
    return core::Error{file + ":" + std::to_string(e.mark.line + 1) + ": yaml", e.what()};
  }
  if (c.budgets.empty()) return core::Error{file + ": budgets", "the tree is empty"};
  return c;
}

core::Result<BudgetConfig> load_budget_config(const std::string& path) {
  auto text = read_text_file(path, "budget file");
  if (!text.ok()) return text.error();
  return parse_budget_config(text.value(), path);
}

core::Status apply_budgets(const BudgetConfig& config, core::BudgetTree& tree) {
  for (const BudgetEntry& e : config.budgets) {
    const auto slash = e.path.rfind('/');
    const std::string parent_path = slash == 0 ? "/" : e.path.substr(0, slash);
    const auto parent = tree.find(parent_path);
    if (!parent) return core::Error{e.path, "parent budget not found"};
    if (auto existing = tree.find(e.path)) {
      if (auto st = tree.set_share(*existing, e.share); !st.ok()) return st;
      continue;
    }
    auto r = tree.add(*parent, e.path.substr(slash + 1), e.share);
    if (!r.ok()) return core::Error{e.path + ": " + r.error().field, r.error().reason};
  }
  return core::ok_status();
}

}  // namespace allot::sim
