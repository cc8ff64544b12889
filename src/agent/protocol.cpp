#include "agent/protocol.h"

#include <nlohmann/json.hpp>

namespace allot::agent {

using core::Error;
using json = nlohmann::json;

namespace {

// Reads optional fields of an object, remembering the first error by field name.
class Fields {
 public:
  Fields(const json& o, std::string where) : o_(o), where_(std::move(where)) {}
  const Error* error() const { return err_.reason.empty() ? nullptr : &err_; }

  std::int64_t integer(const char* f, std::int64_t def, std::int64_t lo, std::int64_t hi) {
    auto it = o_.find(f);
    if (it == o_.end() || it->is_null()) return def;
    if (!it->is_number_integer() || it->get<std::int64_t>() < lo || it->get<std::int64_t>() > hi) {
      fail(f, "must be an integer between " + std::to_string(lo) + " and " + std::to_string(hi));
      return def;
    }
    return it->get<std::int64_t>();
  }
  double number(const char* f, double def, double lo, double hi) {
    auto it = o_.find(f);
    if (it == o_.end() || it->is_null()) return def;
    if (!it->is_number() || it->get<double>() < lo || it->get<double>() > hi) {
      fail(f, "must be a number between " + std::to_string(lo) + " and " + std::to_string(hi));
      return def;
    }
    return it->get<double>();
  }
  std::string string(const char* f, std::size_t max = 4096) {
    auto it = o_.find(f);
    if (it == o_.end() || it->is_null()) return "";
    if (!it->is_string() || it->get<std::string>().size() > max) {
      fail(f, "must be a string of at most " + std::to_string(max) + " characters");
      return "";
    }
    return it->get<std::string>();
  }
  bool boolean(const char* f) {
    auto it = o_.find(f);
    if (it == o_.end() || it->is_null()) return false;
    if (!it->is_boolean()) {
      fail(f, "must be true or false");
      return false;
    }
    return it->get<bool>();
  }
  std::vector<std::string> strings(const char* f, std::size_t max_n, std::size_t max_len) {
    std::vector<std::string> out;
    auto it = o_.find(f);
    if (it == o_.end() || it->is_null()) return out;
    if (!it->is_array() || it->size() > max_n) {
      fail(f, "must be a list of at most " + std::to_string(max_n) + " strings");
      return out;
    }
    for (const auto& v : *it) {
      if (!v.is_string() || v.get<std::string>().size() > max_len) {
        fail(f, "entries must be strings of at most " + std::to_string(max_len) + " characters");
        return {};
      }
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  void fail(const std::string& f, const std::string& reason) {
    if (err_.reason.empty()) err_ = Error{where_ + "." + f, reason};
  }

 private:
  const json& o_;
  std::string where_;
  Error err_;
};

core::Result<RunKey> run_key(Fields& f) {
  RunKey k;
  k.job = static_cast<core::JobId>(f.integer("job", 0, 1, INT64_MAX));
  k.run = static_cast<int>(f.integer("run", 0, 1, 1 << 30));
  if (f.error()) return *f.error();
  if (k.job == 0) return Error{"job", "missing"};
  if (k.run == 0) return Error{"run", "missing"};
  return k;
}

}  // namespace

core::Result<Assignments> parse_assignments(const json& body) {
  if (!body.is_object()) return Error{"body", "must be a JSON object"};
  Assignments out;
  Fields top(body, "assignments");
  out.lease_seconds = static_cast<int>(top.integer("lease_seconds", 30, 1, 86400));
  out.server_time = top.integer("server_time", 0, 0, INT64_MAX);
  if (top.error()) return *top.error();
  auto run = body.find("run");
  if (run != body.end()) {
    if (!run->is_array() || run->size() > 1024) return Error{"run", "must be a list"};
    for (const auto& e : *run) {
      if (!e.is_object()) return Error{"run", "entries must be objects"};
      Fields f(e, "run");
      auto key = run_key(f);
      if (!key.ok()) return key.error();
      Assignment a;
      a.key = key.value();
      a.state = f.string("state", 32);
      a.gpu_milli = static_cast<int>(f.integer("gpu_milli", 1000, 1, 1000));
      a.mig_profile = f.string("mig_profile", 32);
      auto gpus = e.find("gpus");
      if (gpus == e.end() || !gpus->is_array() || gpus->empty() || gpus->size() > 64) {
        return Error{"run.gpus", "must be a list of 1 to 64 GPU indices"};
      }
      for (const auto& g : *gpus) {
        // Compared before narrowing: 2^32 must not read as GPU 0.
        if (!g.is_number_integer() || g.get<std::int64_t>() < 0 || g.get<std::int64_t>() > 63) {
          return Error{"run.gpus", "entries must be GPU indices"};
        }
        a.gpus.push_back(g.get<int>());
      }
      a.command = f.strings("command", 256, 4096);
      auto env = e.find("env");
      if (env != e.end() && !env->is_null()) {
        if (!env->is_object() || env->size() > 256) return Error{"run.env", "must be an object"};
        for (const auto& [k, v] : env->items()) {
          if (!v.is_string()) return Error{"run.env", "values must be strings"};
          a.env[k] = v.get<std::string>();
        }
      }
      a.workdir = f.string("workdir", 1024);
      a.memory_mib = f.integer("memory_mib", 0, 0, std::int64_t{1} << 40);
      a.cpus = f.number("cpus", 0, 0, 4096);
      a.container = f.string("container", 512);
      a.owner = f.string("owner", 128);
      a.budget = f.string("budget", 512);
      a.name = f.string("name", 128);
      a.kind = f.string("kind", 32);
      a.resumable = f.boolean("resumable");
      a.grace_seconds = static_cast<int>(f.integer("grace_seconds", 30, 0, 86400));
      a.rank = static_cast<int>(f.integer("rank", 0, 0, 4096));
      a.nodes = f.strings("nodes", 4096, 128);
      a.rendezvous = f.string("rendezvous", 300);
      if (f.error()) return *f.error();
      if (auto rc = e.find("ready_check"); rc != e.end() && !rc->is_null()) {
        if (!rc->is_object()) return Error{"run.ready_check", "must be an object"};
        Fields c(*rc, "run.ready_check");
        ReadyCheck check;
        check.command = c.strings("command", 64, 4096);
        check.path = c.string("path", 1024);
        check.port = static_cast<int>(c.integer("port", 0, 1, 65535));
        check.interval_seconds = static_cast<int>(c.integer("interval_seconds", 3, 1, 3600));
        check.timeout_seconds = static_cast<int>(c.integer("timeout_seconds", 5, 1, 600));
        if (c.error()) return *c.error();
        if (check.command.empty() == check.path.empty()) {
          return Error{"run.ready_check", "must give a command or a path"};
        }
        if (!check.path.empty() && (check.path[0] != '/' || check.port == 0)) {
          return Error{"run.ready_check.path", "must be an HTTP path starting with /, with a port"};
        }
        a.ready_check = std::move(check);
      }
      if (auto r = e.find("ready"); r != e.end() && !r->is_null()) {
        if (!r->is_boolean()) return Error{"run.ready", "must be true, false or null"};
        a.ready = r->get<bool>();
      }
      if (a.state != "starting" && a.state != "running") {
        return Error{"run.state", "must be starting or running, not '" + a.state + "'"};
      }
      out.run.push_back(std::move(a));
    }
  }
  auto stop = body.find("stop");
  if (stop != body.end()) {
    if (!stop->is_array() || stop->size() > 1024) return Error{"stop", "must be a list"};
    for (const auto& e : *stop) {
      if (!e.is_object()) return Error{"stop", "entries must be objects"};
      Fields f(e, "stop");
      auto key = run_key(f);
      if (!key.ok()) return key.error();
      StopOrder s;
      s.key = key.value();
      s.grace_seconds = static_cast<int>(f.integer("grace_seconds", 30, 0, 86400));
      s.notice_seconds = static_cast<int>(f.integer("notice_seconds", 0, 0, 86400));
      if (f.error()) return *f.error();
      out.stop.push_back(s);
    }
  }
  auto layouts = body.find("mig_layouts");
  if (layouts != body.end() && !layouts->is_null()) {
    if (!layouts->is_array() || layouts->size() > 64) {
      return Error{"mig_layouts", "must be a list of at most 64 layouts"};
    }
    for (const auto& e : *layouts) {
      if (!e.is_object()) return Error{"mig_layouts", "entries must be objects"};
      auto gpu = e.find("gpu");
      // Compared before narrowing, as for run.gpus: 2^32 must not read as GPU 0.
      if (gpu == e.end() || !gpu->is_number_integer() || gpu->get<std::int64_t>() < 0 ||
          gpu->get<std::int64_t>() > 63) {
        return Error{"mig_layouts.gpu", "must be a GPU index between 0 and 63"};
      }
      auto profiles = e.find("profiles");
      // Required, unlike most lists here: an absent list must not read as "make the GPU whole".
      if (profiles == e.end() || !profiles->is_array()) {
        return Error{"mig_layouts.profiles",
                     "must be a list of MIG profiles (empty: the GPU whole, MIG mode off)"};
      }
      Fields f(e, "mig_layouts");
      MigLayoutOrder order;
      order.gpu = gpu->get<int>();
      order.profiles = f.strings("profiles", 7, 32);
      if (f.error()) return *f.error();
      for (const MigLayoutOrder& o : out.mig_layouts) {
        if (o.gpu == order.gpu) {
          return Error{"mig_layouts.gpu", "GPU " + std::to_string(order.gpu) + " given twice"};
        }
      }
      out.mig_layouts.push_back(std::move(order));
    }
  }
  return out;
}

core::Result<json> registration_body(const Registration& r) {
  if (r.devices.empty()) return Error{"gpus", "the node has no GPU to offer"};
  const std::string model = r.devices.front().model;
  for (const auto& d : r.devices) {
    if (d.model != model) {
      return Error{"model", "GPUs of several models on one node (" + model + ", " + d.model +
                                "): run one agent per model with --gpus"};
    }
  }
  json devices = json::array();
  for (const auto& d : r.devices) {
    json mig = json::array();
    for (const auto& m : d.mig) {
      mig.push_back({{"uuid", m.uuid}, {"profile", m.profile}, {"milli", m.milli}});
    }
    devices.push_back({{"index", d.index},
                       {"uuid", d.uuid},
                       {"name", d.name},
                       {"memory_mib", d.memory_mib},
                       {"pci_bus_id", d.pci_bus_id},
                       {"mig", mig}});
  }
  json body = {{"name", r.name},
               {"cluster", r.cluster.empty() ? "default" : r.cluster},
               {"model", model},
               {"gpus", static_cast<int>(r.devices.size())},
               {"devices", devices},
               {"agent",
                {{"version", r.version},
                 {"backend", r.backend},
                 {"isolation", r.isolation},
                 {"achieved",
                  {{"jobs_as_owner", r.jobs_as_owner},
                   {"cgroup_limits", r.cgroup_limits},
                   {"cgroup_why_not", r.cgroup_why_not},
                   {"gpu_devices", r.gpu_devices}}}}}};
  if (!r.block.empty()) body["block"] = r.block;
  if (!r.address.empty()) body["address"] = r.address;
  if (!r.labels.empty()) body["labels"] = r.labels;
  return body;
}

json reports_body(const std::vector<Report>& reports) {
  json list = json::array();
  for (const auto& r : reports) {
    json e = {{"job", r.key.job}, {"run", r.key.run}, {"event", r.event}};
    if (r.exit_code) e["exit_code"] = *r.exit_code;
    if (r.signal) e["signal"] = *r.signal;
    if (r.ready) e["ready"] = *r.ready;
    if (r.ready && !*r.ready && !r.reason.empty()) e["reason"] = r.reason.substr(0, 256);
    list.push_back(std::move(e));
  }
  return {{"reports", list}};
}

json telemetry_body(std::int64_t time, const std::vector<GpuSample>& gpus,
                    const std::vector<JobTelemetry>& jobs) {
  json g = json::array();
  for (const auto& s : gpus) {
    json e = {{"index", s.index}, {"healthy", s.present}};
    if (s.util_pct >= 0) e["util_pct"] = s.util_pct;
    if (s.mem_used_mib >= 0) e["mem_used_mib"] = s.mem_used_mib;
    if (s.mem_total_mib >= 0) e["mem_total_mib"] = s.mem_total_mib;
    if (s.temp_c >= 0) e["temp_c"] = s.temp_c;
    if (s.power_w >= 0) e["power_w"] = s.power_w;
    if (s.ecc_uncorrected >= 0) e["ecc_uncorrected"] = s.ecc_uncorrected;
    g.push_back(std::move(e));
  }
  json j = json::array();
  for (const auto& t : jobs) {
    json e = {{"job", t.key.job},
              {"run", t.key.run},
              {"samples", t.samples},
              {"seconds", t.seconds},
              {"gpu_util_mean", t.gpu_util_mean},
              {"gpu_util_peak", t.gpu_util_peak},
              {"mem_used_peak_mib", t.mem_used_peak_mib},
              {"mem_total_mib", t.mem_total_mib},
              {"cpu_pct_mean", t.cpu_pct_mean},
              {"io_wait_pct_mean", t.io_wait_pct_mean}};
    if (t.cpu_pressure_pct_mean >= 0) e["cpu_pressure_pct"] = t.cpu_pressure_pct_mean;
    if (t.io_pressure_pct_mean >= 0) e["io_pressure_pct"] = t.io_pressure_pct_mean;
    j.push_back(std::move(e));
  }
  return {{"time", time}, {"gpus", g}, {"jobs", j}};
}

}  // namespace allot::agent
