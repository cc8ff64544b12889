// The simulator's services reader (src/sim/service_model.cpp) on any YAML. Contract:
// - no exception escapes; a refusal names the file (and, past the file, its line and field);
// - an accepted file has 1-256 services with distinct names of a-z, 0-9 and '-', each within the
//   documented bounds (replicas 0 <= min <= max <= 1024, at least 1; GPUs 1-1024 or a MIG
//   profile; contract <= 8 h; finite loads with trough <= peak; load watermarks low < high when
//   used, and given whenever max > min without a memory model), memory watermarks
//   0 < low < high <= 1, and budgets that build into a core tree;
// - the load it reports is finite and never negative, at any time; the memory, where modelled
//   and some replica serves, a fraction from 0 to 1.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include "check.h"
#include "core/budget_tree.h"
#include "sim/service_model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = allot::sim::parse_services(text, "services.yaml");
  if (!r.ok()) {
    allot::fuzz::check_error(r.error());
    FUZZ_CHECK(r.error().field.rfind("services.yaml", 0) == 0, "error without the file: %s",
               r.error().message().c_str());
    return 0;
  }
  namespace core = allot::core;
  const auto& f = r.value();
  FUZZ_CHECK(!f.services.empty() && f.services.size() <= 256, "%zu services", f.services.size());
  std::set<std::string> names;
  for (std::size_t k = 0; k < f.services.size(); ++k) {
    const auto& s = f.services[k];
    FUZZ_CHECK(!s.name.empty() && s.name.size() <= 63 && names.insert(s.name).second, "name '%s'",
               s.name.c_str());
    for (char c : s.name) {
      FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-', "name '%s'",
                 s.name.c_str());
    }
    FUZZ_CHECK(s.min_replicas >= 0 && s.min_replicas <= s.max_replicas && s.max_replicas >= 1 &&
                   s.max_replicas <= 1024,
               "%s: replicas %d..%d", s.name.c_str(), s.min_replicas, s.max_replicas);
    FUZZ_CHECK(s.gpus >= 1 && s.gpus <= 1024, "%s: gpus %d", s.name.c_str(), s.gpus);
    FUZZ_CHECK(s.contract >= 0 && s.contract <= 8 * core::kHour, "%s: contract", s.name.c_str());
    FUZZ_CHECK(s.start_delay >= 0 && s.start_delay <= core::kDay, "%s: start_delay",
               s.name.c_str());
    FUZZ_CHECK(s.report_every >= 1 && s.report_every <= core::kHour, "%s: report_every",
               s.name.c_str());
    FUZZ_CHECK(std::isfinite(s.capacity) && s.capacity >= 0, "%s: capacity", s.name.c_str());
    const auto& l = s.load;
    FUZZ_CHECK(std::isfinite(l.trough) && std::isfinite(l.peak) && 0 <= l.trough &&
                   l.trough <= l.peak && l.peak_hour >= 0 && l.peak_hour <= 24 && l.noise >= 0 &&
                   l.noise <= 1,
               "%s: load", s.name.c_str());
    const auto& a = s.autoscale;
    FUZZ_CHECK(a.cooldown >= 0 && a.cooldown <= core::kDay, "%s: cooldown", s.name.c_str());
    FUZZ_CHECK(a.load_high <= 0 && a.load_low <= 0
                   ? s.max_replicas == s.min_replicas || s.memory_modelled
                   : a.load_low < a.load_high,
               "%s: watermarks %g / %g", s.name.c_str(), a.load_low, a.load_high);
    FUZZ_CHECK(0 < a.memory_low && a.memory_low < a.memory_high && a.memory_high <= 1,
               "%s: memory watermarks %g / %g", s.name.c_str(), a.memory_low, a.memory_high);
    FUZZ_CHECK(s.memory_idle >= 0 && s.memory_idle <= 1 && s.memory_per_request >= 0 &&
                   s.memory_per_request <= 1,
               "%s: memory model", s.name.c_str());
    for (const int serving : {0, 1, 7}) {
      const auto m = allot::sim::service_memory(s, s.load.peak, serving);
      FUZZ_CHECK(m.has_value() == (s.memory_modelled && serving > 0) &&
                     (!m || (std::isfinite(*m) && *m >= 0 && *m <= 1)),
                 "%s: memory %g with %d serving", s.name.c_str(), m.value_or(-1), serving);
    }
    for (const core::Time t : {core::Time{0}, core::Time{43'200}, core::Time{-7},
                               std::numeric_limits<core::Time>::max() / 2}) {
      const double x = allot::sim::service_load(s, k, 7, t);
      FUZZ_CHECK(std::isfinite(x) && x >= 0, "%s: load %g at %lld", s.name.c_str(), x,
                 static_cast<long long>(t));
    }
  }
  core::BudgetTree tree;
  auto st = allot::sim::apply_budgets(f.budgets, tree);
  FUZZ_CHECK(st.ok(), "accepted budgets the tree refuses: %s", st.error().message().c_str());
  return 0;
}
