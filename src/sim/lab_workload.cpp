#include "sim/lab_workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numbers>

#include "sim/rng.h"

namespace allot::sim {
namespace {

constexpr double kDay = 86400.0;
// Stream namespaces of mix_seed, so that the open loop's draws and the users' never overlap.
constexpr std::uint64_t kOpenStreams = 1;
constexpr std::uint64_t kUserStreams = 2;

double mean_gpus(const LabKindModel& k) {
  double w = 0, s = 0;
  for (std::size_t i = 0; i < k.gpu_sizes.size(); ++i) {
    w += k.gpu_weights[i];
    s += k.gpu_weights[i] * k.gpu_sizes[i];
  }
  return w > 0 ? s / w : 0;
}

// The fraction of a team's GPU-time that is kind `k`.
double kind_fraction(const LabWorkloadModel& m, const LabTeam& t, int k) {
  if (k == static_cast<int>(LabKind::LargeGang)) return t.gang_fraction;
  double rest = 0;
  for (int i = 0; i < kLabKinds; ++i) {
    if (i != static_cast<int>(LabKind::LargeGang)) rest += m.mix[i];
  }
  return rest > 0 ? (1 - t.gang_fraction) * m.mix[k] / rest : 0;
}

// The relative arrival rate at time t (seconds from a Monday 00:00), at most 1.
double rhythm(const LabWorkloadModel& m, double t) {
  const double day = std::floor(t / kDay);
  const double hour = (t - day * kDay) / 3600.0;
  const bool weekend = static_cast<long>(day) % 7 >= 5;
  const double r =
      (1 + m.diurnal_amplitude * std::cos(2 * std::numbers::pi * (hour - m.peak_hour) / 24.0)) *
      (weekend ? m.weekend_factor : 1.0);
  return r / (1 + m.diurnal_amplitude);
}

// Whole seconds in [lo, hi], log-uniform (lo = hi = 0 gives 0).
core::Duration log_uniform_seconds(Rng& rng, core::Duration lo, core::Duration hi) {
  if (hi <= 0) return 0;
  if (lo >= hi) return lo;
  return static_cast<core::Duration>(
      std::llround(rng.log_uniform(static_cast<double>(lo), static_cast<double>(hi))));
}

int draw_gpus(Rng& rng, const LabKindModel& k) {
  double total = 0;
  for (double w : k.gpu_weights) total += w;
  double x = rng.uniform() * total;
  for (std::size_t i = 0; i < k.gpu_sizes.size(); ++i) {
    if (x < k.gpu_weights[i]) return k.gpu_sizes[i];
    x -= k.gpu_weights[i];
  }
  return k.gpu_sizes.back();
}

// One job of `team` and `kind` (no submit time yet).
SimJob draw_job(const LabWorkloadModel& m, std::size_t team, int kind, Rng& rng) {
  const LabKindModel& k = m.kinds[kind];
  const LabTeam& t = m.teams[team];
  SimJob j;
  j.budget = "/" + t.program + "/" + t.name;
  j.gpus = draw_gpus(rng, k);
  j.duration = std::max<core::Duration>(60, log_uniform_seconds(rng, k.duration_lo, k.duration_hi));
  // A contract never outlasts the work it protects.
  j.min_runtime =
      std::min(j.duration, log_uniform_seconds(rng, k.min_runtime_lo, k.min_runtime_hi));
  j.kind = k.kind;
  j.resumable = rng.bernoulli(k.resumable);
  const double p = rng.uniform();
  j.priority = p < k.high_priority                    ? core::Priority::High
               : p < k.high_priority + k.low_priority ? core::Priority::Low
                                                      : core::Priority::Normal;
  j.utilization = k.utilization;
  j.utilization_known = true;
  return j;
}

// A job that would overshoot its stream's GPU-time target is made to fit what is left: the largest
// of the kind's sizes that runs at least the kind's shortest duration in it, for the time left
// (at most the longest duration). False when not even the smallest size fits: the stream ends,
// short of its target by less than one smallest, shortest job.
bool fit_last_job(const LabKindModel& k, double left, SimJob& j) {
  int gpus = 0;
  for (int g : k.gpu_sizes) {
    if (static_cast<double>(g) * static_cast<double>(k.duration_lo) <= left)
      gpus = std::max(gpus, g);
  }
  if (gpus == 0) return false;
  j.gpus = gpus;
  j.duration = std::min<core::Duration>(
      k.duration_hi, static_cast<core::Duration>(left / static_cast<double>(gpus)));
  j.min_runtime = std::min(*j.min_runtime, j.duration);
  return true;
}

// The next moment at or after `from` that a user submits: an exponential think time, drawn again
// while the daily rhythm says nobody is at work (thinning).
core::Time next_submission(const LabWorkloadModel& m, Rng& rng, core::Time from) {
  double t = static_cast<double>(from) + rng.exponential(static_cast<double>(m.think_time));
  while (!rng.bernoulli(rhythm(m, t))) t += rng.exponential(static_cast<double>(m.think_time));
  return static_cast<core::Time>(std::floor(t));
}

struct User {
  std::size_t team = 0;
  int kind = 0;
  int slots = 0;  // jobs kept outstanding
};

// The closed loop's people: how many per (team, kind), and how many jobs each keeps outstanding.
// Slots per (team, kind) are its share of `load` x the cluster's GPUs over the kind's mean job
// size; they are dealt out `outstanding_per_user` to a person.
std::vector<User> closed_loop_users(const LabWorkloadModel& m) {
  const std::vector<double> frac = lab_demand_fractions(m);
  const double gpus = static_cast<double>(m.nodes) * m.gpus_per_node;
  std::vector<User> users;
  // Slots are rounded on the running sum over teams, kind by kind, so that each kind's total is
  // within half a slot of its target and a team's within one slot, however small its part.
  std::vector<double> carried(kLabKinds, 0.0);
  for (std::size_t t = 0; t < m.teams.size(); ++t) {
    for (int k = 0; k < kLabKinds; ++k) {
      const double want = m.load * gpus * frac[t] * kind_fraction(m, m.teams[t], k);
      const double before = carried[k];
      carried[k] += want / mean_gpus(m.kinds[k]);
      int slots = static_cast<int>(std::lround(carried[k]) - std::lround(before));
      while (slots > 0) {
        const int s = std::min(slots, m.outstanding_per_user);
        users.push_back(User{t, k, s});
        slots -= s;
      }
    }
  }
  return users;
}

class ClosedLoop : public JobSource {
 public:
  explicit ClosedLoop(const LabWorkloadModel& m) : m_(m), users_(closed_loop_users(m)) {
    for (std::size_t u = 0; u < users_.size(); ++u) {
      rngs_.emplace_back(mix_seed(mix_seed(m.seed, kUserStreams), u));
    }
  }

