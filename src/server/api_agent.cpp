// The agent protocol (docs/agent-protocol.md): a node's assignments, its reports on runs, and its
// GPU and job telemetry. Log uploads are in api_logs.cpp.

#include <map>
#include <regex>
#include <string_view>

#include "server/api_impl.h"

namespace allot::server {

namespace {

// How often an agent checks a replica's readiness, and how long one check may take (seconds).
constexpr int kReadyInterval = 3;
constexpr int kReadyTimeout = 5;

}  // namespace

json ApiServer::Impl::assignments_json(const Snapshot& snap, const std::string& name) const {
  const int grace = ctl->options().stop_grace_seconds;
  json out = {{"node", name},
              {"lease_seconds", ctl->options().lease_seconds},
              {"server_time", ctl->now()},
              {"version", assignment_version(snap, name)},
              {"run", json::array()},
              {"stop", json::array()}};
  auto it = snap.assignments.find(name);
  if (it == snap.assignments.end()) return out;
  static const json kNoSpec = json::object();
  for (const auto& r : it->second.run) {
    const json& spec = r.spec && r.spec->is_object() ? *r.spec : kNoSpec;
    out["run"].push_back({{"job", r.job},
                          {"run", r.run},
                          {"state", r.state},
                          {"gpus", r.gpus},
                          {"gpu_milli", r.milli},
                          {"mig_profile", r.mig_profile},
                          {"command", spec.value("command", json::array())},
                          {"env", spec.value("env", json::object())},
                          {"workdir", spec.value("workdir", "")},
                          {"memory_mib", spec.value("memory_mib", 0)},
                          {"cpus", spec.value("cpus", json(0))},
                          {"container", spec.value("container", "")},
                          {"owner", r.owner},
                          {"budget", r.budget},
                          {"name", r.name},
                          {"kind", spec.value("kind", "batch")},
                          {"resumable", spec.value("resumable", false)},
                          {"grace_seconds", grace},
                          {"rank", r.rank},
                          {"nodes", r.nodes ? json(*r.nodes) : json::array()},
                          {"rendezvous", r.rendezvous}});
    // A service replica's readiness check, and what the server knows of it (null: nothing on
    // this run since the server started: the agent reports its next result).
    if (auto c = spec.find("ready"); c != spec.end() && c->is_object() && !c->empty()) {
      json check = *c;
      check["interval_seconds"] = kReadyInterval;
      check["timeout_seconds"] = kReadyTimeout;
      auto& entry = out["run"].back();
      entry["ready_check"] = std::move(check);
      entry["ready"] = r.ready ? json(*r.ready) : json();
    }
  }
  for (const auto& st : it->second.stop) {
    json stop = {{"job", st.job}, {"run", st.run}, {"grace_seconds", grace}};
    if (st.notice_seconds > 0) stop["notice_seconds"] = st.notice_seconds;
    out["stop"].push_back(std::move(stop));
  }
  // GPUs to re-partition before any run (docs/policy.md section 7.5); absent when none, so that
  // agents older than dynamic MIG see what they always saw.
  if (!it->second.mig_layouts.empty()) {
    json layouts = json::array();
    for (const auto& m : it->second.mig_layouts) {
      layouts.push_back({{"gpu", m.gpu}, {"profiles", m.profiles}});
    }
    out["mig_layouts"] = std::move(layouts);
  }
  return out;
}

namespace {

constexpr const char* kAssignments = "/api/v1/agent/nodes/{name}/assignments";

}  // namespace

ApiServer::Impl::WatchAsk ApiServer::Impl::watch_query(const httplib::Request& req, int max_wait) {
  check_query(req, {"wait", "since"});
  WatchAsk a;
  a.wait = static_cast<int>(query_int(req, "wait", 0, 0, max_wait));
  if (req.has_param("since")) {
    a.since = req.get_param_value("since");
    if (a.since.empty() || a.since.size() > 64 ||
        a.since.find_first_not_of("0123456789abcdef") != std::string::npos) {
      throw HttpError{400, "since", "must be a version this server gave (lowercase hex)"};
    }
  }
  return a;
}

void ApiServer::Impl::install_agent_routes() {
  // ---- the agent protocol ----
  route("GET", kAssignments, [this](const httplib::Request& req, httplib::Response& res) {
    auto p = authenticate(req);
    const auto ask = watch_query(req, opts.watch.max_wait_seconds);
    const auto name = agent_call(req, p);
    json out = assignments_json(*ctl->snapshot(), name);
    if (ask.wait) {
      // Over HTTPS (or a server without watches) a watch is answered at once: poll instead.
      out["changed"] = out["version"].get<std::string>() != ask.since;
      out["watch"] = false;
    }
    send(res, 200, out);
  });
  route("POST", "/api/v1/agent/nodes/{name}/reports",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          const std::string name = req.matches[1];
          require(can_act_for_node(p, name), "act for node " + name);
          auto body = parse_body(req, {"reports"});
          auto reps = body.find("reports");
          if (reps == body.end() || !reps->is_array() || reps->size() > 1000) {
            throw HttpError{400, "reports", "required: a list of at most 1000 reports"};
          }
          // Validate all before applying any.
          each_entry(body, "reports", 1000, "",
                     {"job", "run", "event", "exit_code", "signal", "ready", "reason"},
                     [&](const json& r, const std::string& where) {
                       integer_in(r, "job", 1, INT64_MAX, where, true);
                       integer_in(r, "run", 1, 1 << 30, where, true);
                       auto ev = r.value("event", "");
                       if (ev != "started" && ev != "exited" && ev != "preempted" && ev != "lost" &&
                           ev != "readiness") {
                         throw HttpError{400, where + "event",
                                         "must be started, exited, preempted, lost or readiness"};
                       }
                       integer_in(r, "exit_code", -1024, 1024, where, ev == "exited");
                       integer_in(r, "signal", 1, 128, where);
                       // A service replica's readiness: "ready" (required with it, refused without)
                       // and the failed check's "reason" (at most 256 characters).
                       auto ready = r.find("ready");
                       if ((ev == "readiness") != (ready != r.end())) {
                         throw HttpError{400, where + "ready",
                                         ev == "readiness" ? "required with event readiness"
                                                           : "only with event readiness"};
                       }
                       if (ready != r.end() && !ready->is_boolean()) {
                         throw HttpError{400, where + "ready", "must be true or false"};
                       }
                       if (auto why = r.find("reason"); why != r.end()) {
                         if (ev != "readiness" || !why->is_string() ||
                             why->get<std::string>().size() > 256) {
                           throw HttpError{
                               400, where + "reason",
                               "a string of at most 256 characters, with event readiness"};
                         }
                       }
                     });
          if (!ctl->contact(name)) throw HttpError{404, "name", "no such node " + name};
          json out = {{"results", json::array()}};
          for (const auto& r : *reps) {
            if (r["event"] == "readiness") {
              auto x = ctl->agent_readiness(name, r["job"].get<JobId>(), r["run"].get<int>(),
                                            r["ready"].get<bool>(), r.value("reason", ""));
              out["results"].push_back(x.error.empty()
                                           ? json{{"job", r["job"]}, {"state", x.state}}
                                           : json{{"job", r["job"]}, {"error", x.error}});
              continue;
            }
            std::optional<int> code, sig;
            if (r.contains("exit_code")) code = r["exit_code"].get<int>();
            if (r.contains("signal")) sig = r["signal"].get<int>();
            auto x = ctl->agent_report(name, r["job"].get<JobId>(), r["run"].get<int>(),
                                       r["event"].get<std::string>(), code, sig);
            if (x.error.empty() && r["event"] != "started" &&
                !writes_for_run(name, r["job"].get<JobId>(), r["run"].get<int>())) {
              // A run this node held, ended longer ago than the grace period: a repeated report
              // that changed nothing, answered as for any job that is not the node's.
              x = {"", "not a job on node " + name};
            }
            if (x.error.empty()) {
              if (logs && r["event"] == "started") {
                // Which nodes held this run, recorded while it is current: later log uploads for
                // it are taken from those nodes only.
                const auto id = r["job"].get<JobId>();
                const int run = r["run"].get<int>();
                if (auto job = store->job(id); job && job->runs == run) {
                  logs->set_nodes(id, run, placement_nodes(job->placement_json));
                }
              }
              out["results"].push_back({{"job", r["job"]}, {"state", x.state}});
            } else {
              out["results"].push_back({{"job", r["job"]}, {"error", x.error}});
            }
          }
          send(res, 200, out);
        });
  route("POST", "/api/v1/agent/nodes/{name}/telemetry",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          const std::string name = req.matches[1];
          require(can_act_for_node(p, name), "act for node " + name);
          auto body = parse_body(req, {"time", "gpus", "jobs"});
          integer_in(body, "time", 0, INT64_MAX / 2, "");
          json gpus = json::array();
          each_entry(body, "gpus", 64, "",
                     {"index", "util_pct", "mem_used_mib", "mem_total_mib", "temp_c", "power_w",
                      "ecc_uncorrected", "healthy"},
                     [&](const json& g, const std::string& w) {
                       json o = {{"index", integer_in(g, "index", 0, 63, w, true).value()}};
                       if (auto v = number_in(g, "util_pct", 0, 100, w)) o["util_pct"] = *v;
                       if (auto v = integer_in(g, "mem_used_mib", 0, kMaxMib, w)) {
                         o["mem_used_mib"] = *v;
                       }
                       if (auto v = integer_in(g, "mem_total_mib", 0, kMaxMib, w)) {
                         o["mem_total_mib"] = *v;
                       }
                       if (auto v = number_in(g, "temp_c", -100, 300, w)) o["temp_c"] = *v;
                       if (auto v = number_in(g, "power_w", 0, 100000, w)) o["power_w"] = *v;
                       if (auto v = integer_in(g, "ecc_uncorrected", 0, INT64_MAX / 2, w)) {
                         o["ecc_uncorrected"] = *v;
                       }
                       if (auto h = g.find("healthy"); h != g.end()) {
                         if (!h->is_boolean()) {
                           throw HttpError{400, w + "healthy", "must be true or false"};
                         }
                         o["healthy"] = *h;
                       }
                       gpus.push_back(std::move(o));
                     });
          struct Part {
            JobId job;
            int run;
            json entry;
          };
          std::vector<Part> parts;
          each_entry(body, "jobs", 1024, "",
                     {"job", "run", "samples", "seconds", "gpu_util_mean", "gpu_util_peak",
                      "mem_used_peak_mib", "mem_total_mib", "cpu_pct_mean", "io_wait_pct_mean",
                      "cpu_pressure_pct", "io_pressure_pct"},
                     [&](const json& j, const std::string& w) {
                       Part part{
                           static_cast<JobId>(integer_in(j, "job", 1, INT64_MAX, w, true).value()),
                           static_cast<int>(integer_in(j, "run", 1, 1 << 30, w, true).value()), j};
                       integer_in(j, "samples", 0, 86400, w, true);
                       number_in(j, "seconds", 0, 86400, w, true);
                       number_in(j, "gpu_util_mean", 0, 100, w);
                       number_in(j, "gpu_util_peak", 0, 100, w);
                       integer_in(j, "mem_used_peak_mib", 0, 64 * kMaxMib, w);
                       integer_in(j, "mem_total_mib", 0, 64 * kMaxMib, w);
                       number_in(j, "cpu_pct_mean", 0, 102400, w);
                       number_in(j, "io_wait_pct_mean", 0, 100, w);
                       number_in(j, "cpu_pressure_pct", 0, 100, w);
                       number_in(j, "io_pressure_pct", 0, 100, w);
                       parts.push_back(std::move(part));
                     });
          if (!ctl->contact(name)) throw HttpError{404, "name", "no such node " + name};
          const auto now = ctl->now();
          ctl->set_node_telemetry(name, json{{"time", now}, {"gpus", gpus}}.dump());
          // Each entry counts for the job's current run on this node only.
          auto snap = ctl->snapshot();
          std::map<JobId, const AssignedRun*> here;
          if (auto it = snap->assignments.find(name); it != snap->assignments.end()) {
            for (const auto& r : it->second.run) here[r.job] = &r;
          }
          store::WriteBatch batch;
          json ignored = json::array();
          for (const auto& part : parts) {
            auto it = here.find(part.job);
            if (it == here.end() || it->second->run != part.run) {
              ignored.push_back(
                  {{"job", part.job},
                   {"run", part.run},
                   {"reason", it == here.end() ? "not running on this node" : "stale run"}});
              continue;
            }
            const auto& r = *it->second;
            const auto& j = part.entry;
            const double gpus_here =
                static_cast<double>(r.gpus.size()) * static_cast<double>(r.milli) / 1000.0;
            const auto samples = j["samples"].get<std::int64_t>();
            const double secs = j["seconds"].get<double>();
            const double nodes = r.nodes && !r.nodes->empty() ? double(r.nodes->size()) : 1.0;
            const double util = j.value("gpu_util_mean", 0.0);
            store::TelemetryRecord d;
            d.job = part.job;
            d.run = part.run;
            d.budget = r.budget;
            d.samples = samples;
            d.seconds = secs / nodes;
            d.gpu_seconds = secs * gpus_here;
            d.used_gpu_seconds = secs * gpus_here * util / 100.0;
            d.util_sum = util * static_cast<double>(samples);
            d.util_peak = j.value("gpu_util_peak", 0.0);
            d.mem_peak_mib = j.value("mem_used_peak_mib", std::int64_t{0});
            d.mem_total_mib = j.value("mem_total_mib", std::int64_t{0});
            // The I/O stall share: the process tree's I/O wait, or its cgroup's I/O pressure
            // where the agent reads one (the larger: either says the GPUs wait on input).
            const double cpu = j.value("cpu_pct_mean", 0.0);
            const double io_wait = j.value("io_wait_pct_mean", 0.0);
            const double io_pressure = j.value("io_pressure_pct", -1.0);
            const double cpu_pressure = j.value("cpu_pressure_pct", -1.0);
            d.cpu_sum = cpu * static_cast<double>(samples);
            d.io_sum = std::max(io_wait, io_pressure) * static_cast<double>(samples);
            // The interval filed as idle, starved or busy (server/advice.h).
            double cpus = 0;
            if (r.spec && r.spec->is_object()) {
              if (auto c = r.spec->find("cpus"); c != r.spec->end() && c->is_number()) {
                cpus = c->get<double>();
              }
            }
            const auto cls = classify_interval(util, cpu, io_wait, cpu_pressure, io_pressure, cpus);
            if (cls.idle) d.idle_seconds = d.seconds;
            if (cls.starved) d.starved_seconds = d.seconds;
            d.first_time = now - static_cast<core::Time>(secs);
            d.last_time = now;
            telemetry_series.add(part.job, part.run, name, now, util, d.mem_peak_mib,
                                 d.mem_total_mib);
            if (r.spec) shape_history.add(d, r.spec->dump());
            batch.push_back(store::op::AddTelemetry{d});
          }
          if (!batch.empty()) {
            auto st = store->write(std::move(batch));
            if (!st.ok()) throw HttpError{503, "store", st.error().reason};
          }
          send(res, 200,
               {{"ok", true},
                {"accepted", parts.size() - ignored.size()},
                {"ignored", ignored},
                {"lease_seconds", ctl->options().lease_seconds}});
        });
}

