#include "agent/job_env.h"

#include <algorithm>
#include <filesystem>

namespace allot::agent {

using core::Error;

core::Result<DeviceChoice> choose_devices(const Assignment& a,
                                          const std::vector<GpuDevice>& devices,
                                          const std::set<std::string>& mig_in_use) {
  auto find = [&](int index) -> const GpuDevice* {
    for (const auto& d : devices) {
      if (d.index == index) return &d;
    }
    return nullptr;
  };
  DeviceChoice out;
  for (int g : a.gpus) {
    const GpuDevice* d = find(g);
    if (!d) return Error{"gpus", "GPU " + std::to_string(g) + " is not on this node"};
    out.gpus.push_back(g);
    if (a.gpu_milli >= 1000) {
      out.uuids.push_back(d->uuid);
      continue;
    }
    if (!d->mig_enabled || d->mig.empty()) {
      out.uuids.push_back(d->uuid);
      out.shared = true;
      continue;
    }
    // The instance of the profile the scheduler counted (it keeps the same inventory), else the
    // smallest free one that holds the fraction.
    const MigDevice* best = nullptr;
    for (const auto& m : d->mig) {
      if (a.mig_profile.empty() || m.profile != a.mig_profile || mig_in_use.count(m.uuid)) continue;
      if (!best || m.uuid < best->uuid) best = &m;
    }
    if (!best) {
      for (const auto& m : d->mig) {
        if (m.milli < a.gpu_milli || mig_in_use.count(m.uuid)) continue;
        if (!best || m.milli < best->milli || (m.milli == best->milli && m.uuid < best->uuid)) {
          best = &m;
        }
      }
    }
    if (!best) {
      return Error{"gpu_milli", "no free MIG instance of at least " + std::to_string(a.gpu_milli) +
                                    " milli-GPUs on GPU " + std::to_string(g)};
    }
    out.uuids.push_back(best->uuid);
  }
  return out;
}

std::map<std::string, std::string> job_environment(const Assignment& a, const DeviceChoice& d,
                                                   const std::string& node) {
  auto env = a.env;
  std::string visible;
  for (const auto& u : d.uuids) visible += (visible.empty() ? "" : ",") + u;
  env["CUDA_VISIBLE_DEVICES"] = visible;
  env["NVIDIA_VISIBLE_DEVICES"] = visible;
  env["ALLOT_JOB_ID"] = std::to_string(a.key.job);
  env["ALLOT_RUN"] = std::to_string(a.key.run);
  env["ALLOT_BUDGET"] = a.budget;
  env["ALLOT_OWNER"] = a.owner;
  env["ALLOT_JOB_NAME"] = a.name;
  env["ALLOT_NODE"] = node;
  env["ALLOT_RESUMABLE"] = a.resumable ? "1" : "0";
  const std::vector<std::string> nodes = a.nodes.empty() ? std::vector<std::string>{node} : a.nodes;
  std::string list;
  for (const auto& n : nodes) list += (list.empty() ? "" : ",") + n;
  env["ALLOT_NODES"] = list;
  env["ALLOT_NUM_NODES"] = std::to_string(nodes.size());
  env["ALLOT_NODE_RANK"] = std::to_string(a.rank);
  env["ALLOT_GPUS_PER_NODE"] = std::to_string(a.gpus.size());
  env["WORLD_SIZE"] = std::to_string(nodes.size() * a.gpus.size());
  if (!a.rendezvous.empty()) {
    env["ALLOT_RENDEZVOUS"] = a.rendezvous;
    auto colon = a.rendezvous.rfind(':');
    env["MASTER_ADDR"] = a.rendezvous.substr(0, colon);
    if (colon != std::string::npos) env["MASTER_PORT"] = a.rendezvous.substr(colon + 1);
  }
  return env;
}

void gpu_device_files(const DeviceChoice& d, const std::vector<GpuDevice>& devices,
                      const std::string& dev_dir, std::vector<std::string>& allowed,
                      std::vector<std::string>& denied) {
  std::error_code ec;
  for (const auto& dev : devices) {
    const std::string path = dev_dir + "/nvidia" + std::to_string(dev.index);
    if (!std::filesystem::exists(path, ec)) continue;
    const bool mine = std::find(d.gpus.begin(), d.gpus.end(), dev.index) != d.gpus.end();
    (mine ? allowed : denied).push_back(path);
  }
}

}  // namespace allot::agent
