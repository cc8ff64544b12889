// The fake backend: a node described in YAML (fake_node_config.h), its telemetry following a
// script over the agent's clock, and overridden by files in a control directory that tests and
// test jobs write while the agent runs. It re-partitions GPUs into MIG instances by the rules the
// driver applies (core/mig_geometry.h), taking the configured time.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/fake_node_config.h"
#include "agent/gpu_backend.h"
#include "core/gpu_catalog.h"
#include "core/mig_geometry.h"

namespace allot::agent {
namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

// Reads a small control file; false when it vanished meanwhile.
bool read_small(int dir, const char* name, std::string& out, struct stat& st) {
  const int fd = openat(dir, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[256];
  const ssize_t n = read(fd, buf, sizeof buf);
  const bool ok = n >= 0 && fstat(fd, &st) == 0;
  close(fd);
  if (!ok) return false;
  out.assign(buf, static_cast<std::size_t>(n));
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ' || out.back() == '\r')) {
    out.pop_back();
  }
  return true;
}

std::optional<double> parse_value(FakeField f, const std::string& text) {
  if (f == FakeField::Lost) {
    if (text == "1" || text == "true" || text == "yes") return 1;
    if (text.empty() || text == "0" || text == "false" || text == "no") return 0;
    return std::nullopt;
  }
  double v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

class FakeBackend final : public GpuBackend {
 public:
  FakeBackend(FakeNodeConfig config, std::string seed, std::string control_dir)
      : config_(std::move(config)), seed_(std::move(seed)), control_dir_(std::move(control_dir)) {
    for (int i = 0; i < config_.gpus; ++i) {
      GpuDevice d;
      d.index = i;
      d.uuid = "GPU-fake-" + seed_ + "-" + std::to_string(i);
      d.name = config_.name;
      d.model = config_.model;
      d.memory_mib = config_.memory_mib;
      char bus[32];
      std::snprintf(bus, sizeof bus, "00000000:%02X:00.0", 0x18 + i);
      d.pci_bus_id = bus;
      if (auto it = config_.mig.find(i); it != config_.mig.end()) {
        d.mig_enabled = true;
        for (std::size_t j = 0; j < it->second.size(); ++j) {
          const MigProfile p = *parse_mig_profile(it->second[j]);
          MigDevice m;
          m.uuid = "MIG-fake-" + seed_ + "-" + std::to_string(i) + "-" + std::to_string(j);
          m.profile = it->second[j];
          m.milli = 1000 * p.compute_slices / kMigSlices;
          m.memory_mib = std::int64_t{p.memory_gib} * 1024;
          d.mig.push_back(std::move(m));
        }
      }
      devices_.push_back(std::move(d));
    }
    state_.assign(devices_.size(), config_.defaults);
    xids_.resize(devices_.size());
    xid_files_.resize(devices_.size());
  }

  std::string name() const override { return "fake"; }

  core::Result<std::vector<GpuDevice>> discover() override { return devices_; }

  core::Result<std::vector<GpuSample>> sample(double now) override {
    play_script(now);
    std::vector<FakeGpuState> state = state_;
    std::vector<GpuSample> out(devices_.size());
    read_control_dir(state, out);
    for (std::size_t i = 0; i < out.size(); ++i) {
      GpuSample& s = out[i];
      const FakeGpuState& v = state[i];
      s.index = static_cast<int>(i);
      s.xids.insert(s.xids.begin(), xids_[i].begin(), xids_[i].end());
      xids_[i].clear();
      if (v[static_cast<std::size_t>(FakeField::Lost)] != 0) {
        s.present = false;
        s.error = "GPU " + std::to_string(i) + " lost (fake backend)";
        continue;
      }
      s.util_pct = v[static_cast<std::size_t>(FakeField::UtilPct)];
      s.mem_used_mib =
          static_cast<std::int64_t>(v[static_cast<std::size_t>(FakeField::MemUsedMib)]);
      s.mem_total_mib = config_.memory_mib;
      s.temp_c = v[static_cast<std::size_t>(FakeField::TempC)];
      s.power_w = v[static_cast<std::size_t>(FakeField::PowerW)];
      s.ecc_uncorrected =
          static_cast<std::int64_t>(v[static_cast<std::size_t>(FakeField::EccUncorrected)]);
      s.ecc_corrected =
          static_cast<std::int64_t>(v[static_cast<std::size_t>(FakeField::EccCorrected)]);
    }
    return out;
  }

  // Refuses what the driver would refuse (no such GPU, a model without MIG, a layout the
  // placement rules do not allow) before anything changes; then takes the configured time, and the
  // GPU's MIG devices are the new ones, with UUIDs no earlier layout had.
  core::Status reconfigure_mig(int gpu, const std::vector<std::string>& profiles) override {
    if (gpu < 0 || static_cast<std::size_t>(gpu) >= devices_.size()) {
      return core::Error{"gpu", "no GPU " + std::to_string(gpu) + " on this node (it has " +
                                    std::to_string(devices_.size()) + ")"};
    }
    const core::GpuCatalog catalog = core::GpuCatalog::standard();
    const auto model = catalog.find(config_.model);
    if (!model || !catalog.model(*model).mig_capable) {
      return core::Error{"mig", config_.model + " GPUs cannot be split into MIG instances"};
    }
    const int memory_gib = catalog.model(*model).memory_gib;
    for (const std::string& p : profiles) {
      if (!core::mig_geometry(p, memory_gib)) {
        return core::Error{"mig", "'" + p + "' is not a MIG profile of a " + config_.model + " (" +
                                      std::to_string(memory_gib) + " GB)"};
      }
    }
    if (!core::mig_layout_starts(profiles, memory_gib)) {
      return core::Error{"mig", "[" + join(profiles) + "] cannot share one " + config_.model +
                                    ": they overlap, need more than 7 compute slices, or break "
                                    "NVIDIA's placement rules"};
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(config_.mig_reconfigure_seconds));
    ++generation_;
    GpuDevice& d = devices_[static_cast<std::size_t>(gpu)];
    d.mig_enabled = !profiles.empty();
    d.mig.clear();
    for (std::size_t j = 0; j < profiles.size(); ++j) {
      MigDevice m;
      // The generation keeps UUIDs apart across layouts, as the driver's are: a run's device
      // must never name an instance of a later layout.
      m.uuid = "MIG-fake-" + seed_ + "-" + std::to_string(gpu) + "-g" +
               std::to_string(generation_) + "-" + std::to_string(j);
      m.profile = profiles[j];
      m.milli = 1000 * core::mig_geometry(profiles[j], memory_gib)->compute_slices / kMigSlices;
      m.memory_mib = std::int64_t{core::mig_profile_memory_gb(profiles[j])} * 1024;
      d.mig.push_back(std::move(m));
    }
    return core::ok_status();
  }

 private:
  static std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
    return out;
  }

  // Applies every script event due by `now`, in order; an XID is queued for this sample.
  void play_script(double now) {
    for (; next_ < config_.script.size() && config_.script[next_].at <= now; ++next_) {
      const FakeScriptEvent& e = config_.script[next_];
      for (std::size_t i = 0; i < state_.size(); ++i) {
        if (e.gpu >= 0 && static_cast<std::size_t>(e.gpu) != i) continue;
        for (const auto& [field, value] : e.set) state_[i][static_cast<std::size_t>(field)] = value;
        if (e.xid) xids_[i].push_back(*e.xid);
      }
    }
  }

  // Files gpu<N>.<field> override this sample's values; gpu<N>.xid reports its XIDs each time
  // the file is written anew (a changed modification time or content).
  void read_control_dir(std::vector<FakeGpuState>& state, std::vector<GpuSample>& out) {
    if (control_dir_.empty()) return;
    DIR* dir = opendir(control_dir_.c_str());
    if (!dir) return;  // not created yet: nothing overridden
    while (const dirent* e = readdir(dir)) {
      const std::string_view name = e->d_name;
      if (!name.starts_with("gpu")) continue;
      const std::size_t dot = name.find('.');
      if (dot == std::string_view::npos) continue;
      std::size_t gpu = 0;
      auto [p, ec] = std::from_chars(name.data() + 3, name.data() + dot, gpu);
      if (ec != std::errc() || p != name.data() + dot || gpu >= state.size()) continue;
      const std::string_view field_name = name.substr(dot + 1);
      const bool is_xid = field_name == "xid";
      const auto field = fake_field(field_name);
      if (!is_xid && !field) continue;
      std::string text;
      struct stat st {};
      if (!read_small(dirfd(dir), e->d_name, text, st)) continue;
      if (is_xid) {
        read_xids(gpu, text, st, out[gpu]);
      } else if (auto v = parse_value(*field, text)) {
        state[gpu][static_cast<std::size_t>(*field)] = *v;
      } else {
        note(out[gpu], "control file " + std::string(name) + ": cannot read '" + text + "'");
      }
    }
    closedir(dir);
  }

  void read_xids(std::size_t gpu, const std::string& text, const struct stat& st, GpuSample& s) {
    XidFile& seen = xid_files_[gpu];
    const std::int64_t mtime = std::int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
    if (seen.mtime_ns == mtime && seen.text == text) return;
    seen = {mtime, text};
    std::istringstream in(replace_all(text, ",", " "));
    int xid = 0;
    while (in >> xid) s.xids.push_back(xid);
    if (!in.eof())
      note(s, "control file gpu" + std::to_string(gpu) + ".xid: cannot read '" + text + "'");
  }

  static void note(GpuSample& s, const std::string& what) {
    if (!s.error.empty()) s.error += "; ";
    s.error += what;
  }

  struct XidFile {
    std::int64_t mtime_ns = -1;
    std::string text;
  };

  FakeNodeConfig config_;
  std::string seed_;
  std::string control_dir_;
  std::vector<GpuDevice> devices_;
  std::vector<FakeGpuState> state_;  // defaults plus the script so far
  std::vector<std::vector<int>> xids_;
  std::vector<XidFile> xid_files_;
  std::size_t next_ = 0;  // the first script event not yet played
  int generation_ = 0;    // layouts made by reconfigure_mig so far
};

core::Result<std::unique_ptr<GpuBackend>> make(const std::string& text, const std::string& file,
                                               const std::string& base_dir,
                                               const std::string& node) {
  auto config = parse_fake_node(text, file);
  if (!config.ok()) return config.error();
  FakeNodeConfig& c = config.value();
  const std::string seed = !c.uuid_seed.empty() ? c.uuid_seed : !node.empty() ? node : "node";
  std::string control = replace_all(c.control_dir, "{node}", seed);
  if (!control.empty() && control.front() != '/' && !base_dir.empty()) {
    control = base_dir + "/" + control;
  }
  return std::unique_ptr<GpuBackend>(new FakeBackend(std::move(c), seed, std::move(control)));
}

}  // namespace

core::Result<std::unique_ptr<GpuBackend>> make_fake_backend(const std::string& yaml_path,
                                                            const std::string& node) {
  std::ifstream in(yaml_path);
  if (!in) return core::Error{yaml_path, "cannot read the fake node description"};
  std::stringstream text;
  text << in.rdbuf();
  const std::size_t slash = yaml_path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : yaml_path.substr(0, slash);
  return make(text.str(), yaml_path, dir.empty() ? "/" : dir, node);
}

core::Result<std::unique_ptr<GpuBackend>> make_fake_backend_from_text(const std::string& yaml,
                                                                      const std::string& node) {
  return make(yaml, "<fake node>", "", node);
}

}  // namespace allot::agent