void ApiServer::Impl::serve_assignment_watch() {
  static const std::string kPrefix = "/api/v1/agent/nodes/";
  static const std::string kSuffix = "/assignments";
  static const std::regex kPath(to_regex(kAssignments));
  events->handle_held(
      // GET .../assignments with `wait` in its query; the handler checks the rest.
      [](std::string_view method, std::string_view target) {
        const auto q = target.find('?');
        if (method != "GET" || q == std::string_view::npos) return false;
        const auto path = target.substr(0, q);
        if (path.size() <= kPrefix.size() + kSuffix.size() ||
            path.substr(0, kPrefix.size()) != kPrefix ||
            path.substr(path.size() - kSuffix.size()) != kSuffix) {
          return false;
        }
        const std::string query = "&" + std::string(target.substr(q + 1));
        return query.find("&wait=") != std::string::npos;
      },
      [this](const httplib::Request& in, const EventServer::Reply& reply,
             const EventServer::OnGone& on_gone) {
        const auto began = std::chrono::steady_clock::now();
        httplib::Request req = in;
        req.path = httplib::detail::decode_url(in.path, false);
        httplib::Response res;
        std::string name;
        WatchAsk ask;
        std::shared_ptr<const Snapshot> snap;
        bool hold = false;
        answering(res, [&] {
          refuse_at_edge(req);
          auto p = authenticate(req);
          if (!std::regex_match(req.path, req.matches, kPath)) {
            throw HttpError{404, "path", "no route GET " + req.path};
          }
          ask = watch_query(req, watch->limits().max_wait_seconds);
          name = agent_call(req, p);
          snap = ctl->snapshot();
          json out = assignments_json(*snap, name);
          if (ask.wait > 0 && out["version"].get<std::string>() == ask.since) {
            hold = true;
            return;
          }
          out["changed"] = out["version"].get<std::string>() != ask.since;
          out["watch"] = true;
          send(res, 200, out);
        });
        if (!hold) {
          if (opts.prometheus)
            opts.prometheus->request("GET", kAssignments, res.status, seconds_since(began));
          return reply(std::move(res));
        }
        // Answered from the hub's thread: on a change, at the deadline, or when stopping.
        auto answer = [this, name, since = ask.since, reply](
                          const std::shared_ptr<const Snapshot>& s, bool) {
          httplib::Response r;
          answering(r, [&] {
            json out = assignments_json(s ? *s : *ctl->snapshot(), name);
            out["changed"] = out["version"].get<std::string>() != since;
            out["watch"] = true;
            send(r, 200, out);
          });
          reply(std::move(r));
        };
        auto held =
            watch->hold(name, ask.since, snap, began + std::chrono::seconds(ask.wait), answer);
        if (held.id == 0 && held.changed) return answer(ctl->snapshot(), true);
        if (held.id == 0) {
          httplib::Response r;
          send_error(r, 429, "wait", held.refused);
          if (opts.prometheus)
            opts.prometheus->request("GET", kAssignments, 429, seconds_since(began));
          return reply(std::move(r));
        }
        // The client gone: its place is freed, and the request ends (unanswered).
        on_gone([w = watch, id = held.id, reply] {
          w->cancel(id);
          reply(httplib::Response{});
        });
      });
}

}  // namespace allot::server
