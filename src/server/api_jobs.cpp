// Jobs over HTTP: submitting (answered from the event loop, see submit()), listing, reading one,
// cancelling, and why it waits, its events and its telemetry. Its logs are in api_logs.cpp.

#include <algorithm>
#include <future>
#include <iterator>

#include "server/api_impl.h"
#include "server/job_array.h"
#include "server/lifecycle.h"
#include "server/telemetry.h"

namespace allot::server {

namespace {

// An array submission's answer: the array's id (its first job's) and every task.
std::string array_text(const std::vector<std::pair<store::JobRecord, core::JobSpec>>& jobs) {
  std::string out = "{\"array_job_id\":" + std::to_string(jobs.front().first.id) + ",\"jobs\":[";
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (i) out += ',';
    append_job(out, jobs[i].first);
  }
  return out + "]}";
}

}  // namespace

ApiServer::Impl::GateFields ApiServer::Impl::gate_fields(const Principal& p, json& body) {
  GateFields g;
  if (!body.is_object()) return g;
  if (auto h = body.find("hold"); h != body.end()) {
    if (!h->is_boolean()) throw HttpError{400, "hold", "must be true or false"};
    g.hold = h->get<bool>();
    body.erase(h);
  }
  for (const char* field : {"after", "after_any"}) {
    auto f = body.find(field);
    if (f == body.end()) continue;
    if (!f->is_array() || f->size() > 64) {
      throw HttpError{400, field, "must be a list of at most 64 job ids"};
    }
    auto& ids = std::string(field) == "after" ? g.after : g.after_any;
    for (const auto& v : *f) {
      if (!v.is_number_unsigned() || v.get<std::uint64_t>() == 0) {
        throw HttpError{400, field, "must be a list of job ids"};
      }
      const auto id = v.get<JobId>();
      auto dep = store->job(id);
      if (!dep || !can_see_job(p, *dep)) {
        throw HttpError{400, field, "no job " + std::to_string(id) + " that you can see"};
      }
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    body.erase(f);
  }
  if (auto a = body.find("array"); a != body.end()) {
    if (!a->is_string()) throw HttpError{400, "array", "must be a string such as \"0-99%4\""};
    auto parsed = parse_array(a->get<std::string>());
    if (!parsed.ok()) check(parsed.error());
    g.array = std::move(parsed.value());
    body.erase(a);
  }
  return g;
}

namespace {

// A JSON object's text with the fields of `extra` added ("hint": a submission hint;
// "min_runtime_default": the budget default the job got). Unchanged when there are none.
std::string with_fields(std::string text, const json& extra) {
  if (extra.empty()) return text;
  const auto end = text.rfind('}');
  if (end == std::string::npos) return text;
  std::string add;
  for (const auto& [k, v] : extra.items()) add += "," + json(k).dump() + ":" + v.dump();
  text.replace(end, 1, add + "}");
  return text;
}

}  // namespace

std::shared_ptr<WaitingHold> ApiServer::Impl::reserve_waiting(const std::string& who,
                                                              const SubmitLimits& limits,
                                                              const std::string& waiting_in,
                                                              std::int64_t n) {
  // In a budget with a max_waiting of its own: the owner's jobs there and below; else all of the
  // owner's jobs against the server's. And over all budgets, whatever a budget allows: the
  // server's max_waiting_total (0: no limit), which also caps the server's max_waiting.
  const std::int64_t total = limits.max_waiting_total;
  std::int64_t most = limits.max_waiting;
  if (waiting_in.empty() && total > 0 && (most <= 0 || total < most)) most = total;
  const std::string key = waiting_in.empty() ? who : who + " " + waiting_in;
  auto count = [](const std::map<std::string, std::int64_t>& m, const std::string& k) {
    auto w = m.find(k);
    return w == m.end() ? std::int64_t{0} : w->second;
  };
  std::vector<SubmitQuota::WaitingCap> caps;
  int over = SubmitQuota::kStale;
  // A snapshot older than one the quota counted from already is read again (the newest is).
  while (over == SubmitQuota::kStale) {
    const auto snap = ctl->snapshot();
    caps.clear();
    const auto& counts = waiting_in.empty() ? snap->waiting_by_owner : snap->waiting_by_owner_in;
    if (most > 0) caps.push_back({key, count(counts, key), most});
    if (!waiting_in.empty() && total > 0) {
      caps.push_back({who, count(snap->waiting_by_owner, who), total});
    }
    if (caps.empty()) return nullptr;
    over = quota.reserve_waiting(caps, n, snap->submits_taken);
  }
  if (over >= 0) {
    const bool over_all = !waiting_in.empty() && caps[static_cast<std::size_t>(over)].key == who;
    throw HttpError{429, "",
                    over_all
                        ? who + " has " + std::to_string(total) +
                              " jobs waiting over all budgets, the most allowed: submit "
                              "more as they start"
                        : who + " has " + std::to_string(most) + " jobs waiting, the most allowed" +
                              (waiting_in.empty() ? std::string() : " in " + waiting_in) +
                              ": submit more as they start",
                    30};
  }
  std::vector<std::string> keys;
  keys.reserve(caps.size());
  for (const auto& c : caps) keys.push_back(c.key);
  return std::make_shared<WaitingHold>(quota, std::move(keys), n);
}

void ApiServer::Impl::submit(const httplib::Request& req, EventServer::Reply reply) {
  httplib::Response res;
  bool written = false;
  answering(res, [&] {
    refuse_at_edge(req);
    auto p = authenticate(req);
    not_agent(p);
    const bool limited = !p.is_admin();
    refuse_deep(req.body);
    auto body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw HttpError{400, "body", "is not valid JSON"};
    if (body.is_object() && !body.contains("idempotency_key") &&
        req.has_header("Idempotency-Key")) {
      body["idempotency_key"] = req.get_header_value("Idempotency-Key");
    }
    // Slurm's habits, kept out of the spec: hold, dependencies and arrays (server/job_array.h).
    const auto gate = gate_fields(p, body);
    auto snap = ctl->snapshot();
    // No minimum runtime asked: the nearest budget's default, if one sets it (docs/policy.md §2,
    // "Default minimum runtime"); the reply says which applied.
    const auto dflt = apply_default_min_runtime(body, snap->default_min_runtime, snap->policy);
    auto parsed = parse_job_request(body, *snap->catalog, snap->cluster_ids, *snap->budgets,
                                    snap->policy, JobSpecLimits{}, snap->node_shapes);
    if (!parsed.ok()) check(parsed.error());
    auto& pj = parsed.value();
    require(can_submit(p, pj.budget, snap->members),
            "submit to " + pj.budget + " (ask its manager to add you as a member)");
    // The limits of the nearest budget on the path that has its own (set by an administrator),
    // with a token bucket of its own per user; else the server's.
    // A user with limits of their own (POST /submit-limits) has them in place of the server's.
    SubmitLimits limits = quota.limits();
    if (auto u = snap->user_limits.find(p.subject); limited && u != snap->user_limits.end()) {
      limits = overlay_limits(limits, u->second, /*user=*/true);
    }
    std::string bucket = p.subject, where;
    std::string waiting_in;  // the budget whose own max_waiting counts the jobs in it
    for (std::string b = pj.budget; limited && !b.empty() && b != "/";
         b = b.substr(0, b.rfind('/'))) {
      auto l = snap->submit_limits.find(b);
      if (l == snap->submit_limits.end()) continue;
      limits = overlay_limits(limits, l->second);
      const auto own = json::parse(l->second, nullptr, false);
      if (own.is_object() && own.contains("max_waiting")) waiting_in = b;
      bucket = p.subject + " " + b;  // a space: in no name, so no principal's own bucket
      where = " in " + b;
      break;
    }
    if (const int wait = limited ? quota.take(bucket, SubmitQuota::Clock::now(), limits) : 0) {
      throw HttpError{429, "",
                      p.subject + " is over the submission rate" + where + ": " +
                          number_text(limits.rate) + " a second, bursts of " +
                          number_text(limits.burst),
                      wait};
    }
    // A request that no node could ever hold is refused now rather than waiting forever. A
    // command left out altogether stays accepted (API clients that run on simulated nodes);
    // one given empty (the CLI sends [] when none follows "--") is a mistake.
    const auto cmd = body.find("command");
    const bool command_empty =
        cmd != body.end() && cmd->is_array() &&
        (cmd->empty() || !(*cmd)[0].is_string() || (*cmd)[0].get<std::string>().empty());
    std::vector<std::string> cluster_names;
    for (const auto& c : snap->clusters) cluster_names.push_back(c.name);
    if (auto fits = check_satisfiable(pj.spec, command_empty, snap->node_shapes, *snap->catalog,
                                      cluster_names);
        !fits.ok()) {
      check(fits.error());
    }
    // Every task of an array waits: each counts. Reserved here, handed over once written (or
    // given back when the submission is refused after all).
    const std::int64_t tasks_asked = gate.array ? std::ssize(gate.array->indices) : 1;
    std::shared_ptr<WaitingHold> waiting_hold;
    try {
      if (limited) waiting_hold = reserve_waiting(p.subject, limits, waiting_in, tasks_asked);
    } catch (const HttpError& e) {
      // A retry of a submission that was accepted (its answer lost) is answered with the job it
      // made, even at the cap: the write below finds the key taken and says which job it is.
      if (e.status != 429 || pj.idempotency_key.empty() ||
          !store->job_by_key(p.subject, pj.idempotency_key)) {
        throw;
      }
    }
    // No look-up first: the store's unique (owner, key) index refuses a second job with the
    // key, and only then is the existing job read (a retried submit is the rare case). An array
    // is one write of all its tasks: task i > 0 has the key "KEY[i]".
    const std::size_t tasks = gate.array ? gate.array->indices.size() : 1;
    auto jobs = std::make_shared<std::vector<std::pair<store::JobRecord, core::JobSpec>>>(tasks);
    store::WriteBatch batch;
    batch.reserve(tasks);
    const Time now = ctl->now();
    for (std::size_t i = 0; i < tasks; ++i) {
      auto& [rec, spec] = (*jobs)[i];
      rec.id = ctl->next_job_id();
      rec.owner = p.subject;
      rec.idempotency_key = pj.idempotency_key;
      rec.name = pj.name;
      rec.budget = pj.budget;
      rec.spec_json = pj.canonical_json;
      rec.state = "pending";
      rec.reason = "submitted";
      rec.submit_time = now;
      rec.updated_at = now;
      rec.held_by = gate.hold ? p.subject : "";
      if (gate.hold) rec.reason = "submitted, held by " + p.subject;
      rec.after = gate.after;
      rec.after_any = gate.after_any;
      if (gate.array) {
        const int index = gate.array->indices[i];
        rec.array_job = (*jobs)[0].first.id;
        rec.array_index = index;
        rec.array_limit = gate.array->limit;
        rec.name =
            (pj.name.empty() ? std::string("array") : pj.name) + "[" + std::to_string(index) + "]";
        if (i > 0) rec.idempotency_key += "[" + std::to_string(index) + "]";
      }
      spec = i + 1 < tasks ? pj.spec : std::move(pj.spec);
      spec.id = rec.id;
      spec.owner = rec.owner;
      spec.submit_time = rec.submit_time;
      // Its creation event ("" -> pending, "submitted", at submit_time) comes with the row.
      batch.push_back(op::InsertJob{rec});
    }
    const bool array = gate.array.has_value();
    // Never a refusal: a hint when the budget's recent jobs of this shape used much less.
    std::string hint =
        submission_hint(json::parse(pj.canonical_json, nullptr, false),
                        shape_history.recent(pj.budget, pj.canonical_json), opts.advice);
    json extra = json::object();
    if (!hint.empty()) extra["hint"] = hint;
    if (dflt) extra["min_runtime_default"] = {{"seconds", dflt->seconds}, {"from", dflt->from}};
    // An interactive session: what this server gives it (docs/policy.md sections 6 and 9; both
    // 0 when the rules are off), for the contract the CLI prints.
    if (pj.spec.kind == core::JobKind::Interactive) {
      extra["interactive"] = {{"allowance_gpus", snap->policy.interactive_gpus_per_user},
                              {"protection_seconds", snap->policy.interactive_protection},
                              {"stop_grace_seconds", snap->policy.interactive_stop_grace}};
    }
    store->write_async(std::move(batch), [this, jobs, array, reply, extra = std::move(extra),
                                          waiting_hold = std::move(waiting_hold)](core::Status st) {
      httplib::Response res;
      answering(res, [&] {
        auto& [rec, spec] = jobs->front();
        if (st.ok()) {
          send_text(res, 201, with_fields(array ? array_text(*jobs) : job_text(rec), extra));
          std::uint64_t last = 0;
          for (auto& [r, s] : *jobs) last = ctl->submitted(std::move(r), std::move(s));
          if (waiting_hold) waiting_hold->handed_over(last);
          // Durable and readable now: the dashboard's pages read the queue again.
          if (opts.changes) opts.changes->publish(ChangeFeed::kJobs);
        } else {
          auto existing = st.error().field == "idempotency_key"
                              ? store->job_by_key(rec.owner, rec.idempotency_key)
                              : std::nullopt;
          if (!existing) throw HttpError{503, "store", st.error().reason};
          const bool same_array =
              array ? existing->array_job == existing->id : existing->array_job == 0;
          if (existing->spec_json != rec.spec_json || existing->budget != rec.budget ||
              !same_array) {
            throw HttpError{409, "idempotency_key",
                            "already used for job " + std::to_string(existing->id) +
                                " with a different request"};
          }
          if (!array) {
            send_text(res, 200, job_text(*existing));
            return;
          }
          // The array it made: each task by its key.
          std::vector<std::pair<store::JobRecord, core::JobSpec>> made;
          made.emplace_back(*existing, core::JobSpec{});
          for (std::size_t i = 1; i < jobs->size(); ++i) {
            const auto& key = (*jobs)[i].first.idempotency_key;
            auto task = store->job_by_key(rec.owner, key);
            if (!task || task->array_job != existing->id) {
              throw HttpError{409, "idempotency_key",
                              "already used for job " + std::to_string(existing->id) +
                                  " with a different request"};
            }
            made.emplace_back(*task, core::JobSpec{});
          }
          send_text(res, 200, array_text(made));
        }
      });
      reply(std::move(res));
    });
    written = true;
  });
  if (!written) reply(std::move(res));
}

void ApiServer::Impl::install_job_routes() {
  // Answered by submit(): from the event loop at once, without waiting for the commit; here for
  // HTTPS (a thread per connection) and any such request the loop passes on (with a query).
  route("POST", "/api/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    std::promise<httplib::Response> answer;
    auto answered = answer.get_future();
    submit(req, [&answer](httplib::Response r) { answer.set_value(std::move(r)); });
    res = answered.get();
  });

  route("GET", "/api/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    not_agent(p);
    check_query(req, {"state", "owner", "budget", "after", "limit", "order"});
    store::JobQuery q;
    if (req.has_param("state")) {
      const auto v = req.get_param_value("state");
      std::size_t start = 0;
      while (start <= v.size()) {
        auto comma = v.find(',', start);
        if (comma == std::string::npos) comma = v.size();
        auto s = v.substr(start, comma - start);
        if (!parse_job_status(s)) throw HttpError{400, "state", "unknown state '" + s + "'"};
        q.states.push_back(s);
        start = comma + 1;
      }
    }
    q.owner = req.get_param_value("owner");
    if (!q.owner.empty() && !valid_name(q.owner)) throw HttpError{400, "owner", "not a user name"};
    q.budget = req.get_param_value("budget");
    if (!q.budget.empty() && !valid_budget_path(q.budget)) {
      throw HttpError{400, "budget", "not a budget path"};
    }
    if (!q.budget.empty()) {
      // A budget without children (now or ever: removed ones included) is matched exactly.
      const auto& tree = *ctl->snapshot()->budgets;
      bool children = false;
      for (core::BudgetId id = 0; id < tree.size() && !children; ++id) {
        const auto& n = tree.node(id);
        children = n.path.size() > q.budget.size() &&
                   n.path.compare(0, q.budget.size(), q.budget) == 0 &&
                   n.path[q.budget.size()] == '/';
      }
      q.budget_subtree = children;
    }
    q.after = static_cast<JobId>(query_int(req, "after", 0, 0, INT64_MAX));
    q.limit = static_cast<int>(query_int(req, "limit", 100, 1, 1000));
    auto order = req.get_param_value("order");
    if (!order.empty() && order != "asc" && order != "desc") {
      throw HttpError{400, "order", "must be asc or desc"};
    }
    q.descending = order == "desc";
    const std::string owner_asked = q.owner;
    only_visible_jobs(p, owner_asked, q);
    auto rows = store->jobs(q);
    std::string out = "{\"jobs\":[";
    out.reserve(rows.size() * 600 + 64);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (i) out += ',';
      append_job(out, rows[i]);
    }
    out += "],\"next\":";
    out += static_cast<int>(rows.size()) == q.limit ? std::to_string(rows.back().id) : "null";
    out += '}';
    send_text(res, 200, out);
  });

  route("GET", "/api/v1/jobs/{id}", [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    send_text(res, 200, job_text(visible_job(p, req.matches[1])));
  });

  route("POST", "/api/v1/jobs/{id}/cancel",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          auto body = parse_body(req, {"reason"}, true);
          auto reason = str_field(body, "reason", false, 512);
          auto j = visible_job(p, req.matches[1]);
          auto r = ctl->cancel(j.id,
                               "cancelled by " + acting(p) + (reason.empty() ? "" : ": " + reason));
          if (!r.ok()) check(r.error(), 409);
          send_text(res, 200, job_text(r.value()));
        });

  // Slurm's scontrol hold / release: the owner, a manager of the job's budget or an
  // administrator (whoever may see the job); only a waiting job (409 otherwise).
  for (const bool holding : {true, false}) {
    route("POST", holding ? "/api/v1/jobs/{id}/hold" : "/api/v1/jobs/{id}/release",
          [this, holding](const httplib::Request& req, httplib::Response& res) {
            auto p = authenticate(req);
            not_agent(p);
            parse_body(req, {}, true);
            auto j = visible_job(p, req.matches[1]);
            auto r = holding ? ctl->hold(j.id, p.subject) : ctl->release(j.id, p.subject);
            if (!r.ok()) check(r.error(), 409);
            send_text(res, 200, job_text(r.value()));
          });
  }

  route("GET", "/api/v1/jobs/{id}/why",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          auto j = visible_job(p, req.matches[1]);
          auto snap = ctl->snapshot();
          json out = {{"id", j.id}, {"state", j.state}};
          const bool queued = j.state == "pending" || j.state == "requeued";
          // The explanation holds if the job has not changed since the cycle that gave it.
          auto it = snap->why->find(j.id);
          if (queued && !j.held_by.empty()) {  // told at once, not at the next cycle
            out["code"] = "held";
            out["explanation"] = "held (by " + j.held_by + "): 'allot release " +
                                 std::to_string(j.id) + "' lets it be scheduled";
          } else if (queued && it != snap->why->end() && j.updated_at <= snap->explained_at) {
            out["code"] = it->second.code;
            out["explanation"] = it->second.text;
            out["rank"] = it->second.rank;
            out["funded"] = it->second.funded;
            out["expected_start"] = it->second.expected_start == core::kNever
                                        ? json(nullptr)
                                        : json(it->second.expected_start);
          } else if (queued) {
            out["code"] = "not-yet-considered";
            out["explanation"] =
                "submitted after the last scheduling cycle; the next one considers it";
          } else {
            out["code"] = j.state;
            out["explanation"] = j.reason;
          }
          send(res, 200, out);
        });

  route("GET", "/api/v1/jobs/{id}/events",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          auto j = visible_job(p, req.matches[1]);
          json out = {{"id", j.id}, {"events", json::array()}};
          for (const auto& e : store->job_events(j.id)) {
            out["events"].push_back(
                {{"time", e.time}, {"from", e.from}, {"to", e.to}, {"reason", e.reason}});
          }
          send(res, 200, out);
        });

  route("GET", "/api/v1/jobs/{id}/telemetry",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {});
          auto j = visible_job(p, req.matches[1]);
          auto snap = ctl->snapshot();
          json out = {{"id", j.id},
                      {"run", j.runs},
                      {"current", nullptr},
                      {"total", nullptr},
                      {"flags", json::array()},
                      {"advice", json::array()},
                      {"samples", json::array()}};
          // The current run's recent points, as the agents reported them (in memory only).
          for (const auto& pt : telemetry_series.points(j.id, j.runs)) {
            out["samples"].push_back({{"time", pt.time},
                                      {"gpu_util_pct", pt.gpu_util_pct},
                                      {"mem_used_mib", pt.mem_used_mib},
                                      {"mem_total_mib", pt.mem_total_mib}});
          }
          const auto spec = parsed_or(j.spec_json, json::object());
          for (const auto& t : store->telemetry(j.id)) {
            if (t.run == 0) {
              out["total"] = telemetry_json(t);
              // The same advice as GET /advice: over every run of the job.
              for (const auto& a : job_advice(t, spec, *snap->catalog, opts.advice)) {
                json i = {{"reason", a.reason}, {"hint", a.hint}};
                if (!a.suggestion.empty()) i["suggestion"] = a.suggestion;
                out["advice"].push_back(std::move(i));
              }
            }
            if (t.run != j.runs || j.runs == 0) continue;
            out["current"] = telemetry_json(t);
            for (const auto& f : telemetry_flags(t, spec, *snap->catalog)) {
              out["flags"].push_back({{"flag", f.flag}, {"hint", f.hint}});
            }
          }
          send(res, 200, out);
        });
}

}  // namespace allot::server
