#include "server/event_log.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "server/lifecycle.h"
#include "server/prometheus.h"

namespace allot::server {

using json = nlohmann::ordered_json;  // fields in the order written: time and event first

std::string rfc3339(core::Time t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

core::Result<std::shared_ptr<EventLog>> EventLog::open(const std::string& path) {
  if (path.empty() || path == "-") return std::make_shared<EventLog>(stderr, false);
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) {
    return core::Error{"event_log", "cannot open " + path + " to append: " + std::strerror(errno)};
  }
  return std::make_shared<EventLog>(f, true);
}

EventLog::EventLog(std::FILE* out, bool owned) : out_(out), owned_(owned) {}

EventLog::~EventLog() {
  if (owned_) std::fclose(out_);
}

void EventLog::rebuilt(const store::Store& store) {
  std::lock_guard lk(mu_);
  for (const auto& rec : store.active_jobs()) {
    auto spec = json::parse(rec.spec_json, nullptr, false);
    jobs_[rec.id] = {rec.owner, rec.budget,
                     spec.is_object() ? spec.value("kind", std::string("batch")) : "batch"};
  }
}

void EventLog::emit(std::string line) {
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), out_);
}

void EventLog::queued(const std::vector<std::pair<store::JobRecord, core::JobSpec>>& jobs) {
  std::lock_guard lk(mu_);
  for (const auto& [rec, spec] : jobs) {
    jobs_[rec.id] = {rec.owner, rec.budget, core::to_string(spec.kind)};
    emit(json{{"time", rfc3339(rec.submit_time)},
              {"event", "job"},
              {"job", rec.id},
              {"owner", rec.owner},
              {"budget", rec.budget},
              {"kind", core::to_string(spec.kind)},
              {"from", ""},
              {"to", rec.state},
              {"reason", rec.reason}}
             .dump());
  }
  std::fflush(out_);
}

void EventLog::committing(const store::WriteBatch& batch) {
  std::lock_guard lk(mu_);
  // Who and where for jobs this batch updates (their events come first in the batch).
  for (const auto& op : batch) {
    const store::JobRecord* rec = nullptr;
    if (const auto* u = std::get_if<store::op::UpdateJob>(&op)) rec = &u->job;
    if (const auto* i = std::get_if<store::op::InsertJob>(&op)) rec = &i->job;
    if (rec && !jobs_.count(rec->id)) {
      auto spec = json::parse(rec->spec_json, nullptr, false);
      jobs_[rec->id] = {rec->owner, rec->budget,
                        spec.is_object() ? spec.value("kind", std::string("batch")) : "batch"};
    }
  }
  std::vector<core::JobId> ended;
  for (const auto& op : batch) {
    if (const auto* e = std::get_if<store::op::AddEvent>(&op)) {
      const auto& ev = e->event;
      json line = {{"time", rfc3339(ev.time)}, {"event", "job"}, {"job", ev.job}};
      if (auto it = jobs_.find(ev.job); it != jobs_.end()) {
        line["owner"] = it->second.owner;
        line["budget"] = it->second.budget;
        line["kind"] = it->second.kind;
      }
      line["from"] = ev.from;
      line["to"] = ev.to;
      line["reason"] = ev.reason;
      if (ev.to == "preempting") {
        // A stop: a preemption for another job, or a drain because of the job's node.
        bool drain = false;
        const auto why = stop_reason(ev.reason, drain);
        line["stop"] = drain ? "drain" : "preemption";
        line["stop_reason"] = why;
        const std::string prefix = "preempted for job ";
        if (ev.reason.compare(0, prefix.size(), prefix) == 0) {
          line["for_job"] = std::strtoll(ev.reason.c_str() + prefix.size(), nullptr, 10);
        }
      }
      held_.push_back(line.dump());
      auto st = parse_job_status(ev.to);
      if (st && is_terminal(*st)) ended.push_back(ev.job);
    } else if (const auto* h = std::get_if<store::op::AddNodeHealth>(&op)) {
      const auto& ev = h->event;
      held_.push_back(json{
          {"time", rfc3339(ev.time)},
          {"event", "node"},
          {"node", ev.node},
          {"health", ev.health},
          {"cordoned", ev.cordoned},
          {"gpus", ev.gpus},
          {"reason",
           ev.reason}}.dump());
    } else if (const auto* a = std::get_if<store::op::AddAudit>(&op)) {
      const auto& ev = a->entry;
      held_.push_back(json{{"time", rfc3339(ev.time)},
                           {"event", "budget"},
                           {"budget", ev.path},
                           {"field", ev.field},
                           {"old", ev.old_value},
                           {"new", ev.new_value},
                           {"actor", ev.actor},
                           {"actor_token", ev.actor_token}}
                          .dump());
    }
  }
  for (auto id : ended) jobs_.erase(id);
}

void EventLog::committed(double /*seconds*/) {
  std::lock_guard lk(mu_);
  if (held_.empty()) return;
  for (auto& line : held_) emit(std::move(line));
  held_.clear();
  std::fflush(out_);
}

}  // namespace allot::server
