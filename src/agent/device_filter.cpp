#include "agent/device_filter.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace allot::agent {
namespace {

static_assert(sizeof(BpfInstruction) == sizeof(bpf_insn), "BpfInstruction is struct bpf_insn");

BpfInstruction insn(std::uint8_t code, std::uint8_t dst, std::uint8_t src, std::int16_t off,
                    std::int32_t imm) {
  return BpfInstruction{code, static_cast<std::uint8_t>((src << 4) | (dst & 0x0f)), off, imm};
}

// The context a device program receives (struct bpf_cgroup_dev_ctx): access_type (the access
// in the high 16 bits, the device type in the low 16), major, minor; the context is in r1.
constexpr std::int16_t kAccessType = 0, kMajor = 4, kMinor = 8;
constexpr std::uint8_t kCtx = 1, kType = 2, kMajorReg = 4, kMinorReg = 5, kResult = 0;

long bpf(int cmd, bpf_attr* attr) {
  return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// The loaded program's file descriptor, or -1 and `why`.
int load(const std::vector<BpfInstruction>& program, std::string* why) {
  static const char kLicense[] = "Apache-2.0";
  char log[2048] = {};
  bpf_attr attr{};
  attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  attr.insns = reinterpret_cast<std::uint64_t>(program.data());
  attr.insn_cnt = static_cast<std::uint32_t>(program.size());
  attr.license = reinterpret_cast<std::uint64_t>(kLicense);
  attr.log_buf = reinterpret_cast<std::uint64_t>(log);
  attr.log_size = sizeof log;
  attr.log_level = 1;
  const int fd = static_cast<int>(bpf(BPF_PROG_LOAD, &attr));
  if (fd < 0) {
    *why = errno_text("loading a cgroup device program (bpf BPF_PROG_LOAD)");
    if (log[0] != '\0') *why += " (verifier: " + std::string(log).substr(0, 200) + ")";
  }
  return fd;
}

}  // namespace

std::optional<DeviceNumber> device_number(const std::string& path, std::string* why) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    *why = path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode)) {
    *why = path + ": not a device node";
    return std::nullopt;
  }
  return DeviceNumber{S_ISBLK(st.st_mode), major(st.st_rdev), minor(st.st_rdev)};
}

std::vector<BpfInstruction> deny_devices_program(const std::vector<DeviceNumber>& deny) {
  std::vector<BpfInstruction> p;
  p.reserve(4 + 5 * deny.size() + 2);
  p.push_back(insn(BPF_LDX | BPF_W | BPF_MEM, kType, kCtx, kAccessType, 0));
  p.push_back(insn(BPF_ALU64 | BPF_AND | BPF_K, kType, 0, 0, 0xffff));
  p.push_back(insn(BPF_LDX | BPF_W | BPF_MEM, kMajorReg, kCtx, kMajor, 0));
  p.push_back(insn(BPF_LDX | BPF_W | BPF_MEM, kMinorReg, kCtx, kMinor, 0));
  for (const DeviceNumber& d : deny) {
    const std::int32_t type = d.block ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR;
    // Not this device: skip the rest of this rule (the jumps count the instructions after them).
    p.push_back(insn(BPF_JMP | BPF_JNE | BPF_K, kType, 0, 4, type));
    p.push_back(
        insn(BPF_JMP | BPF_JNE | BPF_K, kMajorReg, 0, 3, static_cast<std::int32_t>(d.major)));
    p.push_back(
        insn(BPF_JMP | BPF_JNE | BPF_K, kMinorReg, 0, 2, static_cast<std::int32_t>(d.minor)));
    p.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_K, kResult, 0, 0, 0));
    p.push_back(insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  }
  p.push_back(insn(BPF_ALU64 | BPF_MOV | BPF_K, kResult, 0, 0, 1));
  p.push_back(insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return p;
}

bool attach_device_filter(const std::string& cgroup_dir, const std::vector<DeviceNumber>& deny,
                          std::string* why) {
  const int program = load(deny_devices_program(deny), why);
  if (program < 0) return false;
  const int cgroup = open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cgroup < 0) {
    *why = cgroup_dir + ": " + std::strerror(errno);
    close(program);
    return false;
  }
  bpf_attr attr{};
  attr.target_fd = static_cast<std::uint32_t>(cgroup);
  attr.attach_bpf_fd = static_cast<std::uint32_t>(program);
  attr.attach_type = BPF_CGROUP_DEVICE;
  attr.attach_flags = BPF_F_ALLOW_MULTI;
  const bool ok = bpf(BPF_PROG_ATTACH, &attr) == 0;
  if (!ok) *why = errno_text(("attaching the device program to " + cgroup_dir).c_str());
  close(cgroup);
  close(program);  // the attachment keeps the program
  return ok;
}

bool device_filter_available(const std::string& cgroup_dir, std::string* why) {
  const std::string scratch = cgroup_dir + "/device-filter-probe";
  if (mkdir(scratch.c_str(), 0700) != 0 && errno != EEXIST) {
    *why = scratch + ": " + std::strerror(errno);
    return false;
  }
  const bool ok = attach_device_filter(scratch, {}, why);
  rmdir(scratch.c_str());
  return ok;
}

}  // namespace allot::agent
