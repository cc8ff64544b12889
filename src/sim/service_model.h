// Inference services in the simulator (docs/simulator.md, "Inference services"): long-running
// replicated jobs with a diurnal request load, kept and scaled the way the server keeps them
// (docs/policy.md section 15) with the core's autoscaler (core/autoscale.h), so that both tiers,
// protected training and elastic inference, are measured on one cluster.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/autoscale.h"
#include "core/status.h"
#include "core/types.h"
#include "sim/budget_config.h"

namespace allot::sim {

// The request load a service reports: a daily cycle between `trough` and `peak` (requests/s, the
// whole service's), highest at `peak_hour` (0-24, of the simulated day), times a seeded
// multiplicative noise of up to +/- `noise` drawn each report.
struct DiurnalLoad {
  double trough = 0;
  double peak = 0;
  double peak_hour = 14;
  double noise = 0;
};

struct SimService {
  std::string name;
  std::string budget;  // a leaf
  int gpus = 1;        // per replica, whole GPUs on one node
  std::string mig;     // or a MIG profile per replica ("3g.40gb")
  int min_replicas = 1;
  int max_replicas = 1;
  core::Duration contract = 8 * core::kHour;  // the protected replicas' minimum runtime
  // From a replica's start until it serves (loading its model: the readiness check's first pass).
  core::Duration start_delay = 2 * core::kMinute;
  // Requests/s one serving replica answers; 0 = not modelled (no served fraction).
  double capacity = 0;
  DiurnalLoad load;
  // GPU memory its serving replicas use, as a fraction of their GPUs': `memory_idle` plus
  // `memory_per_request` for each request/s a replica serves, at most 1. Not modelled (no memory
  // signal) unless `memory_modelled`.
  bool memory_modelled = false;
  double memory_idle = 0;
  double memory_per_request = 0;
  core::Duration report_every = core::kMinute;  // how often the service reports its load
  core::Autoscale autoscale;                    // the load and memory watermarks and the cool-down
  std::size_t line = 0;                         // where it came from, for messages
};

// The load service `s` (number `index` in its file) reports at `t`, with its noise drawn from
// `seed`: the same for every policy run.
double service_load(const SimService& s, std::size_t index, std::uint64_t seed, core::Time t);
// The mean fraction of GPU memory used on the serving replicas' GPUs at `load` requests/s in all
// over `serving` replicas, or nothing when the service models no memory or none serves.
std::optional<double> service_memory(const SimService& s, double load, int serving);

// A services file: the services, and budgets to add to the workload's tree for them (optional:
// a service may also be funded by a budget the tree has).
struct ServiceFile {
  std::string path;
  BudgetConfig budgets;  // empty: none added
  std::vector<SimService> services;
};

// `services:` a list of services, and `budgets:` a budget tree as in a budget file, added to the
// workload's (docs/simulator.md). Unknown fields and bad values are refused, each error naming
// the file, line and field. Services' budgets are checked against the tree later
// (add_services), as a job's are.
core::Result<ServiceFile> parse_services(const std::string& text, const std::string& file);
core::Result<ServiceFile> load_services(const std::string& path);

}  // namespace allot::sim
