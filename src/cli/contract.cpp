#include "cli/contract.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "core/drain.h"

namespace allot::cli {

using json = nlohmann::json;

namespace {

bool holds_gpus(const std::string& state) {
  return state == "starting" || state == "running" || state == "preempting";
}

long long number(const json& j, const char* key, long long def = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<long long>() : def;
}

long long min_runtime(const json& job) {
  auto it = job.find("spec");
  return it != job.end() && it->is_object() ? number(*it, "min_runtime") : 0;
}

std::string text(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string human_duration(long long s) {
  if (s < 0) s = 0;
  char buf[48];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", s);
  } else if (s < 3600) {
    if (s % 60) {
      std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
    } else {
      std::snprintf(buf, sizeof buf, "%lldm", s / 60);
    }
  } else if (s < 86400) {
    if ((s % 3600) / 60) {
      std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
    } else {
      std::snprintf(buf, sizeof buf, "%lldh", s / 3600);
    }
  } else if ((s % 86400) / 3600) {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", s / 86400, (s % 86400) / 3600);
  } else {
    std::snprintf(buf, sizeof buf, "%lldd", s / 86400);
  }
  return buf;
}

std::string local_time(long long t, long long now) {
  std::time_t tt = static_cast<std::time_t>(t), tn = static_cast<std::time_t>(now);
  std::tm tm{}, tmn{};
  localtime_r(&tt, &tm);
  localtime_r(&tn, &tmn);
  char buf[32];
  const bool today = tm.tm_year == tmn.tm_year && tm.tm_yday == tmn.tm_yday;
  std::strftime(buf, sizeof buf, today ? "%H:%M:%S" : "%b %d %H:%M", &tm);
  return buf;
}

std::string job_class(const json& job) {
  const auto state = text(job, "state");
  const bool allocated = job.value("allocated", false);
  if (holds_gpus(state) || number(job, "runs") > 0) {
    if (!allocated) return "unallocated";
    const auto spec = job.value("spec", json::object());
    return spec.is_object() && spec.value("kind", "") == "debug" ? "debug" : "allocated";
  }
  if (state == "pending" || state == "requeued") {
    const long long m = min_runtime(job);
    return m > 0 ? "asks " + human_duration(m) : "unallocated";
  }
  return "-";
}

std::string protection_left(const json& job, long long now) {
  if (!holds_gpus(text(job, "state"))) return "-";
  if (!job.value("allocated", false)) return "no";
  const long long until = number(job, "protected_until");
  return until > now ? human_duration(until - now) : "ended";
}

std::string contract_promise(const json& job, bool asked_zero) {
  const long long m = min_runtime(job);
  if (m <= 0 && asked_zero) {
    return "UNALLOCATED by choice (--min-runtime 0): free, preemptible work that any funded job "
           "may stop at any time";
  }
  // Given by the budget (submit's reply says so): no --min-runtime was asked.
  const auto dflt = job.find("min_runtime_default");
  const std::string from = dflt != job.end() && dflt->is_object() ? text(*dflt, "from") : "";
  if (m <= 0) {
    return "UNALLOCATED: no --min-runtime" +
           (from.empty() ? std::string() : ", and the default of " + from + " is 0") +
           ", so it is free, preemptible work that any funded job may stop at any time; for a "
           "protected run ask for a contract, e.g. --min-runtime 2h";
  }
  std::string out = "asks for an allocated contract: protected for " + human_duration(m) +
                    " once started" +
                    (from.empty() ? std::string() : " (the default of " + from + ")") +
                    ", if its budget can fund it (else it starts unallocated)";
  const auto spec = job.find("spec");
  if (spec != job.end() && spec->is_object() && text(*spec, "kind") == "interactive") {
    // What the server gives interactive sessions: submit's reply says (docs/policy.md 6 and 9).
    const auto given = job.find("interactive");
    const auto number = [&](const char* f) -> long long {
      return given != job.end() && given->is_object() ? given->value(f, 0LL) : 0;
    };
    const long long gpus = number("allowance_gpus"), grace = number("stop_grace_seconds");
    if (gpus > 0) {
      out += "; as an interactive session inside your interactive allowance (" +
             std::to_string(gpus) +
             " GPUs per person, charged to the budget) it is neither demoted nor preempted for " +
             human_duration(number("protection_seconds"));
    }
    if (grace > 0) {
      out += std::string(gpus > 0 ? ", and" : "; as an interactive session,") +
             " any stop of it comes with a warning ($ALLOT_STOP_NOTICE) and " +
             human_duration(grace) + " to save";
    }
    if (gpus > 0 || grace > 0) out += " (docs/policy.md sections 6 and 9)";
  }
  return out;
}

std::string unallocated_cause(const json& events) {
  if (!events.is_array()) return "";
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    const auto reason = text(*it, "reason");
    if (text(*it, "to") == "starting" && text(*it, "from") != "starting") {
      if (reason.rfind("unallocated (", 0) != 0) return "";
      const auto close = reason.rfind(')');
      return close == std::string::npos ? "" : reason.substr(13, close - 13);
    }
    if (reason.rfind("demoted", 0) == 0) {
      const auto open = reason.find('(');
      return open == std::string::npos ? "" : reason.substr(open + 1, reason.size() - open - 2);
    }
  }
  return "";
}

long long allowance_end(const json& job, const json& events) {
  if (!events.is_array()) return 0;
  const long long start = number(job, "run_start");
  static const std::string kMark = "interactive allowance: neither demoted nor preempted for ";
  long long end = 0;
  for (const auto& e : events) {
    const auto reason = text(e, "reason");
    const auto at = reason.find(kMark);
    if (number(e, "time") < start || at == std::string::npos) continue;
    // The server writes the protection as core::format_duration does: "8h00m", "45s", "3d04h".
    long long total = 0, n = 0;
    for (std::size_t i = at + kMark.size(); i < reason.size(); ++i) {
      const char c = reason[i];
      if (c >= '0' && c <= '9') {
        n = n * 10 + (c - '0');
        continue;
      }
      const long long unit = c == 'd' ? 86400 : c == 'h' ? 3600 : c == 'm' ? 60 : c == 's' ? 1 : 0;
      if (unit == 0) break;
      total += n * unit;
      n = 0;
    }
    end = number(e, "time") + total;
  }
  return end;
}

std::vector<std::string> running_story(const json& job, const json& events, long long now) {
  std::vector<std::string> out;
  const long long until = number(job, "protected_until");
  const long long sheltered = allowance_end(job, events);
  if (job.value("allocated", false) && sheltered > now && sheltered > until) {
    out.push_back("allocated, inside its owner's interactive allowance: protected until " +
                  local_time(sheltered, now) + " (" + human_duration(sheltered - now) +
                  " left); nothing preempts or demotes it before then (docs/policy.md section 6)");
  } else if (job.value("allocated", false)) {
    if (until > now) {
      out.push_back("allocated: protected until " + local_time(until, now) + " (" +
                    human_duration(until - now) + " left); nothing preempts it before then");
    } else {
      out.push_back("allocated, protection ended at " + local_time(until, now) +
                    ": it may now be preempted for a budget that stands further below its "
                    "allocation");
    }
  } else {
    const auto cause = unallocated_cause(events);
    out.push_back("UNALLOCATED" + (cause.empty() ? std::string() : " (" + cause + ")") +
                  ": not protected; the first funded request that needs these GPUs takes them");
    if (min_runtime(job) <= 0) {
      out.push_back("for a protected run, submit with --min-runtime (e.g. --min-runtime 2h)");
    }
  }
  if (events.is_array()) {
    const long long start = number(job, "run_start");
    for (const auto& e : events) {
      const auto reason = text(e, "reason");
      if (number(e, "time") >= start &&
          (reason.rfind("promoted", 0) == 0 || reason.rfind("demoted", 0) == 0)) {
        out.push_back("at " + local_time(number(e, "time"), now) + ": " + reason);
      }
    }
  }
  return out;
}

std::string last_stop(const json& events) {
  if (!events.is_array()) return "";
  for (auto it = events.rbegin(); it != events.rend(); ++it) {
    const auto to = text(*it, "to");
    if (to == "requeued" || to == "preempted") return text(*it, "reason");
  }
  return "";
}

long long drain_stop_time(const json& job, long long now) {
  // The server's rule (docs/policy.md §9, core/drain.h), from the job's JSON.
  const long long deadline =
      core::drain_deadline(number(job, "run_start"), min_runtime(job),
                           job.value("allocated", false), number(job, "protected_until"));
  return std::max(now, deadline);
}

std::string drain_sentence(const json& job, const std::string& node, const std::string& health,
                           const std::string& reason, long long now) {
  const long long stop = drain_stop_time(job, now);
  std::string out = "node " + node + " is " + health + (reason.empty() ? "" : " (" + reason + ")") +
                    ": this job will be stopped ";
  if (stop <= now) return out + "now (it is not protected)";
  const bool protection = job.value("allocated", false) && number(job, "protected_until") >= stop;
  return out + "at " + local_time(stop, now) + " (in " + human_duration(stop - now) + "; " +
         (protection ? "its protection ends then" : "it has run its minimum runtime then") + ")";
}

}  // namespace allot::cli
