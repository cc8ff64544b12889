// Job logs over HTTP: users read a run's stdout and stderr; agents upload them (server/logs.h
// keeps them).

#include <algorithm>

#include "server/api_impl.h"
#include "server/lifecycle.h"

namespace allot::server {

namespace {

// The time a run ended, from the job's events: the run-th start, then the first transition out
// of holding GPUs. nullopt while it runs (or never ran).
bool in(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::optional<core::Time> run_end(const std::vector<store::JobEvent>& events, int run) {
  int starts = 0;
  for (const auto& e : events) {
    if (e.to == "starting" && e.from != "starting") {  // not a note on a starting run (a drain)
      ++starts;
      continue;
    }
    if (starts == run && e.to != "running" && e.to != "preempting" && e.to != e.from) {
      return e.time;
    }
  }
  return std::nullopt;
}

}  // namespace

bool ApiServer::Impl::writes_for_run(const std::string& node, JobId id, int run) {
  auto job = store->job(id);
  if (!job || run < 1 || run > job->runs) return false;
  if (run == job->runs) {
    const auto st = parse_job_status(job->state).value_or(JobStatus::Pending);
    auto placed = placement_nodes(job->placement_json);
    const bool placed_here = in(placed, node);
    // Held now: the job's current run, holding GPUs, placed on this node.
    if (holds_gpus(st) && placed_here) {
      if (logs) logs->set_nodes(id, run, placed);
      return true;
    }
    if (!placed_here && (!logs || !in(logs->nodes(id, run), node))) return false;
  } else if (!logs || !in(logs->nodes(id, run), node)) {
    // An earlier run: only a node recorded as holding it (when it started, or at its first
    // upload).
    return false;
  }
  // Held once, and ended: only within the grace period after its end.
  const auto end = run_end(store->job_events(id), run);
  return end && ctl->now() <= *end + opts.agent_write_grace_seconds;
}

void ApiServer::Impl::install_job_log_routes() {
  route("GET", "/api/v1/jobs/{id}/logs",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          check_query(req, {"stream", "offset", "node", "run", "limit"});
          auto j = visible_job(p, req.matches[1]);
          const auto stream =
              req.has_param("stream") ? req.get_param_value("stream") : std::string("stdout");
          if (stream != "stdout" && stream != "stderr") {
            throw HttpError{400, "stream", "must be stdout or stderr"};
          }
          const auto offset = query_int(req, "offset", 0, 0, INT64_MAX / 2);
          const auto limit = query_int(req, "limit", 1 << 20, 1, 1 << 20);
          const int run = static_cast<int>(query_int(req, "run", j.runs, 1, 1 << 30));
          if (req.has_param("run") && run > j.runs) {
            throw HttpError{
                400, "run",
                "job " + std::to_string(j.id) + " has had " + std::to_string(j.runs) + " runs"};
          }
          std::string node = req.get_param_value("node");
          if (!node.empty() && !valid_name(node)) throw HttpError{400, "node", "not a node name"};
          if (!logs) throw HttpError{503, "logs", "this server keeps no logs (no logs directory)"};
          if (node.empty() && run > 0) {
            auto nodes = logs->nodes(j.id, run);
            if (nodes.empty() && run == j.runs) nodes = placement_nodes(j.placement_json);
            if (!nodes.empty()) node = nodes.front();  // rank 0
          }
          LogRead r;
          r.start = r.next = offset;
          if (run > 0 && !node.empty()) {
            auto got = logs->read(j.id, run, node, stream, offset, limit);
            if (!got.ok()) check(got.error());
            r = std::move(got.value());
          }
          // Complete: the run ended and everything is in (the agent said so, or it had time).
          bool complete = false;
          auto st = parse_job_status(j.state).value_or(JobStatus::Pending);
          if (j.runs == 0) {
            complete = is_terminal(st);
          } else if (auto end = run_end(store->job_events(j.id), run)) {
            complete =
                r.next >= r.length && (r.final || ctl->now() >= *end + opts.logs_settle_seconds);
          }
          res.status = 200;
          res.set_header("Allot-Next-Offset", std::to_string(r.next));
          res.set_header("Allot-Offset", std::to_string(r.start));
          res.set_header("Allot-Run", std::to_string(run));
          res.set_header("Allot-Node", node);
          res.set_header("Allot-Complete", complete ? "true" : "false");
          res.set_content(r.data, "text/plain");
        });
}

void ApiServer::Impl::install_agent_log_routes() {
  route("POST", "/api/v1/agent/nodes/{name}/logs",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto p = authenticate(req);
          const std::string name = req.matches[1];
          require(can_act_for_node(p, name), "act for node " + name);
          check_query(req, {"job", "run", "stream", "offset", "final"});
          const auto id = static_cast<JobId>(query_int(req, "job", 0, 1, INT64_MAX));
          if (!req.has_param("job")) throw HttpError{400, "job", "required: the job id"};
          if (!req.has_param("run")) throw HttpError{400, "run", "required: the run number"};
          if (!req.has_param("offset")) {
            throw HttpError{400, "offset", "required: the byte offset of the body in the stream"};
          }
          const int run = static_cast<int>(query_int(req, "run", 0, 1, 1 << 30));
          const auto offset = query_int(req, "offset", 0, 0, INT64_MAX / 2);
          const auto stream = req.get_param_value("stream");
          if (stream != "stdout" && stream != "stderr") {
            throw HttpError{400, "stream", "required: stdout or stderr"};
          }
          const auto fin = req.get_param_value("final");
          if (!fin.empty() && fin != "true" && fin != "false") {
            throw HttpError{400, "final", "must be true or false"};
          }
          if (!logs) throw HttpError{503, "logs", "this server keeps no logs (no logs directory)"};
          if (!ctl->contact(name)) throw HttpError{404, "name", "no such node " + name};
          // One answer for a job that does not exist, a run it never had and a run on another
          // node: an agent learns nothing about jobs that are not its node's.
          const auto not_here = [&] {
            return HttpError{403, "job",
                             "job " + std::to_string(id) + " run " + std::to_string(run) +
                                 " is not on node " + name};
          };
          if (!writes_for_run(name, id, run)) throw not_here();
          auto r = logs->append(id, run, name, stream, offset, req.body, fin == "true");
          if (!r.ok()) {
            check(r.error(), r.error().field == "offset" ? 409
                             : r.error().field == "body" ? 413
                                                         : 503);
          }
          send(res, 200, {{"length", r.value()}});
        });
}

}  // namespace allot::server
