// Control groups for runs: what this machine allows (found once by the Runner), and the few
// operations the shim and the runner do on a run's cgroup directory. cgroup v2 gives each run a
// directory with memory.max / cpu.max where those controllers can be enabled, lists the whole
// tree (cgroup.procs, which a setsid() cannot escape) and kills it (cgroup.kill); a cgroup v1
// devices hierarchy, where one is mounted and writable, denies a run the GPU device nodes it
// was not given (and also tracks its tree where there is no cgroup v2); without one, a device
// program (eBPF, agent/device_filter.h) on the run's cgroup v2 directory does.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace allot::agent {

struct CgroupPlan {
  std::string v2_parent;       // runs get <v2_parent>/<job>.<run>; "" = no cgroup v2
  bool memory = false;         // the memory controller is enabled for runs
  bool cpu = false;            // the cpu controller is enabled for runs
  bool kill = false;           // cgroup.kill exists (Linux 5.14+)
  std::string devices_parent;  // cgroup v1 devices: runs get <devices_parent>/<job>.<run>
  bool devices_bpf = false;    // else a device program on each run's cgroup v2 directory
  std::string v2_note;         // why there is no cgroup v2 or a controller is missing
  std::string devices_note;    // why there is no device isolation
};

// `v2_root` and `devices_root`: "" finds them (a directory "allot/<instance>" below this
// process's own cgroup), "none" goes without, anything else is the directory to use.
// `devices_root` "bpf" uses a device program on the runs' cgroup v2 directories, which "" also
// does where no cgroup v1 devices controller is mounted.
CgroupPlan plan_cgroups(const std::string& v2_root, const std::string& devices_root,
                        const std::string& instance);

// The processes in a cgroup directory (v1 or v2); empty if it is gone.
std::vector<pid_t> cgroup_members(const std::string& dir);
// Writes `value` to <dir>/<file>; on failure says why in `why`.
bool write_cgroup(const std::string& dir, const char* file, const std::string& value,
                  std::string* why);
// SIGKILL to every process in the cgroup, atomically with cgroup.kill where it exists, else one
// by one (repeated while new ones appear, up to a bound).
void kill_cgroup(const std::string& dir);
void signal_cgroup(const std::string& dir, int sig);
// Removes the (emptied) directory, waiting up to `wait` for its last processes to be gone.
bool remove_cgroup(const std::string& dir, std::chrono::milliseconds wait);
// The cgroup v1 devices rule for a device node: "/dev/nvidia3" -> "c 195:3 rwm"; "" and `why`
// if it is not a device.
std::string device_rule(const std::string& device, std::string* why);

}  // namespace allot::agent
