// Read-only views the dashboard (web/) needs that no other route gives in one request: every
// GPU's state (GET /gpus) and the waiting queue in fair-share order with each job's reason
// (GET /queue). Both are aggregates over what the caller may see anyway; job ids of jobs it may
// not see are never shown.

#include <algorithm>
#include <map>

#include "core/drain.h"
#include "server/api_impl.h"

namespace allot::server {

namespace {

// The GPU states, in the order the dashboard lists them.
constexpr const char* kGpuStates[] = {"allocated", "unallocated", "idle", "draining", "down"};

// What holds one GPU of a node.
struct Held {
  std::int64_t milli = 0;
  bool allocated = false;      // some holder runs allocated (a shared GPU counts as allocated then)
  std::vector<JobId> visible;  // the holders the caller may see
  int hidden = 0;              // and how many it may not
};

// A waiting job as GET /queue lists it.
struct QueueRow {  // NOLINT(bugprone-exception-escape): misreads nlohmann::json's noexcept move
  store::JobRecord job;
  json spec;                     // its canonical spec, parsed
  const WhyInfo* why = nullptr;  // null: not explained yet
};

std::string job_kind(const json& spec) {
  auto k = spec.find("kind");
  return k != spec.end() && k->is_string() ? k->get<std::string>() : "batch";
}

}  // namespace

void ApiServer::Impl::install_view_routes() {
  route("GET", "/api/v1/gpus", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    check_query(req, {});
    auto snap = ctl->snapshot();
    store::JobQuery q;
    q.states = {"starting", "running", "preempting"};
    q.limit = 1 << 20;  // at most one job per GPU slice: bounded by the cluster's size
    std::map<std::pair<std::string, int>, Held> held;
    // Per budget, GPUs (in milli) held by running jobs, by class; summed up to the root.
    std::map<std::string, std::pair<std::int64_t, std::int64_t>> by_budget;
    // node -> when its last job leaves: the latest expected end of a job on it; on a draining
    // node a job leaves by its drain deadline at the latest (docs/policy.md §9: its minimum
    // runtime from its start, or its protection's end if allocated), so that ETA is kept apart.
    std::map<std::string, Time> free_eta, drain_eta;
    for (const auto& j : store->jobs(q)) {
      const bool visible = can_see_job(p, j);
      const auto spec = parsed_or(j.spec_json, json::object());
      const auto dur = spec.find("expected_duration");
      const Time end = dur != spec.end() && dur->is_number_integer()
                           ? j.run_start + dur->get<Time>()
                           : core::kNever;
      const auto m = spec.find("min_runtime");
      const Time deadline = core::drain_deadline(
          j.run_start, m != spec.end() && m->is_number_integer() ? m->get<Time>() : 0, j.allocated,
          j.protected_until);
      const Time drained = std::min(end, deadline);
      std::int64_t total = 0;
      for (const auto& s : parsed_or(j.placement_json, json::array())) {
        if (!s.is_object() || !s.contains("node") || !s.contains("gpu")) continue;
        const std::string node = s["node"].get<std::string>();
        auto& h = held[{node, s["gpu"].get<int>()}];
        const std::int64_t m = s.value("milli", std::int64_t{core::kWholeGpu});
        h.milli += m;
        total += m;
        h.allocated = h.allocated || j.allocated;
        if (visible) {
          h.visible.push_back(j.id);
        } else {
          ++h.hidden;
        }
        auto [eta, fresh] = free_eta.try_emplace(node, end);
        if (!fresh) eta->second = std::max(eta->second, end);  // kNever (unknown) is the latest
        auto [deta, dfresh] = drain_eta.try_emplace(node, drained);
        if (!dfresh) deta->second = std::max(deta->second, drained);
      }
      for (std::string b = j.budget; !b.empty();) {
        auto& [a, u] = by_budget[b];
        (j.allocated ? a : u) += total;
        if (b == "/") break;
        const auto slash = b.rfind('/');
        b = slash == 0 ? "/" : b.substr(0, slash);
      }
    }
    json nodes = json::array();
    std::map<std::pair<std::string, std::string>, std::map<std::string, int>> by_model;
    for (const auto& n : store->nodes()) {
      const bool down = n.health == "down" || n.health == "unhealthy";
      const bool draining = n.health == "draining" || n.cordoned;
      json gpus = json::array();
      int busy = 0;
      auto& counts = by_model[{n.cluster, n.model}];
      for (int i = 0; i < n.gpus; ++i) {
        auto it = held.find({n.name, i});
        const Held none;
        const Held& h = it == held.end() ? none : it->second;
        const char* state = down          ? "down"
                            : h.milli > 0 ? (h.allocated ? "allocated" : "unallocated")
                            : draining    ? "draining"
                                          : "idle";
        if (h.milli > 0) ++busy;
        ++counts[state];
        gpus.push_back({{"index", i},
                        {"state", state},
                        {"milli", h.milli},
                        {"jobs", h.visible},
                        {"other_jobs", h.hidden}});
      }
      const auto& etas = n.health == "draining" ? drain_eta : free_eta;
      auto eta = etas.find(n.name);
      nodes.push_back(
          {{"name", n.name},
           {"cluster", n.cluster},
           {"model", n.model},
           {"health", n.health},
           {"health_reason", n.health_reason},
           {"cordoned", n.cordoned},
           {"draining", draining},
           {"busy_gpus", busy},
           {"drain_eta",
            eta == etas.end() || eta->second == core::kNever ? json(nullptr) : json(eta->second)},
           {"telemetry", parsed_or(ctl->node_telemetry(n.name), json())},
           {"gpus", gpus}});
    }
    json models = json::array();
    for (const auto& [key, counts] : by_model) {
      json m = {{"cluster", key.first}, {"model", key.second}};
      for (const char* s : kGpuStates) m[s] = counts.count(s) ? counts.at(s) : 0;
      models.push_back(m);
    }
    json budgets = json::object();
    for (const auto& [path, am] : by_budget) {
      if (!can_see_budget(p, path, snap->members)) continue;
      budgets[path] = {{"allocated_milli", am.first}, {"unallocated_milli", am.second}};
    }
    // Fragmentation per cluster, as the last explaining cycle left it: counts only.
    json clusters = json::array();
    for (const auto& c : snap->clusters) {
      clusters.push_back({{"name", c.name},
                          {"free_gpus", c.free_gpus},
                          {"largest_waiting_per_node", c.largest_waiting_per_node},
                          {"fragmented_gpus", c.fragmented_gpus}});
    }
    send(res, 200,
         {{"time", snap->now},
          {"explained_at", snap->explained_at},
          {"nodes", nodes},
          {"by_model", models},
          {"clusters", clusters},
          {"budgets", budgets}});
  });

