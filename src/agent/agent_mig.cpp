// The agent's half of dynamic MIG re-partitioning (docs/agent-protocol.md, "mig_layouts"): the
// scheduler picks new layouts for idle GPUs, the agent makes them through its backend and
// registers again, so that the server counts the instances that exist rather than the ones it
// asked for. Kept apart from agent.cpp, which is the loop.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent.h"

namespace allot::agent {
namespace {

using Clock = std::chrono::steady_clock;

// How long the same orders, repeated by the server, are not acted on again: it repeats them until
// it has heard the layout achieved, and a layout that failed (or a GPU still held by a run) is
// tried again only this often, not on every poll.
constexpr auto kMigRetry = std::chrono::seconds(30);

std::string layout_name(const std::vector<std::string>& profiles) {
  if (profiles.empty()) return "none (the GPU whole, MIG mode off)";
  std::string out;
  for (const std::string& p : profiles) out += (out.empty() ? "" : ", ") + p;
  return "[" + out + "]";
}

// Whether the GPU has exactly these instances already (in any order).
bool has_layout(const GpuDevice& d, std::vector<std::string> profiles) {
  if (d.mig_enabled == profiles.empty()) return false;
  std::vector<std::string> now;
  for (const MigDevice& m : d.mig) now.push_back(m.profile);
  std::sort(now.begin(), now.end());
  std::sort(profiles.begin(), profiles.end());
  return now == profiles;
}

}  // namespace

void Agent::apply_mig_layouts(const Assignments& a) {
  if (a.mig_layouts.empty()) {
    mig_orders_.clear();
    return;
  }
  const auto now = Clock::now();
  if (a.mig_layouts == mig_orders_ && now < mig_orders_at_ + kMigRetry) return;
  mig_orders_ = a.mig_layouts;
  mig_orders_at_ = now;
  // The GPUs a run here holds (starting, running or stopping): never re-partitioned under it. A
  // run recovered without a record of its GPUs may be on any of them.
  std::map<int, RunKey> held;
  std::optional<RunKey> anywhere;
  for (const auto& [key, st] : status_) {
    if (st.phase == RunPhase::Exited) continue;
    auto rec = records_.find(key);
    if (rec == records_.end() || rec->second.gpus.empty()) {
      anywhere = key;
      continue;
    }
    for (int g : rec->second.gpus) held.emplace(g, key);
  }
  for (const MigLayoutOrder& order : a.mig_layouts) {
    const std::string what =
        "GPU " + std::to_string(order.gpu) + ": MIG layout " + layout_name(order.profiles);
    auto h = held.find(order.gpu);
    if (h != held.end() || anywhere) {
      const RunKey k = h != held.end() ? h->second : *anywhere;
      say(what + " not applied: job " + std::to_string(k.job) + "." + std::to_string(k.run) +
          " runs on it" + (h != held.end() ? "" : " (its GPUs unknown since a restart)"));
      continue;
    }
    auto d = std::find_if(devices_.begin(), devices_.end(),
                          [&](const GpuDevice& x) { return x.index == order.gpu; });
    if (d != devices_.end() && has_layout(*d, order.profiles)) {
      // Made again it would only change the instances' UUIDs, and take the driver's seconds.
      say(what + ": already so");
      continue;
    }
    // The driver takes seconds a GPU: between GPUs the node goes on saying it is alive, so that a
    // node splitting many is not taken for a silent one (the server's node timeout).
    if (Clock::now() >= next_heartbeat_) {
      send_heartbeat();
      const std::chrono::milliseconds third{std::max(1, lease_seconds_) * 1000 / 3};
      next_heartbeat_ = Clock::now() + std::min(o_.heartbeat, third);
    }
    say(what + ": re-partitioning");
    const auto begin = Clock::now();
    const core::Status done = backend_->reconfigure_mig(order.gpu, order.profiles);
    const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    if (done.ok()) {
      char took[32];
      std::snprintf(took, sizeof took, "%.1f", seconds);
      say(what + " applied in " + took + " s");
    } else {
      say(what + " not applied: " + done.error().message());
    }
  }
  // Whether or not anything changed: the server learns the layout each GPU has now.
  registered_ = false;
  if (rediscover()) try_register();
}

bool Agent::rediscover() {
  auto found = backend_->discover();
  if (!found.ok() || found.value().empty()) {
    rediscover_ = true;
    say("cannot discover the GPUs again after re-partitioning (" +
        (found.ok() ? std::string("none found") : found.error().message()) +
        "): registering once they are read");
    return false;
  }
  devices_ = std::move(found.value());
  rediscover_ = false;
  return true;
}

}  // namespace allot::agent
