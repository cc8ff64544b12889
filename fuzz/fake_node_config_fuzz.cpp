// The fake GPU backend's node description (src/agent/fake_node_config.cpp, docs/agent.md) on any
// YAML. Contract:
// - no exception escapes; a refusal names the file, line and field;
// - an accepted node is within the documented bounds: 1-64 GPUs, MIG profiles that parse and fit
//   in each GPU's 7 slices, telemetry defaults and script values finite and in their ranges,
//   script events on existing GPUs, in time order.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "agent/fake_node_config.h"
#include "check.h"

namespace {

using allot::agent::FakeField;

void check_value(FakeField f, double v, const char* where) {
  FUZZ_CHECK(std::isfinite(v) && v >= 0, "%s: %s = %g", where, allot::agent::fake_field_name(f), v);
  if (f == FakeField::UtilPct) FUZZ_CHECK(v <= 100, "%s: util %g", where, v);
  if (f == FakeField::Lost) FUZZ_CHECK(v == 0 || v == 1, "%s: lost %g", where, v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto r = allot::agent::parse_fake_node(text, "node.yaml");
  if (!r.ok()) {
    allot::fuzz::check_error(r.error());
    FUZZ_CHECK(r.error().field.rfind("node.yaml", 0) == 0, "error without the file: %s",
               r.error().message().c_str());
    return 0;
  }
  const auto& c = r.value();
  FUZZ_CHECK(c.gpus >= 1 && c.gpus <= 64, "%d GPUs", c.gpus);
  FUZZ_CHECK(c.memory_mib >= 1, "memory_mib %lld", static_cast<long long>(c.memory_mib));
  FUZZ_CHECK(!c.model.empty() && !c.name.empty(), "no model or name");
  for (const auto& [gpu, profiles] : c.mig) {
    FUZZ_CHECK(gpu >= 0 && gpu < c.gpus, "MIG on GPU %d of %d", gpu, c.gpus);
    int slices = 0;
    for (const auto& p : profiles) {
      auto m = allot::agent::parse_mig_profile(p);
      FUZZ_CHECK(m.has_value(), "GPU %d: profile '%s' does not parse", gpu, p.c_str());
      slices += m->gpu_slices;
    }
    FUZZ_CHECK(slices <= allot::agent::kMigSlices, "GPU %d: MIG profiles use %d slices", gpu,
               slices);
  }
  for (std::size_t i = 0; i < allot::agent::kFakeFields; ++i) {
    check_value(static_cast<FakeField>(i), c.defaults[i], "telemetry");
  }
  double at = 0;
  for (const auto& e : c.script) {
    FUZZ_CHECK(std::isfinite(e.at) && e.at >= at, "script out of order at %g", e.at);
    at = e.at;
    FUZZ_CHECK(e.gpu >= -1 && e.gpu < c.gpus, "script event on GPU %d of %d", e.gpu, c.gpus);
    FUZZ_CHECK(!e.set.empty() || e.xid, "script event that changes nothing");
    for (const auto& [f, v] : e.set) check_value(f, v, "script");
  }
  return 0;
}
