#include "agent/reconcile.h"

#include <algorithm>
#include <map>

namespace allot::agent {
namespace {

// Whether two runs may not hold their GPUs at once: they share one and either wants it whole.
bool collide(const std::vector<int>& a, int a_milli, const std::vector<int>& b, int b_milli) {
  if (a_milli < 1000 && b_milli < 1000) return false;
  return std::any_of(a.begin(), a.end(),
                     [&](int g) { return std::find(b.begin(), b.end(), g) != b.end(); });
}

}  // namespace

Actions reconcile(const Assignments& assigned, const std::vector<LocalRun>& local,
                  const std::set<RunKey>& done) {
  Actions out;
  std::map<RunKey, const LocalRun*> here;
  for (const auto& r : local) here[r.key] = &r;
  std::map<RunKey, const StopOrder*> stops;
  for (const auto& s : assigned.stop) stops[s.key] = &s;
  std::set<RunKey> wanted;
  for (const auto& a : assigned.run) {
    wanted.insert(a.key);
    if (here.count(a.key) || done.count(a.key)) continue;
    if (a.state == "starting") {
      const bool held = std::any_of(local.begin(), local.end(), [&](const LocalRun& r) {
        return r.phase != RunPhase::Exited && collide(a.gpus, a.gpu_milli, r.gpus, r.gpu_milli);
      });
      (held ? out.waiting : out.launch).push_back(&a);
    } else {
      out.lost.push_back(a.key);
    }
  }
  for (const auto& s : assigned.stop) {
    auto it = here.find(s.key);
    if (it == here.end()) {
      // Asked to stop what does not run here: it is gone already.
      if (!done.count(s.key)) out.lost.push_back(s.key);
      continue;
    }
    if (it->second->phase == RunPhase::Running && !it->second->stop_requested) {
      out.stop.push_back(s);
    }
  }
  for (const auto& r : local) {
    if (r.phase == RunPhase::Exited) continue;
    if (wanted.count(r.key) || stops.count(r.key)) continue;
    out.kill.push_back(r.key);
  }
  return out;
}

}  // namespace allot::agent
