// Budgets: creating and changing (share, members, owners, limits, default minimum runtime) and
// removing, each change audited; and users' own submission limits.
#include "server/controller.h"
#include "server/controller_internal.h"

namespace allot::server {

namespace {
std::string joined(const std::vector<std::string>& v) {
  std::string m;
  for (const auto& x : v) m += (m.empty() ? "" : ",") + x;
  return m;
}
// A default minimum runtime as the audit log keeps it: seconds, "" for none set.
std::string min_runtime_words(std::int64_t seconds) {
  return seconds < 0 ? std::string() : std::to_string(seconds);
}
}  // namespace

store::UserLimitsRecord Controller::set_user_limits(const std::string& user,
                                                    const std::string& limits,
                                                    const std::string& actor,
                                                    std::int64_t actor_token) {
  return call<store::UserLimitsRecord>([&] {
    const Time now = options_.clock();
    auto it = user_limits_.find(user);
    const std::string before = it == user_limits_.end() ? std::string() : it->second;
    WriteBatch batch{
        op::PutUserLimits{{user, limits}},
        op::AddAudit{{0, now, actor, "/", "user_limits " + user, before, limits, actor_token}}};
    if (limits.empty()) {
      user_limits_.erase(user);
    } else {
      user_limits_[user] = limits;
    }
    write(std::move(batch));
    publish();
    return store::UserLimitsRecord{user, limits};
  });
}

core::Result<store::BudgetRecord> Controller::set_budget(
    const std::string& path, std::optional<double> share,
    std::optional<std::vector<std::string>> members, const std::string& actor,
    std::optional<std::vector<std::string>> owners, std::int64_t actor_token,
    std::optional<std::string> submit_limits, std::optional<std::int64_t> default_min_runtime) {
  return call<core::Result<store::BudgetRecord>>([&]() -> core::Result<store::BudgetRecord> {
    const Time now = options_.clock();
    auto& tree = sched_.budgets();
    WriteBatch batch;
    auto existing = tree.find(path);
    if (!existing) {
      // Create the missing nodes along the path, each recorded.
      std::string cur;
      std::size_t start = 1;
      while (start <= path.size()) {
        auto slash = path.find('/', start);
        if (slash == std::string::npos) slash = path.size();
        cur = path.substr(0, slash);
        if (!tree.find(cur)) {
          const bool leaf = slash == path.size();
          auto parent =
              tree.find(cur.substr(0, cur.rfind('/')).empty() ? std::string("/")
                                                              : cur.substr(0, cur.rfind('/')));
          auto id =
              tree.add(*parent, cur.substr(cur.rfind('/') + 1), leaf ? share.value_or(1.0) : 1.0);
          if (!id.ok()) return id.error();
          store::BudgetRecord r{cur, leaf ? share.value_or(1.0) : 1.0, {}, false, {}, "", -1};
          if (leaf && members) r.members = *members;
          if (leaf && owners) r.owners = *owners;
          if (leaf && submit_limits) r.submit_limits = *submit_limits;
          if (leaf && default_min_runtime) r.default_min_runtime = *default_min_runtime;
          budgets_[cur] = r;
          batch.push_back(op::PutBudget{r});
          batch.push_back(op::AddAudit{
              {0, now, actor, cur, "created", "", "share " + json(r.share).dump(), actor_token}});
        }
        start = slash + 1;
      }
      if (members && !members->empty()) {
        batch.push_back(
            op::AddAudit{{0, now, actor, path, "members", "", joined(*members), actor_token}});
      }
      if (owners && !owners->empty()) {
        batch.push_back(
            op::AddAudit{{0, now, actor, path, "owners", "", joined(*owners), actor_token}});
      }
      if (submit_limits && !submit_limits->empty()) {
        batch.push_back(
            op::AddAudit{{0, now, actor, path, "submit_limits", "", *submit_limits, actor_token}});
      }
      if (default_min_runtime && *default_min_runtime >= 0) {
        batch.push_back(op::AddAudit{{0, now, actor, path, "default_min_runtime", "",
                                      min_runtime_words(*default_min_runtime), actor_token}});
      }
    } else {
      auto& r = budgets_[path];
      r.path = path;
      r.removed = false;
      if (share) {
        auto st = tree.set_share(*existing, *share);
        if (!st.ok()) return st.error();
        batch.push_back(op::AddAudit{{0, now, actor, path, "share", json(r.share).dump(),
                                      json(*share).dump(), actor_token}});
        r.share = *share;
      }
      if (members) {
        batch.push_back(op::AddAudit{
            {0, now, actor, path, "members", joined(r.members), joined(*members), actor_token}});
        r.members = *members;
      }
      if (owners) {
        batch.push_back(op::AddAudit{
            {0, now, actor, path, "owners", joined(r.owners), joined(*owners), actor_token}});
        r.owners = *owners;
      }
      if (submit_limits) {
        batch.push_back(op::AddAudit{
            {0, now, actor, path, "submit_limits", r.submit_limits, *submit_limits, actor_token}});
        r.submit_limits = *submit_limits;
      }
      if (default_min_runtime) {
        batch.push_back(op::AddAudit{{0, now, actor, path, "default_min_runtime",
                                      min_runtime_words(r.default_min_runtime),
                                      min_runtime_words(*default_min_runtime), actor_token}});
        r.default_min_runtime = *default_min_runtime;
      }
      batch.push_back(op::PutBudget{r});
    }
    write(std::move(batch));
    dirty_ = true;
    publish();
    return budgets_[path];
  });
}

core::Result<std::vector<std::string>> Controller::remove_budget(const std::string& path,
                                                                 const std::string& actor,
                                                                 std::int64_t actor_token) {
  using R = core::Result<std::vector<std::string>>;
  return call<R>([&]() -> R {
    auto& tree = sched_.budgets();
    auto id = tree.find(path);
    if (!id || *id == tree.root()) return Error{"path", "no budget " + path};
    std::size_t busy = 0;
    for (const auto& [jid, a] : active_) {
      if (a.rec.budget == path ||
          (a.rec.budget.size() > path.size() && a.rec.budget.compare(0, path.size(), path) == 0 &&
           a.rec.budget[path.size()] == '/')) {
        ++busy;
      }
    }
    if (busy > 0) {
      return Error{"path", std::to_string(busy) + " job" + (busy == 1 ? " is" : "s are") +
                               " queued or running in " + path +
                               ": cancel them or wait for them to end"};
    }
    // Deepest first: the tree removes leaves only.
    std::vector<core::BudgetId> order;
    std::vector<core::BudgetId> stack{*id};
    while (!stack.empty()) {
      auto b = stack.back();
      stack.pop_back();
      order.push_back(b);
      for (auto c : tree.node(b).children) {
        if (tree.valid(c)) stack.push_back(c);
      }
    }
    const Time now = options_.clock();
    WriteBatch batch;
    std::vector<std::string> removed;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const std::string p = tree.node(*it).path;
      if (auto st = tree.remove(*it); !st.ok()) return st.error();
      auto& r = budgets_[p];
      r.path = p;
      r.removed = true;
      batch.push_back(op::PutBudget{r});
      batch.push_back(op::AddAudit{
          {0, now, actor, p, "removed", "share " + json(r.share).dump(), "", actor_token}});
      removed.push_back(p);
    }
    write(std::move(batch));
    dirty_ = true;
    publish();
    return removed;
  });
}

}  // namespace allot::server