  route("GET", "/api/v1/queue", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    check_query(req, {"budget", "owner", "kind", "limit"});
    const auto budget = req.get_param_value("budget");
    if (!budget.empty() && !valid_budget_path(budget)) {
      throw HttpError{400, "budget", "not a budget path"};
    }
    const auto owner = req.get_param_value("owner");
    if (!owner.empty() && !valid_name(owner)) throw HttpError{400, "owner", "not a user name"};
    const auto kind = req.get_param_value("kind");
    if (!kind.empty() && kind != "batch" && kind != "interactive" && kind != "debug" &&
        kind != "inference") {
      throw HttpError{400, "kind", "must be batch, interactive, debug or inference"};
    }
    const auto limit = static_cast<std::size_t>(query_int(req, "limit", 200, 1, 1000));
    auto snap = ctl->snapshot();
    const auto& why = *snap->why;
    // Reasons over the whole queue: counts only, which name no job.
    std::map<std::string, std::int64_t> by_reason;
    for (const auto& [id, w] : why) ++by_reason[w.code];

    auto matches = [&](const store::JobRecord& j, const json& spec) {
      if (j.state != "pending" && j.state != "requeued") return false;
      if (!can_see_job(p, j)) return false;
      if (!owner.empty() && j.owner != owner) return false;
      if (!budget.empty() && !path_within(j.budget, budget)) return false;
      return kind.empty() || job_kind(spec) == kind;
    };
    std::vector<QueueRow> rows;
    auto explained = [&](const store::JobRecord& j) -> const WhyInfo* {
      auto it = why.find(j.id);
      return it != why.end() && j.updated_at <= snap->explained_at ? &it->second : nullptr;
    };
    bool truncated = false;
    if (p.is_admin() && owner.empty() && budget.empty()) {
      // The queue in rank order, read job by job until the page is full: a page costs its
      // length (and the jobs a kind filter skips), not the length of the queue.
      std::vector<std::pair<std::uint32_t, JobId>> order;
      order.reserve(why.size());
      for (const auto& [id, w] : why) order.emplace_back(w.rank, id);
      std::sort(order.begin(), order.end());
      for (const auto& [rank, id] : order) {
        if (rows.size() == limit) {
          truncated = true;
          break;
        }
        auto j = store->job(id);
        if (!j) continue;
        auto spec = parsed_or(j->spec_json, json::object());
        if (!matches(*j, spec)) continue;
        rows.push_back({std::move(*j), std::move(spec), nullptr});
        rows.back().why = explained(rows.back().job);
      }
      if (!truncated) {  // and then those submitted since the last explaining cycle
        store::JobQuery q;
        q.states = {"pending", "requeued"};
        q.after =
            order.empty() ? 0 : std::max_element(order.begin(), order.end(), [](auto& a, auto& b) {
                                  return a.second < b.second;
                                })->second;
        q.limit = static_cast<int>(limit - rows.size()) + 1;
        for (auto& j : store->jobs(q)) {
          if (why.count(j.id)) continue;
          if (rows.size() == limit) {
            truncated = true;
            break;
          }
          auto spec = parsed_or(j.spec_json, json::object());
          if (matches(j, spec)) rows.push_back({std::move(j), std::move(spec), nullptr});
        }
      }
    } else {
      // What the caller may see (its own jobs, or its budgets'), as GET /jobs reads them; at
      // most 10,000 waiting jobs are ranked.
      store::JobQuery q;
      q.states = {"pending", "requeued"};
      q.owner = owner;
      q.budget = budget;
      q.limit = 10000;
      only_visible_jobs(p, owner, q);
      auto found = store->jobs(q);
      truncated = static_cast<int>(found.size()) == q.limit;
      for (auto& j : found) {
        auto spec = parsed_or(j.spec_json, json::object());
        if (!matches(j, spec)) continue;
        rows.push_back({std::move(j), std::move(spec), nullptr});
        rows.back().why = explained(rows.back().job);
      }
      std::stable_sort(rows.begin(), rows.end(), [](const QueueRow& a, const QueueRow& b) {
        // Explained jobs by rank, then the rest by id (their submission order).
        if (!a.why || !b.why) return a.why && !b.why;
        return a.why->rank < b.why->rank;
      });
      if (rows.size() > limit) {
        rows.resize(limit);
        truncated = true;
      }
    }
    json jobs = json::array();
    for (const auto& r : rows) {
      const auto& j = r.job;
      json o = {{"id", j.id},
                {"name", j.name},
                {"owner", j.owner},
                {"budget", j.budget},
                {"state", j.state},
                {"kind", job_kind(r.spec)},
                {"nodes", r.spec.value("nodes", 1)},
                {"gpus_per_node", r.spec.value("gpus_per_node", 1)},
                {"submit_time", j.submit_time}};
      if (r.why) {
        o["code"] = r.why->code;
        o["explanation"] = r.why->text;
        o["rank"] = r.why->rank;
        o["funded"] = r.why->funded;
        o["expected_start"] =
            r.why->expected_start == core::kNever ? json(nullptr) : json(r.why->expected_start);
      } else {
        o["code"] = "not-yet-considered";
        o["explanation"] = "submitted after the last scheduling cycle; the next one considers it";
        o["rank"] = nullptr;
        o["funded"] = false;
        o["expected_start"] = nullptr;
      }
      jobs.push_back(std::move(o));
    }
    send(res, 200,
         {{"time", snap->now},
          {"explained_at", snap->explained_at},
          {"waiting", why.size()},
          {"by_reason", by_reason},
          {"jobs", jobs},
          {"truncated", truncated}});
  });
}

}  // namespace allot::server
