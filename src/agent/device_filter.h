// Device isolation on cgroup v2: an eBPF program of type BPF_PROG_TYPE_CGROUP_DEVICE, attached to
// a run's cgroup, that refuses the device nodes the run was not given (the other GPUs'
// /dev/nvidiaN) and allows every other device, as the cgroup v1 `devices.deny` rules do
// (docs/agent.md, "Device isolation"). The program is built here instruction by instruction (no
// compiler for BPF needed on a node) and loaded with the bpf(2) system call, which needs root
// (CAP_SYS_ADMIN, or CAP_BPF with CAP_NET_ADMIN to attach). Stateless: any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace allot::agent {

// A device as the kernel names it to a device program: block or character, major, minor.
struct DeviceNumber {
  bool block = false;
  std::uint32_t major = 0;
  std::uint32_t minor = 0;
  friend bool operator==(const DeviceNumber&, const DeviceNumber&) = default;
};

// The number of the device node at `path`; nullopt, and `why`, when it is missing or not a device.
std::optional<DeviceNumber> device_number(const std::string& path, std::string* why);

// One eBPF instruction as the kernel reads it (struct bpf_insn).
struct BpfInstruction {
  std::uint8_t code = 0;
  std::uint8_t registers = 0;  // destination in the low 4 bits, source in the high 4
  std::int16_t offset = 0;
  std::int32_t immediate = 0;
};

// The program that answers 0 (refuse) for an access to any device in `deny` and 1 (allow) for
// every other: 4 loads, then 5 instructions per refused device, then 2. Pure, for tests.
std::vector<BpfInstruction> deny_devices_program(const std::vector<DeviceNumber>& deny);

// Loads the program for `deny` and attaches it to the cgroup v2 directory `cgroup_dir` (with
// BPF_F_ALLOW_MULTI, so a device program of a parent, e.g. systemd's, still applies too). The
// attachment lives as long as the cgroup; nothing needs detaching. False and `why` on failure.
bool attach_device_filter(const std::string& cgroup_dir, const std::vector<DeviceNumber>& deny,
                          std::string* why);

// Whether this process can load and attach a device program: tried on a scratch child of
// `cgroup_dir` that is removed again. False and `why` (the kernel's answer) when not.
bool device_filter_available(const std::string& cgroup_dir, std::string* why);

}  // namespace allot::agent
