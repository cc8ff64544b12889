#include "cli/local_cluster.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "server/api.h"
#include "server/auth.h"

namespace allot::cli {

namespace fs = std::filesystem;
using core::Error;

namespace {

// The node's agent token: the one kept in `dir` if the store still accepts it, else a new one.
core::Result<std::string> agent_token(store::Store& store, const fs::path& dir,
                                      const std::string& node, core::Time now) {
  const fs::path file = dir / "token";
  {
    std::ifstream in(file);
    std::string secret;
    if (std::getline(in, secret) && !secret.empty()) {
      auto t = store.token_by_hash(server::sha256_hex(secret));
      if (t && !t->revoked && t->role == "agent" && t->scope == node) return secret;
    }
  }
  auto secret = server::create_token(store, "agent-" + node, "agent", "agent-" + node, node, now);
  if (!secret.ok()) return secret.error();
  // Created 0600, never readable by others even for a moment.
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Error{"data", "cannot write " + file.string()};
  const std::string line = secret.value() + "\n";
  const bool ok = ::fchmod(fd, 0600) == 0 &&
                  ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  if (!ok) return Error{"data", "cannot write " + file.string()};
  return secret;
}

std::string fake_node(const LocalClusterOptions& o, const fs::path& control) {
  return "model: " + o.model + "\nname: NVIDIA " + o.model +
         " 80GB HBM3\ngpus: " + std::to_string(o.gpus_per_node) +
         "\nmemory_mib: 81559\ncontrol_dir: " + control.string() + "\n";
}

}  // namespace

core::Result<std::unique_ptr<LocalCluster>> LocalCluster::start(store::Store& store,
                                                                const LocalClusterOptions& o,
                                                                core::Time now) {
  std::unique_ptr<LocalCluster> lc(new LocalCluster());
  auto launch = [&](const std::string& name, std::unique_ptr<agent::GpuBackend> backend,
                    const std::string& block) -> core::Status {
    const fs::path dir = fs::path(o.data_dir) / "agents" / name;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return Error{"data", "cannot create " + dir.string() + ": " + ec.message()};
    auto token = agent_token(store, dir, name, now);
    if (!token.ok()) return token.error();
    agent::AgentOptions ao;
    ao.server.url = o.server_url;
    ao.server.token = token.value();
    ao.server.insecure = true;  // our own server on loopback
    ao.node = name;
    ao.cluster = o.cluster;
    ao.block = block;
    ao.address = "127.0.0.1";
    ao.state_dir = (dir / "state").string();
    if (o.telemetry_ms > 0) ao.telemetry = std::chrono::milliseconds(o.telemetry_ms);
    ao.log = [](const std::string&) {};  // `allot up` stays quiet; the API tells what happens
    auto a = std::make_unique<agent::Agent>(ao, std::move(backend));
    auto st = a->start();
    if (!st.ok()) return Error{"node " + name, st.error().message()};
    lc->agents_.push_back(std::move(a));
    return core::ok_status();
  };

  if (o.backend == "auto" || o.backend == "nvml") {
    auto nvml = agent::make_nvml_backend();
    if (nvml.ok()) {
      auto devices = nvml.value()->discover();
      if (devices.ok() && !devices.value().empty()) {
        const auto n = devices.value().size();
        const auto model = devices.value().front().model;
        auto st = launch("local-gpu", std::move(nvml.value()), "");
        if (!st.ok()) return st.error();
        lc->description_ = "this machine: " + std::to_string(n) + " x " + model +
                           " (NVML), isolation: " + lc->agents_.back()->isolation();
        return lc;
      }
    }
    if (o.backend == "nvml") {
      return Error{"backend", nvml.ok() ? "NVML found no GPU" : nvml.error().reason};
    }
  }
  for (int i = 0; i < o.fake_nodes; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "local-%02d", i + 1);
    const fs::path control = fs::path(o.data_dir) / "agents" / name / "gpus";
    std::error_code ec;
    fs::create_directories(control, ec);
    auto backend = agent::make_fake_backend_from_text(fake_node(o, control), name);
    if (!backend.ok()) return backend.error();
    auto st = launch(name, std::move(backend.value()), "block-" + std::to_string(i / 4));
    if (!st.ok()) return st.error();
  }
  lc->description_ = std::to_string(o.fake_nodes) + " nodes x " + std::to_string(o.gpus_per_node) +
                     " " + o.model +
                     " (fake GPUs: no NVIDIA GPU found; jobs run as real processes), isolation: " +
                     (lc->agents_.empty() ? std::string("-") : lc->agents_.front()->isolation());
  return lc;
}

LocalCluster::~LocalCluster() {
  for (auto& a : agents_) a->request_stop(true);  // all at once: each stops its jobs
  for (auto& a : agents_) a->stop(true);
}

std::string LocalCluster::describe() const {
  return description_;
}

}  // namespace allot::cli
