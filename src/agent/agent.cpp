#include "agent/agent.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent/cgroup_stats.h"
#include "agent/job_env.h"
#include "agent/readiness.h"
#include "agent/reconcile.h"

namespace allot::agent {

namespace fs = std::filesystem;
using json = nlohmann::json;
using core::Error;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kVersion = "0.1.0";
constexpr std::size_t kLogChunk = std::size_t{256} * 1024;
constexpr std::size_t kMaxDone = 10000;

std::int64_t wall_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string key_name(const RunKey& k) {
  return std::to_string(k.job) + "." + std::to_string(k.run);
}

void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

core::Result<std::unique_ptr<GpuBackend>> make_backend(const std::string& spec,
                                                       const std::string& node) {
  if (spec.rfind("fake:", 0) == 0) return make_fake_backend(spec.substr(5), node);
  if (spec == "nvml") return make_nvml_backend();
  if (spec == "auto" || spec.empty()) {
    auto nvml = make_nvml_backend();
    if (!nvml.ok()) {
      return Error{"backend", nvml.error().reason +
                                  " (give --backend fake:FILE to run with a described node)"};
    }
    return nvml;
  }
  return Error{"backend", "must be auto, nvml or fake:FILE, not '" + spec + "'"};
}

Agent::Agent(AgentOptions options, std::unique_ptr<GpuBackend> backend)
    : o_(std::move(options)), backend_(std::move(backend)) {
  if (o_.runner.state_dir.empty()) o_.runner.state_dir = o_.state_dir;
  if (o_.address.empty()) o_.address = o_.node;
}

Agent::~Agent() {
  stop(kill_on_stop_);
}

void Agent::say(const std::string& line) {
  // The same complaint every poll says nothing new: once until something else is said.
  if (line == last_said_) return;
  last_said_ = line;
  if (o_.log) {
    o_.log(line);
    return;
  }
  char stamp[32];
  std::time_t t = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%H:%M:%S", std::localtime(&t));
  std::fprintf(stderr, "%s allot agent %s: %s\n", stamp, o_.node.c_str(), line.c_str());
}

std::string Agent::isolation() const {
  return runner_ ? runner_->isolation() : std::string("not started");
}

core::Status Agent::start() {
  if (o_.node.empty()) return Error{"node", "give the node's name"};
  if (o_.state_dir.empty()) return Error{"state_dir", "give a state directory"};
  std::error_code ec;
  fs::create_directories(fs::path(o_.state_dir) / "agent" / "runs", ec);
  if (ec) return Error{"state_dir", "cannot create " + o_.state_dir + ": " + ec.message()};
  // The agent's state is its own: no job or other user reads it (docs/agent.md, "Files").
  for (const fs::path& d : {fs::path(o_.state_dir), fs::path(o_.state_dir) / "agent",
                            fs::path(o_.state_dir) / "agent" / "runs"}) {
    if (auto st = make_private_dir(d.string()); !st.ok()) return st.error();
  }
  auto found = backend_->discover();
  if (!found.ok()) return Error{"backend", backend_->name() + ": " + found.error().message()};
  devices_ = found.value();
  if (devices_.empty()) return Error{"backend", backend_->name() + " found no GPU on this node"};
  runner_ = std::make_unique<Runner>(o_.runner);
  health_ = std::make_unique<HealthMonitor>(devices_, o_.health);
  client_ = std::make_unique<ServerClient>(o_.server);
  if (o_.watch.count() > 0) {
    watcher_ = std::make_unique<AssignmentWatcher>(
        o_.server, node_path("/api/v1/agent/nodes/", o_.node, "/assignments"), o_.watch, [this] {
          {
            std::lock_guard lk(wake_mu_);
            news_ = true;
          }
          wake_.notify_all();
        });
  }
  started_ = Clock::now();
  load_state();
  for (const auto& r : runner_->recover()) {
    status_[r.key] = r;
    if (!records_.count(r.key)) {
      RunRecord rec;
      rec.key = r.key;
      rec.started_reported = true;  // it ran before the restart; a repeat report is harmless
      records_[r.key] = rec;
    }
  }
  for (auto it = records_.begin(); it != records_.end();) {
    if (!status_.count(it->first)) {
      drop_record(it->first);
      it = records_.erase(it);
    } else {
      ++it;
    }
  }
  say(std::to_string(devices_.size()) + " x " + devices_.front().model + " (" + backend_->name() +
      "), isolation: " + runner_->isolation() + ", " + std::to_string(status_.size()) +
      " run(s) recovered");
  thread_ = std::thread([this] { loop(); });
  return core::ok_status();
}

void Agent::request_stop(bool kill_runs) {
  kill_on_stop_ = kill_on_stop_ || kill_runs;
  stopping_ = true;
}

void Agent::stop(bool kill_runs) {
  request_stop(kill_runs);
  if (thread_.joinable()) thread_.join();
}

void Agent::loop() {
  while (!stopping_) {
    const auto begin = Clock::now();
    step();
    const auto next = begin + o_.poll;
    // Until the next step is due, or at once when the watch brings news (stop is checked
    // every 20 ms).
    std::unique_lock lk(wake_mu_);
    while (!stopping_ && !news_ && Clock::now() < next) {
      wake_.wait_until(
          lk, std::min<Clock::time_point>(next, Clock::now() + std::chrono::milliseconds(20)),
          [&] { return news_; });
    }
    news_ = false;
  }
  if (watcher_) watcher_->stop();
  if (kill_on_stop_ && runner_) {
    for (const auto& r : runner_->poll()) {
      if (r.phase == RunPhase::Running) runner_->stop(r.key, std::chrono::milliseconds(2000));
    }
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    for (;;) {
      bool alive = false;
      for (const auto& r : runner_->poll()) alive = alive || r.phase != RunPhase::Exited;
      if (!alive || Clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

void Agent::step() {
  status_.clear();
  for (auto& r : runner_->poll()) status_[r.key] = r;
  const auto now = Clock::now();
  if (now >= next_sample_) {
    sample_gpus();
    next_sample_ = now + o_.sample;
  }
  if (!registered_ && !try_register()) {
    enforce_lease();
    return;
  }
  if (watcher_) watcher_->start();  // once registered: the watch names a known node
  fetch_and_reconcile();
  check_readiness();
  ship_logs();
  send_reports();
  if (now >= next_heartbeat_) {
    send_heartbeat();
    // At least three heartbeats per lease, whatever --heartbeat-ms says: while a watch is held
    // and nothing else is sent, they are what keeps the lease (a server may give a short one).
    const std::chrono::milliseconds third{std::max(1, lease_seconds_) * 1000 / 3};
    next_heartbeat_ = now + std::min(o_.heartbeat, third);
  }
  if (now >= next_telemetry_) {
    if (next_telemetry_ != Clock::time_point{}) send_telemetry();
    next_telemetry_ = now + o_.telemetry;
  }
  enforce_lease();
  if (now >= next_prune_) {
    if (int n = runner_->prune(o_.keep_run_logs); n > 0) {
      say("removed the local logs of " + std::to_string(n) + " old run(s)");
    }
    next_prune_ = now + std::chrono::hours(1);
  }
}

void Agent::contact() {
  last_contact_ = wall_seconds();
  if (!reachable_) say("server reachable again");
  reachable_ = true;
  if (last_contact_ - last_contact_saved_ >= 2) {
    write_atomically(fs::path(o_.state_dir) / "agent" / "last_contact",
                     std::to_string(last_contact_) + "\n");
    last_contact_saved_ = last_contact_;
  }
}

void Agent::fail_contact(const Reply& r, const std::string& what) {
  if (r.status == 0) {
    if (watcher_) watcher_->interrupt();  // its connection may be as dead as this one
    if (reachable_) say("cannot reach the server at " + o_.server.url + " (" + r.error + ")");
    reachable_ = false;
    return;
  }
  if (r.status == 404 && what == "assignments") {
    // The server does not know this node (a new database): register again.
    registered_ = false;
  }
  say(what + " refused: HTTP " + std::to_string(r.status) + " " + r.error);
}

bool Agent::try_register() {
  if (rediscover_ && !rediscover()) return false;
  Registration reg;
  reg.name = o_.node;
  reg.cluster = o_.cluster;
  reg.block = o_.block;
  reg.address = o_.address;
  reg.labels = o_.labels;
  reg.devices = devices_;
  reg.backend = backend_->name();
  reg.isolation = runner_->isolation();
  const Isolation& iso = runner_->capabilities();
  reg.jobs_as_owner = iso.jobs_as_owner;
  reg.cgroup_limits = iso.cgroup_why_not.empty();
  reg.cgroup_why_not = iso.cgroup_why_not;
  reg.gpu_devices = iso.devices_cgroup.empty() ? "none" : "cgroup";
  reg.version = kVersion;
  auto body = registration_body(reg);
  if (!body.ok()) {
    say("cannot register: " + body.error().message());
    return false;
  }
  auto r = client_->post("/api/v1/nodes", body.value());
  if (!r.ok()) {
    fail_contact(r, "registration");
    return false;
  }
  contact();
  take_lease(r.body);
  registered_ = true;
  say("registered with " + o_.server.url + " (cluster " + o_.cluster + ", lease " +
      std::to_string(lease_seconds_) + " s)");
  return true;
}

void Agent::sample_gpus() {
  const double t = std::chrono::duration<double>(Clock::now() - started_).count();
  last_sample_ = backend_->sample(t);
  health_->observe(t, last_sample_);
  if (!last_sample_.ok()) return;
  GpuHolders holders;
  MigHolders migs;
  std::map<RunKey, ProcessTimes> times;
  for (const auto& [key, st] : status_) {
    if (st.phase == RunPhase::Exited) continue;
    auto rec = records_.find(key);
    if (rec == records_.end() || rec->second.gpus.empty()) continue;
    holders[key] = rec->second.gpus;
    for (const std::string& u : rec->second.uuids) {
      if (u.rfind("MIG-", 0) == 0) migs[key].push_back(u);
    }
    ProcessTimes pt = process_times(runner_->processes(key));
    // Where the run has a cgroup v2 directory, its CPU usage counts every process it ever had
    // (a tree scan misses those that ended unreaped) and its PSI files say how long it stalled.
    const CgroupStats cg = read_cgroup_stats(runner_->cgroup_dir(key));
    if (cg.cpu_seconds >= 0) pt.cpu_seconds = cg.cpu_seconds;
    pt.cpu_pressure_pct = cg.cpu_pressure_pct;
    pt.io_pressure_pct = cg.io_pressure_pct;
    times[key] = pt;
  }
  telemetry_.add(t, last_sample_.value(), holders, times, migs);
}

void Agent::fetch_and_reconcile() {
  // While the watch is live its answers are the assignments (the last ones still hold until the
  // next comes); else a poll.
  std::optional<Reply> news;
  if (watcher_ && watcher_->live()) news = watcher_->take();
  if (!news && watcher_ && watcher_->live() && assigned_) return reconcile_with(*assigned_);
  Reply r = news ? std::move(*news)
                 : client_->get(node_path("/api/v1/agent/nodes/", o_.node, "/assignments"));
  if (!r.ok()) {
    fail_contact(r, "assignments");
    return;
  }
  contact();
  auto parsed = parse_assignments(r.body);
  if (!parsed.ok()) {
    say("assignments not understood, nothing changed: " + parsed.error().message());
    return;
  }
  assigned_ = std::move(parsed.value());
  apply_mig_layouts(*assigned_);  // first: a run of this answer may be placed on the new layout
  restate_started(*assigned_);
  restate_ready(*assigned_);
  reconcile_with(*assigned_);
}

// The server says "starting" for a run that has started here and that this agent reported
// started: the server does not know it (it restarted, and which nodes of a gang started is not
// stored), so the report goes again. Once per answer of the server, never for a run ended here.
void Agent::restate_started(const Assignments& a) {
  for (const auto& run : a.run) {
    if (run.state != "starting") continue;
    auto rec = records_.find(run.key);
    auto st = status_.find(run.key);
    if (rec == records_.end() || st == status_.end() || !rec->second.started_reported ||
        rec->second.fenced || st->second.phase == RunPhase::Exited) {
      continue;
    }
    rec->second.started_reported = false;
    save_record(rec->second);
    say("job " + key_name(run.key) +
        ": the server does not know it started here (it restarted?): saying so again");
  }
}

void Agent::reconcile_with(const Assignments& a) {
  lease_seconds_ = a.lease_seconds;
  std::vector<LocalRun> local;
  for (const auto& [key, st] : status_) {
    LocalRun r{key, st.phase, st.stop_requested, {}, 1000};
    if (auto rec = records_.find(key); rec != records_.end()) {
      r.gpus = rec->second.gpus;
      r.gpu_milli = rec->second.gpu_milli;
    }
    local.push_back(std::move(r));
  }
  const auto actions = reconcile(a, local, done_);
  for (const auto& s : actions.stop) {
    say("job " + key_name(s.key) + ": stopping (" +
        (s.notice_seconds > 0 ? "warned, SIGTERM in " + std::to_string(s.notice_seconds) + " s, "
                              : std::string()) +
        "grace " + std::to_string(s.grace_seconds) + " s)");
    runner_->stop(s.key, std::chrono::seconds(s.grace_seconds),
                  std::chrono::seconds(s.notice_seconds));
  }
  for (const auto& k : actions.kill) {
    say("job " + key_name(k) + ": not assigned here any more, killing it");
    runner_->kill(k);
    auto& rec = records_[k];
    rec.key = k;
    rec.fenced = true;
    save_record(rec);
  }
  for (const auto& k : actions.lost) {
    const bool queued =
        std::any_of(lost_.begin(), lost_.end(), [&](const Report& x) { return x.key == k; });
    if (!queued) lost_.emplace_back(k, "lost");
  }
  std::set<RunKey> waiting;
  for (const auto* w : actions.waiting) {
    if (!waiting_.count(w->key)) {
      say("job " + key_name(w->key) + ": waiting until a run still on its GPUs has exited");
    }
    waiting.insert(w->key);
  }
  waiting_ = std::move(waiting);
  for (const auto* l : actions.launch) launch(*l);
}

LaunchSpec Agent::launch_spec(const Assignment& a, const DeviceChoice& d) const {
  LaunchSpec spec;
  spec.key = a.key;
  spec.command = a.command;
  spec.env = job_environment(a, d, o_.node);
  spec.gpu_uuids = d.uuids;
  spec.workdir = a.workdir;
  spec.owner = a.owner;
  spec.memory_mib = a.memory_mib;
  spec.cpus = a.cpus;
  gpu_device_files(d, devices_, o_.dev_dir, spec.allowed_devices, spec.denied_devices);
  return spec;
}

// The server says it knows nothing of a run's readiness (it restarted), or something else than
// this agent told it: the next result is reported again. Once per answer of the server.
void Agent::restate_ready(const Assignments& a) {
  for (const auto& run : a.run) {
    auto p = probes_.find(run.key);
    if (!run.ready_check || p == probes_.end() || !p->second.sent) continue;
    if (run.ready != p->second.sent) p->second.sent.reset();
  }
}

void Agent::check_readiness() {
  for (auto it = orphans_.begin(); it != orphans_.end();) {
    if (it->wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      it = orphans_.erase(it);
    } else {
      ++it;
    }
  }
  const auto now = Clock::now();
  std::set<RunKey> checked;
  if (assigned_) {
    for (const auto& a : assigned_->run) {
      if (!a.ready_check) continue;
      auto st = status_.find(a.key);
      auto rec = records_.find(a.key);
      if (st == status_.end() || rec == records_.end() || rec->second.fenced ||
          rec->second.launch_failed || st->second.phase != RunPhase::Running) {
        continue;
      }
      checked.insert(a.key);
      auto& p = probes_[a.key];
      const auto& c = *a.ready_check;
      const std::chrono::milliseconds timeout(std::int64_t{c.timeout_seconds} * 1000);
      std::optional<Runner::CheckOutcome> done;
      if (p.http && p.http->wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        done = p.http->get();
        p.http.reset();
      }
      if (p.command) {
        done = runner_->check_outcome(a.key, timeout);
        p.command = !done.has_value();
      }
      if (done) {
        const std::string reason = done->ok ? "" : printable(done->reason, 256);
        if (p.result != done->ok) {
          say("job " + key_name(a.key) + ": " + (done->ok ? "ready" : "not ready: " + reason));
        }
        p.result = done->ok;
        p.reason = reason;
      }
      if (p.http || p.command || now < p.next_at) continue;
      p.next_at = now + std::chrono::seconds(c.interval_seconds);
      if (!c.command.empty()) {
        DeviceChoice d{rec->second.uuids, rec->second.gpus, false};
        d.shared = a.gpu_milli < 1000 && (d.uuids.empty() || d.uuids[0].rfind("MIG-", 0) != 0);
        LaunchSpec spec = launch_spec(a, d);
        spec.command = c.command;
        if (auto s = runner_->start_check(spec); s.ok()) {
          p.command = true;
        } else {
          p.result = false;
          p.reason = printable("ready_command cannot start: " + s.error().message(), 256);
        }
      } else {
        p.http = std::async(std::launch::async, http_ready_check, c.port, c.path, timeout);
      }
    }
  }
  for (auto it = probes_.begin(); it != probes_.end();) {
    if (checked.count(it->first)) {
      ++it;
      continue;
    }
    if (it->second.http) orphans_.push_back(std::move(*it->second.http));
    if (it->second.command) runner_->cancel_check(it->first);
    it = probes_.erase(it);
  }
}

void Agent::launch(const Assignment& a) {
  RunRecord rec;
  rec.key = a.key;
  rec.gpus = a.gpus;
  rec.gpu_milli = a.gpu_milli;
  std::set<std::string> mig_in_use;
  for (const auto& [k, other] : records_) {
    auto st = status_.find(k);
    if (st == status_.end() || st->second.phase == RunPhase::Exited) continue;
    for (const auto& u : other.uuids) {
      if (u.rfind("MIG-", 0) == 0) mig_in_use.insert(u);
    }
  }
  auto choice = choose_devices(a, devices_, mig_in_use);
  if (a.command.empty()) {
    rec.launch_failed = true;
    rec.launch_error = "the job has no command to run (allot submit ... -- COMMAND)";
  } else if (!choice.ok()) {
    rec.launch_failed = true;
    rec.launch_error = choice.error().message();
  } else {
    rec.uuids = choice.value().uuids;
    LaunchSpec spec = launch_spec(a, choice.value());
    if (!a.container.empty()) {
      spec.container_template = o_.container_template;
      spec.container_image = a.container;
    }
    if (!a.container.empty() && o_.container_template.empty()) {
      rec.launch_failed = true;
      rec.launch_error = "the job asks for container " + a.container +
                         " but this agent has no --container-template (see docs/agent.md)";
    } else {
      auto st = runner_->launch(spec);
      if (!st.ok()) {
        rec.launch_failed = true;
        rec.launch_error = st.error().message();
      } else {
        status_[a.key] = st.value();
      }
    }
  }
  if (rec.launch_failed) {
    say("job " + key_name(a.key) + ": cannot start: " + rec.launch_error);
  } else {
    std::string visible;
    for (const auto& u : rec.uuids) visible += (visible.empty() ? "" : ",") + u;
    say("job " + key_name(a.key) + ": started on " + visible);
  }
  records_[a.key] = rec;
  save_record(rec);
}

void Agent::ship_logs() {
  for (auto& [key, rec] : records_) {
    auto st = status_.find(key);
    if (st == status_.end() || rec.fenced) continue;
    if (st->second.phase == RunPhase::Exited && !st->second.error.empty() && !rec.error_logged &&
        !st->second.stderr_path.empty()) {
      // Why it could not start, or why its end is unknown: where its owner looks.
      std::ofstream(st->second.stderr_path, std::ios::app)
          << "allot agent on " << o_.node << ": " << st->second.error << "\n";
      rec.error_logged = true;
      save_record(rec);
    }
    const std::pair<const char*, const std::string*> streams[] = {
        {"stdout", &st->second.stdout_path}, {"stderr", &st->second.stderr_path}};
    bool changed = false;
    for (const auto& [stream, path] : streams) {
      if (path->empty()) continue;
      std::ifstream in(*path, std::ios::binary);
      if (!in) continue;
      auto& offset = rec.shipped[stream];
      // Once the run has ended, the last bytes go with final=true (an empty body if need be),
      // so that the server can say the stream is complete.
      const bool ended = st->second.phase == RunPhase::Exited;
      auto& final_sent = rec.shipped[std::string(stream) + ".final"];
      for (int chunks = 0; chunks < 8 && !final_sent; ++chunks) {
        in.clear();
        in.seekg(offset);
        std::string data(kLogChunk, '\0');
        in.read(data.data(), static_cast<std::streamsize>(data.size()));
        data.resize(static_cast<std::size_t>(in.gcount()));
        const bool last = ended && data.size() < kLogChunk;
        if (data.empty() && !last) break;
        auto r = client_->post_bytes(logs_url(key, stream, offset, last), data);
        if (r.status == 409) {
          offset = 0;  // the server has less than we thought: resend; it skips what it has
          changed = true;
          continue;
        }
        if (!r.ok()) {
          if (r.status == 0) {
            fail_contact(r, "logs");
          } else if (r.status == 429 || r.status >= 500) {
            // Busy, or a server that is starting or standing by: the same bytes go again later.
          } else {
            // Refused for good (an ended run, a stale one): give up on this stream. (The read
            // above may have failed at the end of the file: cleared, or tellg() says -1 and the
            // run's exit, which waits for its logs to be shipped, would never be reported.)
            in.clear();
            in.seekg(0, std::ios::end);
            offset = static_cast<std::int64_t>(in.tellg());
            final_sent = 1;
            changed = true;
          }
          break;
        }
        contact();
        offset += static_cast<std::int64_t>(data.size());
        if (last) final_sent = 1;
        changed = true;
      }
    }
    if (changed) save_record(rec);
  }
}

void Agent::send_reports() {
  std::vector<Report> out;
  std::vector<RunKey> finishing;
  for (auto& [key, rec] : records_) {
    auto st = status_.find(key);
    if (rec.launch_failed) {
      if (rec.shipped["stderr"] == 0) {
        // The reason goes where its owner looks: the run's stderr (`allot logs --stderr`).
        const std::string text =
            "allot agent on " + o_.node + ": cannot start: " + rec.launch_error + "\n";
        auto r = client_->post_bytes(logs_url(key, "stderr", 0, true), text);
        if (r.status == 0) continue;  // unreachable: try again next time
        rec.shipped["stderr"] = static_cast<std::int64_t>(text.size());
      }
      out.emplace_back(key, "exited", 127);
      finishing.push_back(key);
      continue;
    }
    if (st == status_.end()) continue;
    const auto& s = st->second;
    if (!rec.started_reported && !rec.fenced) out.emplace_back(key, "started");
    if (s.phase != RunPhase::Exited) continue;
    finishing.push_back(key);
    if (rec.fenced) continue;
    // Logs first, so that once the server has the exit it has every byte too.
    std::error_code ec;
    auto complete = [&, &rec = rec](const std::string& path, const char* stream) {
      if (path.empty()) return true;
      auto size = fs::file_size(path, ec);
      return ec || (static_cast<std::int64_t>(size) <= rec.shipped[stream] &&
                    rec.shipped[std::string(stream) + ".final"] != 0);
    };
    if (!complete(s.stdout_path, "stdout") || !complete(s.stderr_path, "stderr")) {
      finishing.pop_back();
      continue;
    }
    // An exit whose status nobody saw (the shim died) is not a success: the run is lost.
    const char* event = rec.lease_lost              ? "lost"
                        : s.stop_requested          ? "preempted"
                        : !s.exit_code && !s.signal ? "lost"
                                                    : "exited";
    out.emplace_back(key, event, s.exit_code, s.signal);
  }
  for (const auto& l : lost_) out.push_back(l);
  // Readiness that changed since the server was last told (runs still running only).
  for (const auto& [key, p] : probes_) {
    if (!p.result || p.result == p.sent) continue;
    auto st = status_.find(key);
    if (st == status_.end() || st->second.phase != RunPhase::Running) continue;
    Report rep(key, "readiness");
    rep.ready = p.result;
    rep.reason = p.reason;
    out.push_back(std::move(rep));
  }
  // Fenced runs that ended: nothing to tell the server.
  for (auto it = finishing.begin(); it != finishing.end();) {
    auto rec = records_.find(*it);
    if (rec != records_.end() && rec->second.fenced) {
      forget_run(*it);
      it = finishing.erase(it);
    } else {
      ++it;
    }
  }
  if (out.empty()) return;
  auto r = client_->post(node_path("/api/v1/agent/nodes/", o_.node, "/reports"), reports_body(out));
  if (!r.ok()) {
    fail_contact(r, "reports");
    return;
  }
  contact();
  std::set<std::pair<RunKey, std::string>> answered;
  if (r.body.is_object() && r.body.contains("results") && r.body["results"].is_array()) {
    const auto& results = r.body["results"];
    for (std::size_t i = 0; i < results.size() && i < out.size(); ++i) {
      const auto& res = results[i];
      if (res.contains("error")) {
        say("job " + key_name(out[i].key) + " " + out[i].event + ": " +
            (res["error"].is_string() ? res["error"].get<std::string>() : res["error"].dump()));
      }
      answered.insert({out[i].key, out[i].event});
      if (out[i].event == "readiness") {
        // Told (or refused for good: a stale run): not said again until it changes.
        if (auto p = probes_.find(out[i].key); p != probes_.end()) p->second.sent = out[i].ready;
      }
      if (out[i].event == "started") {
        auto rec = records_.find(out[i].key);
        if (rec != records_.end()) {
          rec->second.started_reported = true;
          save_record(rec->second);
        }
      }
    }
  }
  for (const auto& k : finishing) {
    // Any definite answer ends it here: done, or refused because the server moved on.
    bool acked = false;
    for (const auto& rep : out) {
      if (rep.key == k && rep.event != "started" && rep.event != "readiness" &&
          answered.count({k, rep.event})) {
        acked = true;
      }
    }
    if (!acked) continue;
    forget_run(k);
    add_done(k);
  }
  std::vector<Report> still;
  for (const auto& l : lost_) {
    if (answered.count({l.key, "lost"})) {
      add_done(l.key);
    } else {
      still.push_back(l);
    }
  }
  lost_ = std::move(still);
}

void Agent::send_heartbeat() {
  HealthVerdict v = health_->verdict();
  if (!o_.health.script.empty()) {
    const auto now = Clock::now();
    if (now >= next_script_) {
      script_verdict_ = run_health_script(o_.health.script, o_.health.script_timeout);
      next_script_ = now + o_.health_script_every;
    }
    merge(v, script_verdict_);
  }
  json body = {{"health", v.healthy ? "healthy" : "unhealthy"}};
  if (!v.reason.empty()) body["reason"] = v.reason.substr(0, 512);
  auto r = client_->post(node_path("/api/v1/nodes/", o_.node, "/heartbeat"), body);
  if (!r.ok()) {
    fail_contact(r, "heartbeat");
    return;
  }
  contact();
  take_lease(r.body);
}

void Agent::send_telemetry() {
  auto jobs = telemetry_.take_jobs();
  std::vector<GpuSample> gpus;
  if (last_sample_.ok()) gpus = last_sample_.value();
  auto r = client_->post(node_path("/api/v1/agent/nodes/", o_.node, "/telemetry"),
                         telemetry_body(wall_seconds(), gpus, jobs));
  if (!r.ok()) {
    fail_contact(r, "telemetry");
    return;
  }
  contact();
}

void Agent::enforce_lease() {
  if (last_contact_ == 0) return;  // never in contact: nothing was assigned by anyone
  if (wall_seconds() - last_contact_ <= lease_seconds_) return;
  for (auto& [key, st] : status_) {
    if (st.phase == RunPhase::Exited) continue;
    auto& rec = records_[key];
    rec.key = key;
    if (rec.lease_lost) continue;
    say("job " + key_name(key) + ": no contact with the server for more than " +
        std::to_string(lease_seconds_) + " s (the lease): stopping it");
    rec.lease_lost = true;
    save_record(rec);
    runner_->stop(key, o_.lease_expiry_grace);
  }
}

void Agent::load_state() {
  const fs::path dir = fs::path(o_.state_dir) / "agent";
  const auto lc = read_file(dir / "last_contact");
  if (!lc.empty()) last_contact_ = last_contact_saved_ = std::atoll(lc.c_str());
  std::ifstream done(dir / "done");
  core::JobId job = 0;
  int run = 0;
  while (done >> job >> run) done_.insert({job, run});
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir / "runs", ec)) {
    if (e.path().extension() != ".json") continue;
    auto j = json::parse(read_file(e.path()), nullptr, false);
    if (!j.is_object()) continue;
    RunRecord r;
    try {  // a record damaged on disk (fields of another type) is passed over, not fatal
      r.key.job = j.value("job", core::JobId{0});
      r.key.run = j.value("run", 0);
      if (r.key.job == 0) continue;
      r.gpus = j.value("gpus", std::vector<int>{});
      r.gpu_milli = j.value("gpu_milli", 1000);
      r.uuids = j.value("uuids", std::vector<std::string>{});
      r.started_reported = j.value("started_reported", false);
      r.fenced = j.value("fenced", false);
      r.lease_lost = j.value("lease_lost", false);
      r.error_logged = j.value("error_logged", false);
      r.shipped = j.value("shipped", std::map<std::string, std::int64_t>{});
    } catch (const json::exception& err) {
      say("run record " + e.path().string() + " cannot be read (" + err.what() + "): ignored");
      continue;
    }
    records_[r.key] = r;
  }
}

void Agent::save_record(const RunRecord& r) const {
  if (r.launch_failed) return;  // reported at once; nothing to recover
  json j = {{"job", r.key.job},
            {"run", r.key.run},
            {"gpus", r.gpus},
            {"gpu_milli", r.gpu_milli},
            {"uuids", r.uuids},
            {"started_reported", r.started_reported},
            {"fenced", r.fenced},
            {"lease_lost", r.lease_lost},
            {"error_logged", r.error_logged},
            {"shipped", r.shipped}};
  write_atomically(record_path(r.key), j.dump());
}

fs::path Agent::record_path(const RunKey& k) const {
  return fs::path(o_.state_dir) / "agent" / "runs" / (key_name(k) + ".json");
}

void Agent::drop_record(const RunKey& k) {
  std::error_code ec;
  fs::remove(record_path(k), ec);
}

// A run the agent is done with: the runner's state, its record and its entry go (its logs stay
// until pruned).
void Agent::forget_run(const RunKey& k) {
  runner_->forget(k);
  drop_record(k);
  records_.erase(k);
}

// The lease the server states in a reply, if it states one.
void Agent::take_lease(const json& reply) {
  if (reply.is_object() && reply.contains("lease_seconds") &&
      reply["lease_seconds"].is_number_integer()) {
    lease_seconds_ = std::max(1, reply["lease_seconds"].get<int>());
  }
}

std::string Agent::logs_url(const RunKey& k, const std::string& stream, std::int64_t offset,
                            bool final) const {
  return node_path("/api/v1/agent/nodes/", o_.node, "/logs") + "?job=" + std::to_string(k.job) +
         "&run=" + std::to_string(k.run) + "&stream=" + stream +
         "&offset=" + std::to_string(offset) + (final ? "&final=true" : "");
}

void Agent::add_done(const RunKey& k) {
  if (!done_.insert(k).second) return;
  const fs::path path = fs::path(o_.state_dir) / "agent" / "done";
  if (done_.size() > kMaxDone) {
    // Keep the newest half (job ids grow), rewritten at once.
    while (done_.size() > kMaxDone / 2) done_.erase(done_.begin());
    std::string text;
    for (const auto& d : done_) text += std::to_string(d.job) + " " + std::to_string(d.run) + "\n";
    write_atomically(path, text);
    return;
  }
  std::ofstream(path, std::ios::app) << k.job << " " << k.run << "\n";
}

}  // namespace allot::agent
