// The cgroup v2 device program (agent/device_filter.h): its instructions, run here by a small
// interpreter of the few eBPF instructions it uses, refuse exactly the denied devices; and, where
// this process may load programs into a cgroup v2 (root), the kernel enforces it.
#include "agent/device_filter.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "agent/cgroup.h"

namespace allot::agent {
namespace {

// Runs `p` on a device access as the kernel would hand it over (struct bpf_cgroup_dev_ctx):
// returns r0, or -1 if the program uses an instruction outside this subset or runs off its end.
int run(const std::vector<BpfInstruction>& p, bool block, std::uint32_t major,
        std::uint32_t minor) {
  const std::array<std::uint32_t, 3> ctx = {
      (static_cast<std::uint32_t>(BPF_DEVCG_ACC_READ) << 16) |
          static_cast<std::uint32_t>(block ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR),
      major, minor};
  std::array<std::uint64_t, 11> r{};
  for (std::size_t pc = 0; pc < p.size(); ++pc) {
    const BpfInstruction& i = p[pc];
    const unsigned dst = i.registers & 0x0f, src = i.registers >> 4;
    switch (i.code) {
      case BPF_LDX | BPF_W | BPF_MEM:
        if (src != 1 || i.offset < 0 || i.offset > 8 || i.offset % 4 != 0) return -1;
        r[dst] = ctx[static_cast<std::size_t>(i.offset / 4)];
        break;
      case BPF_ALU64 | BPF_AND | BPF_K:
        r[dst] &= static_cast<std::uint64_t>(static_cast<std::int64_t>(i.immediate));
        break;
      case BPF_ALU64 | BPF_MOV | BPF_K:
        r[dst] = static_cast<std::uint64_t>(static_cast<std::int64_t>(i.immediate));
        break;
      case BPF_JMP | BPF_JNE | BPF_K:
        if (r[dst] != static_cast<std::uint64_t>(static_cast<std::int64_t>(i.immediate))) {
          pc += static_cast<std::size_t>(i.offset);
        }
        break;
      case BPF_JMP | BPF_EXIT:
        return static_cast<int>(r[0]);
      default:
        return -1;
    }
  }
  return -1;
}

TEST(DeviceFilter, RefusesExactlyTheDeniedDevices) {
  const std::vector<DeviceNumber> deny = {{false, 195, 3}, {false, 195, 5}, {true, 8, 0}};
  const auto p = deny_devices_program(deny);
  EXPECT_EQ(p.size(), 4u + 5u * deny.size() + 2u);
  EXPECT_EQ(run(p, false, 195, 3), 0);
  EXPECT_EQ(run(p, false, 195, 5), 0);
  EXPECT_EQ(run(p, true, 8, 0), 0);
  EXPECT_EQ(run(p, false, 195, 4), 1) << "the job's own GPU";
  EXPECT_EQ(run(p, false, 195, 255), 1) << "nvidiactl";
  EXPECT_EQ(run(p, true, 195, 3), 1) << "a block device with a denied character device's number";
  EXPECT_EQ(run(p, false, 8, 0), 1);
  EXPECT_EQ(run(p, false, 1, 3), 1) << "/dev/null";
  EXPECT_EQ(run(deny_devices_program({}), false, 195, 3), 1) << "nothing denied";
}

TEST(DeviceFilter, NumbersDeviceNodesAndRefusesOtherFiles) {
  std::string why;
  const auto null = device_number("/dev/null", &why);
  ASSERT_TRUE(null) << why;
  EXPECT_EQ(*null, (DeviceNumber{false, 1, 3}));
  EXPECT_FALSE(device_number("/tmp", &why));
  EXPECT_EQ(why, "/tmp: not a device node");
  EXPECT_FALSE(device_number("/dev/no-such-gpu", &why));
  EXPECT_NE(why.find("No such file"), std::string::npos) << why;
  EXPECT_EQ(device_rule("/dev/null", &why), "c 1:3 rwm");
}

// A scratch cgroup v2 directory this process may write, or "" and the reason.
std::string scratch_cgroup(std::string* why) {
  const CgroupPlan plan =
      plan_cgroups("", "none", "device-filter-test-" + std::to_string(getpid()));
  if (plan.v2_parent.empty()) *why = plan.v2_note;
  return plan.v2_parent;
}

TEST(DeviceFilter, TheKernelRefusesTheDeniedDeviceInTheCgroup) {
  std::string why;
  const std::string parent = scratch_cgroup(&why);
  if (parent.empty()) GTEST_SKIP() << "no writable cgroup v2: " << why;
  if (!device_filter_available(parent, &why)) {
    rmdir(parent.c_str());
    GTEST_SKIP() << "device programs cannot be attached here: " << why;
  }
  const std::string dir = parent + "/run";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0) << std::strerror(errno);
  std::string dev_why;
  const auto zero = device_number("/dev/zero", &dev_why);
  ASSERT_TRUE(zero) << dev_why;
  ASSERT_TRUE(attach_device_filter(dir, {*zero}, &why)) << why;
  const pid_t child = fork();
  if (child == 0) {
    std::ofstream(dir + "/cgroup.procs") << getpid() << "\n";
    const int z = open("/dev/zero", O_RDONLY);
    const int z_errno = errno;
    const int n = open("/dev/null", O_RDONLY);
    _exit(z < 0 && z_errno == EPERM && n >= 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "/dev/zero should be refused with EPERM and /dev/null opened";
  EXPECT_TRUE(remove_cgroup(dir, std::chrono::milliseconds(2000)));
  EXPECT_TRUE(remove_cgroup(parent, std::chrono::milliseconds(2000)));
}

}  // namespace
}  // namespace allot::agent