  // Each person's first jobs.
  std::vector<SimJob> first_jobs() {
    std::vector<SimJob> out;
    for (std::size_t u = 0; u < users_.size(); ++u) {
      for (int s = 0; s < users_[u].slots; ++s) {
        if (auto j = next(u, 0)) out.push_back(std::move(*j));
      }
    }
    return out;
  }

  std::vector<SimJob> on_job_end(const SimJob& ended, core::Time t) override {
    if (ended.user == 0 || ended.user > users_.size()) return {};
    auto j = next(ended.user - 1, t);
    if (!j) return {};
    return {std::move(*j)};
  }

  core::Time horizon() const override { return static_cast<core::Time>(m_.days * kDay); }

 private:
  std::optional<SimJob> next(std::size_t u, core::Time after) {
    Rng& rng = rngs_[u];
    SimJob j = draw_job(m_, users_[u].team, users_[u].kind, rng);
    j.submit = next_submission(m_, rng, after);
    if (j.submit >= horizon()) return std::nullopt;  // the person stops at the period's end
    j.user = static_cast<std::uint32_t>(u + 1);
    return j;
  }

  LabWorkloadModel m_;
  std::vector<User> users_;
  std::vector<Rng> rngs_;
};

}  // namespace

const char* to_string(LabKind k) {
  switch (k) {
    case LabKind::Debug:
      return "debug";
    case LabKind::Interactive:
      return "interactive";
    case LabKind::Batch:
      return "batch";
    case LabKind::LargeGang:
      return "large-gang";
    case LabKind::Sweep:
      return "sweep";
  }
  return "?";
}

std::vector<LabTeam> LabWorkloadModel::default_teams() {
  // Shares in percent (sum 100), demand factors (relative, before scaling to the load), and the
  // part of each team's GPU-time that is large gangs: pre-training lives on gangs, science
  // almost never uses them.
  return {
      {"pretraining", "olmo-core", 18.5, 1.2, 0.70},   {"pretraining", "data", 12.0, 0.8, 0.30},
      {"pretraining", "scaling", 6.0, 2.0, 0.60},      {"post-training", "tulu", 10.0, 1.5, 0.45},
      {"post-training", "rl", 8.0, 0.5, 0.35},         {"post-training", "safety", 5.0, 3.0, 0.10},
      {"post-training", "evals", 3.0, 4.0, 0.00},      {"multimodal", "molmo", 9.0, 0.3, 0.50},
      {"multimodal", "video", 6.0, 1.0, 0.35},         {"multimodal", "robotics", 4.0, 2.5, 0.10},
      {"multimodal", "speech", 2.5, 0.6, 0.00},        {"science", "climate", 5.0, 0.4, 0.20},
      {"science", "semantic-scholar", 4.5, 1.0, 0.00}, {"science", "bio", 4.5, 0.7, 0.25},
      {"science", "agents", 2.0, 3.5, 0.00},
  };
}

std::vector<LabKindModel> LabWorkloadModel::default_kinds() {
  using core::kHour;
  using core::kMinute;
  std::vector<LabKindModel> k(kLabKinds);
  // Debug: a few GPUs for minutes; protected for its whole (short) run. Sizes above the policy's
  // max_debug_gpus (4) are submitted as batch.
  k[0] = {core::JobKind::Debug,
          {1, 2, 4, 8},
          {0.4, 0.3, 0.2, 0.1},
          2 * kMinute,
          15 * kMinute,
          2 * kMinute,
          15 * kMinute,
          0.0,
          0.3,
          0.0,
          0.4};
  // Interactive: notebooks and data analysis, an hour or two up to a working day; low use.
  k[1] = {core::JobKind::Interactive,
          {1, 2, 4, 8},
          {0.5, 0.25, 0.15, 0.1},
          30 * kMinute,
          8 * kHour,
          30 * kMinute,
          2 * kHour,
          0.0,
          0.2,
          0.0,
          0.3};
  // Batch: single-node training, evaluation and inference runs of hours.
  k[2] = {core::JobKind::Batch,
          {1, 2, 4, 8},
          {0.15, 0.15, 0.3, 0.4},
          1 * kHour,
          24 * kHour,
          30 * kMinute,
          4 * kHour,
          0.7,
          0.2,
          0.1,
          0.85};
  // Large gangs: multi-node training of 32-256 GPUs (up to a quarter of the cluster), running for
  // half a day to five days, mostly resumable, protected for a few hours.
  k[3] = {core::JobKind::Batch,
          {32, 64, 128, 256},
          {0.4, 0.3, 0.2, 0.1},
          12 * kHour,
          5 * (24 * kHour),
          2 * kHour,
          6 * kHour,
          0.85,
          0.3,
          0.0,
          0.95};
  // Preemptible sweeps: hyper-parameter and ablation jobs with minimum runtime 0 (unallocated).
  k[4] = {core::JobKind::Batch,
          {1, 2, 4, 8},
          {0.3, 0.2, 0.2, 0.3},
          30 * kMinute,
          6 * kHour,
          0,
          0,
          0.9,
          0.0,
          0.5,
          0.9};
  return k;
}

core::Status validate(const LabWorkloadModel& m) {
  auto bad = [](const std::string& field, const std::string& why) {
    return core::Error{field, why};
  };
  if (m.days < 1) return bad("days", "must be at least 1");
  if (!(m.load > 0) || m.load > 100) return bad("load", "must be a ratio above 0 (e.g. 2.5)");
  if (m.nodes < 1 || m.gpus_per_node < 1) return bad("nodes", "the cluster needs nodes and GPUs");
  if (m.teams.empty()) return bad("teams", "at least one team");
  if (m.kinds.size() != kLabKinds || m.mix.size() != kLabKinds) {
    return bad("kinds", "one entry per kind (debug, interactive, batch, large-gang, sweep)");
  }
  double share = 0, demand = 0;
  for (const LabTeam& t : m.teams) {
    if (t.program.empty() || t.name.empty()) return bad("teams", "a team needs a program and name");
    if (!(t.share > 0)) return bad("teams." + t.name + ".share", "must be above 0");
    if (!(t.demand_factor >= 0)) return bad("teams." + t.name + ".demand_factor", "must be >= 0");
    if (t.gang_fraction < 0 || t.gang_fraction > 1) {
      return bad("teams." + t.name + ".gang_fraction", "must be between 0 and 1");
    }
    share += t.share;
    demand += t.share * t.demand_factor;
  }
  if (!(demand > 0)) return bad("teams", "no team has demand");
  const int cluster = m.nodes * m.gpus_per_node;
  for (int k = 0; k < kLabKinds; ++k) {
    const LabKindModel& d = m.kinds[k];
    const std::string name = std::string("kinds.") + to_string(static_cast<LabKind>(k));
    if (d.gpu_sizes.empty() || d.gpu_sizes.size() != d.gpu_weights.size()) {
      return bad(name + ".gpu_sizes", "one weight per size, at least one size");
    }
    for (int g : d.gpu_sizes) {
      if (g < 1 || g > cluster) return bad(name + ".gpu_sizes", "a size must fit the cluster");
      if (g > m.gpus_per_node && g % m.gpus_per_node != 0) {
        return bad(name + ".gpu_sizes", "a multi-node size must be whole nodes");
      }
    }
    if (d.duration_lo < 1 || d.duration_hi < d.duration_lo) {
      return bad(name + ".duration", "needs 0 < lo <= hi");
    }
    if (d.min_runtime_lo < 0 || d.min_runtime_hi < d.min_runtime_lo) {
      return bad(name + ".min_runtime", "needs 0 <= lo <= hi");
    }
    if (m.mix[k] < 0) return bad("mix", "fractions must be >= 0");
  }
  if (m.diurnal_amplitude < 0 || m.diurnal_amplitude >= 1) {
    return bad("diurnal_amplitude", "must be in [0, 1)");
  }
  if (!(m.weekend_factor > 0) || m.weekend_factor > 1) {
    return bad("weekend_factor", "must be in (0, 1]");
  }
  if (m.outstanding_per_user < 1) return bad("outstanding_per_user", "must be at least 1");
  if (m.think_time < 1) return bad("think_time", "must be at least 1 second");
  (void)share;  // shares are normalised down the tree, so they need not sum to exactly 100
  return core::ok_status();
}

ClusterConfig lab_cluster(const LabWorkloadModel& m) {
  ClusterConfig c;
  c.name = "lab-" + std::to_string(m.nodes * m.gpus_per_node);
  c.pools.push_back(
      NodePool{"h100", m.nodes, m.gpu_model, m.gpus_per_node, m.nodes_per_block, 0, {}});
  return c;
}

BudgetConfig lab_budgets(const LabWorkloadModel& m) {
  // A program's share is the sum of its teams'; a team's share within it is its own, so a
  // leaf's fraction (the product down its path) is the team's share of the whole.
  BudgetConfig b;
  std::vector<std::string> programs;
  for (const LabTeam& t : m.teams) {
    if (std::find(programs.begin(), programs.end(), t.program) == programs.end()) {
      programs.push_back(t.program);
    }
  }
  for (const std::string& p : programs) {
    double sum = 0;
    for (const LabTeam& t : m.teams) sum += t.program == p ? t.share : 0;
    b.budgets.push_back(BudgetEntry{"/" + p, sum});
    for (const LabTeam& t : m.teams) {
      if (t.program == p) b.budgets.push_back(BudgetEntry{"/" + p + "/" + t.name, t.share});
    }
  }
  return b;
}

std::vector<double> lab_demand_fractions(const LabWorkloadModel& m) {
  std::vector<double> f;
  double sum = 0;
  for (const LabTeam& t : m.teams) {
    f.push_back(t.share * t.demand_factor);
    sum += f.back();
  }
  for (double& x : f) x = sum > 0 ? x / sum : 0;
  return f;
}

Workload generate_lab_workload(const LabWorkloadModel& m) {
  Workload w;
  w.source = "lab";
  w.format = "lab";
  if (m.closed_loop) {
    ClosedLoop loop(m);
    w.jobs = loop.first_jobs();
  } else {
    const std::vector<double> frac = lab_demand_fractions(m);
    const double span = m.days * kDay;
    const double capacity = static_cast<double>(m.nodes) * m.gpus_per_node * span;
    for (std::size_t t = 0; t < m.teams.size(); ++t) {
      for (int k = 0; k < kLabKinds; ++k) {
        const double target = m.load * capacity * frac[t] * kind_fraction(m, m.teams[t], k);
        Rng rng(mix_seed(mix_seed(m.seed, kOpenStreams), t * kLabKinds + k));
        const LabKindModel& kind = m.kinds[k];
        double sum = 0;
        while (sum < target) {
          SimJob j = draw_job(m, t, k, rng);
          const double left = target - sum;
          if (static_cast<double>(j.gpus) * static_cast<double>(j.duration) > left &&
              !fit_last_job(kind, left, j)) {
            break;
          }
          sum += static_cast<double>(j.gpus) * static_cast<double>(j.duration);
          double at = rng.uniform(0, span);
          while (!rng.bernoulli(rhythm(m, at))) at = rng.uniform(0, span);
          j.submit = static_cast<core::Time>(std::floor(at));
          w.jobs.push_back(std::move(j));
        }
      }
    }
  }
  sort_jobs(w, true);
  return w;
}

std::unique_ptr<JobSource> lab_closed_loop(const LabWorkloadModel& m) {
  if (!m.closed_loop) return nullptr;
  return std::make_unique<ClosedLoop>(m);
}

std::string workload_jsonl(const Workload& w) {
  std::string out;
  for (const SimJob& j : w.jobs) {
    nlohmann::ordered_json o;
    o["id"] = j.id;
    o["submit"] = j.submit;
    o["budget"] = j.budget;
    o["gpus"] = j.gpus;
    o["duration"] = j.duration;
    if (j.min_runtime) o["min_runtime"] = *j.min_runtime;
    if (j.kind) o["kind"] = core::to_string(*j.kind);
    if (j.resumable) o["resumable"] = *j.resumable;
    if (j.priority) o["priority"] = core::to_string(*j.priority);
    o["utilization"] = j.utilization;
    if (j.user) o["user"] = j.user;
    out += o.dump();
    out += '\n';
  }
  return out;
}

std::string lab_regime(const LabWorkloadModel& m) {
  char buf[96];
  if (m.closed_loop) {
    std::snprintf(buf, sizeof buf, "closed loop, %.2fx outstanding, %d days", m.load, m.days);
  } else {
    std::snprintf(buf, sizeof buf, "open loop, load %.2fx, %d days", m.load, m.days);
  }
  return buf;
}

}  // namespace allot::sim
