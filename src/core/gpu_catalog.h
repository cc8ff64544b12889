// The catalogue of GPU models the scheduler knows, with the memory each has.
//
// Thread-safety: none; owned by one Scheduler and used by one thread at a time, like all of
// src/core (which has no threads, I/O or clock).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace allot::core {

struct GpuModel {
  std::string name;  // canonical upper-case name, e.g. "H100"
  int memory_gib = 0;
  bool mig_capable = false;  // can be split into MIG instances (a later issue schedules them)
};

class GpuCatalog {
 public:
  // A catalogue with the common data-centre models (H100, H200, B200, B300, A100, ...).
  static GpuCatalog standard();

  // Looks a model up by name, case-insensitively.
  std::optional<GpuModelId> find(std::string_view name) const;
  // Returns the model's id, adding it (with the memory given) if it is not known yet.
  GpuModelId intern(std::string_view name, int memory_gib = 0, bool mig_capable = false);
  const GpuModel& model(GpuModelId id) const { return models_.at(id); }
  std::size_t size() const { return models_.size(); }

 private:
  std::vector<GpuModel> models_;
};

}  // namespace allot::core
