#include "agent/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "agent/device_filter.h"

namespace allot::agent {
namespace {

namespace fs = std::filesystem;

struct Mount {
  std::string root;   // the part of the hierarchy the mount shows
  std::string point;  // where it is mounted
};

std::string unescape(const std::string& s) {  // mountinfo writes ' ' as \040 and so on
  std::string out;
  auto octal = [](char c) { return c >= '0' && c <= '7'; };
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && octal(s[i + 1]) && octal(s[i + 2]) && octal(s[i + 3])) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The first mount of `fstype` whose super options include `option` ("" = any).
std::optional<Mount> find_mount(const std::string& fstype, const std::string& option) {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    const std::size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream before(line.substr(0, dash)), after(line.substr(dash + 3));
    std::string id, parent, dev, root, point, type, source, super;
    before >> id >> parent >> dev >> root >> point;
    after >> type >> source >> super;
    if (type != fstype) continue;
    if (!option.empty() && ("," + super + ",").find("," + option + ",") == std::string::npos) {
      continue;
    }
    return Mount{unescape(root), unescape(point)};
  }
  return std::nullopt;
}

// This process's cgroup in the hierarchy with `controller` ("" = the v2 unified one), as a
// directory under `m`.
std::string own_directory(const Mount& m, const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const std::size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string list = line.substr(a + 1, b - a - 1);
    const bool match = controller.empty()
                           ? line.substr(0, a) == "0" && list.empty()
                           : ("," + list + ",").find("," + controller + ",") != std::string::npos;
    if (!match) continue;
    std::string path = line.substr(b + 1);
    if (m.root != "/" && path.starts_with(m.root)) path = path.substr(m.root.size());
    if (path == "/") path.clear();
    return m.point + path;
  }
  return m.point;
}

// Creates `dir` and checks that its `control` file can be written; else says why in `note`.
bool usable(const std::string& dir, const char* control, const char* kind, std::string& note) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec && !fs::is_directory(dir)) {
    note = std::string("no writable ") + kind + ": cannot create " + dir + ": " + ec.message();
    return false;
  }
  if (access((dir + "/" + control).c_str(), W_OK) != 0) {
    note = std::string("no writable ") + kind + ": " + dir + " has no writable " + control;
    return false;
  }
  return true;
}

bool lists(const std::string& file, const std::string& word) {
  std::ifstream in(file);
  for (std::string w; in >> w;) {
    if (w == word) return true;
  }
  return false;
}

void plan_v2(CgroupPlan& p, const std::string& option, const std::string& instance) {
  if (option == "none") {
    p.v2_note = "cgroup v2 off by configuration";
    return;
  }
  std::string top, base;
  if (option.empty()) {
    auto m = find_mount("cgroup2", "");
    if (!m) {
      p.v2_note = "no cgroup v2 mounted";
      return;
    }
    top = own_directory(*m, "");
    base = top + "/allot/" + instance;
  } else {
    base = option;
    top = fs::path(option).parent_path().string();
  }
  if (!usable(base, "cgroup.procs", "cgroup v2", p.v2_note)) return;
  p.v2_parent = base;
  // Each level from this process's cgroup down hands the controllers to the next; a level that
  // holds processes (other than the root) cannot, and then the runs go without them.
  for (fs::path dir = top; !dir.empty();) {
    for (const char* c : {"+memory", "+cpu"}) {
      std::string ignored;
      write_cgroup(dir.string(), "cgroup.subtree_control", c, &ignored);
    }
    if (dir == fs::path(base)) break;
    const fs::path rel = fs::path(base).lexically_relative(dir);
    if (rel.empty() || *rel.begin() == "..") break;
    dir /= *rel.begin();
  }
  p.memory = lists(base + "/cgroup.subtree_control", "memory");
  p.cpu = lists(base + "/cgroup.subtree_control", "cpu");
  p.kill = access((base + "/cgroup.kill").c_str(), W_OK) == 0;
  if (!p.memory || !p.cpu) {
    std::string missing = !p.memory && !p.cpu ? "memory and cpu controllers"
                          : !p.memory         ? "memory controller"
                                              : "cpu controller";
    p.v2_note = "no cgroup v2 " + missing + " at " + base;
  }
}

void plan_devices(CgroupPlan& p, const std::string& option, const std::string& instance) {
  if (option == "none") {
    p.devices_note = "device isolation off by configuration";
    return;
  }
  // A device program on the runs' cgroup v2 directories: asked for, or found where there is no
  // cgroup v1 devices controller.
  auto try_bpf = [&p](const std::string& before) {
    if (p.v2_parent.empty()) {
      p.devices_note = before + "no cgroup v2 directory for a device program (" + p.v2_note + ")";
      return;
    }
    std::string why;
    if (!device_filter_available(p.v2_parent, &why)) {
      p.devices_note = before + "no cgroup v2 device program: " + why;
      return;
    }
    p.devices_bpf = true;
  };
  if (option == "bpf") return try_bpf("");
  std::string base = option;
  if (option.empty()) {
    auto m = find_mount("cgroup", "devices");
    if (!m) return try_bpf("no cgroup v1 devices controller, and ");
    base = own_directory(*m, "devices") + "/allot/" + instance;
  }
  if (!usable(base, "devices.deny", "cgroup v1 devices", p.devices_note)) return;
  p.devices_parent = base;
}

}  // namespace

CgroupPlan plan_cgroups(const std::string& v2_root, const std::string& devices_root,
                        const std::string& instance) {
  CgroupPlan p;
  plan_v2(p, v2_root, instance);
  plan_devices(p, devices_root, instance);
  return p;
}

std::vector<pid_t> cgroup_members(const std::string& dir) {
  std::vector<pid_t> out;
  const int fd = open((dir + "/cgroup.procs").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  close(fd);
  pid_t v = 0;
  bool digits = false;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      v = v * 10 + (c - '0');
      digits = true;
    } else if (digits) {
      out.push_back(v);
      v = 0;
      digits = false;
    }
  }
  if (digits) out.push_back(v);
  return out;
}

bool write_cgroup(const std::string& dir, const char* file, const std::string& value,
                  std::string* why) {
  const std::string path = dir + "/" + file;
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = path + ": " + std::strerror(errno);
    return false;
  }
  const bool ok = write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  if (!ok) *why = path + ": " + std::strerror(errno);
  close(fd);
  return ok;
}

void signal_cgroup(const std::string& dir, int sig) {
  for (pid_t pid : cgroup_members(dir)) ::kill(pid, sig);
}

void kill_cgroup(const std::string& dir) {
  std::string ignored;
  if (write_cgroup(dir, "cgroup.kill", "1", &ignored)) return;
  // Without cgroup.kill a process may fork between the listing and the kill: list again.
  for (int round = 0; round < 100; ++round) {
    const std::vector<pid_t> pids = cgroup_members(dir);
    if (pids.empty()) return;
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool remove_cgroup(const std::string& dir, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  while (rmdir(dir.c_str()) != 0) {
    if (errno == ENOENT) return true;
    if (errno != EBUSY || std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

std::string device_rule(const std::string& device, std::string* why) {
  const std::optional<DeviceNumber> n = device_number(device, why);
  if (!n) return "";
  return std::string(n->block ? "b " : "c ") + std::to_string(n->major) + ":" +
         std::to_string(n->minor) + " rwm";
}

}  // namespace allot::agent
