#include "agent/device_filter.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera::agent {
namespace {

bpf_insn insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}

// The program: allow (r0 = 1) a character device that matches a rule, else deny (r0 = 0).
// Registers: r1 the context (struct bpf_cgroup_dev_ctx), r2 the device type, r4 major, r5 minor.
std::vector<bpf_insn> program(const std::vector<AllowedDevice>& rules) {
  constexpr uint8_t kLdxW = BPF_LDX | BPF_MEM | BPF_W;
  constexpr uint8_t kAnd = BPF_ALU | BPF_AND | BPF_K;
  constexpr uint8_t kJne = BPF_JMP | BPF_JNE | BPF_K;
  constexpr uint8_t kMov = BPF_ALU64 | BPF_MOV | BPF_K;
  constexpr uint8_t kExit = BPF_JMP | BPF_EXIT;
  std::vector<bpf_insn> p = {
      insn(kLdxW, 2, 1, offsetof(bpf_cgroup_dev_ctx, access_type), 0),
      insn(kAnd, 2, 0, 0, 0xffff),  // The low half is the type; the access is not restricted.
      insn(kLdxW, 4, 1, offsetof(bpf_cgroup_dev_ctx, major), 0),
      insn(kLdxW, 5, 1, offsetof(bpf_cgroup_dev_ctx, minor), 0),
  };
  for (const AllowedDevice& r : rules) {
    // Each block falls through to the next one on a mismatch: jumps land just past its end.
    const int16_t len = r.minor_any ? 4 : 5;
    p.push_back(insn(kJne, 2, 0, static_cast<int16_t>(len - 1), BPF_DEVCG_DEV_CHAR));
    p.push_back(insn(kJne, 4, 0, static_cast<int16_t>(len - 2), static_cast<int32_t>(r.major)));
    if (!r.minor_any) {
      p.push_back(insn(kJne, 5, 0, 2, static_cast<int32_t>(r.minor)));
    }
    p.push_back(insn(kMov, 0, 0, 0, 1));
    p.push_back(insn(kExit, 0, 0, 0, 0));
  }
  p.push_back(insn(kMov, 0, 0, 0, 0));
  p.push_back(insn(kExit, 0, 0, 0, 0));
  return p;
}

long bpf(int cmd, bpf_attr& attr) { return ::syscall(SYS_bpf, cmd, &attr, sizeof attr); }

// Loads the program; returns its descriptor.
core::Result<int> load(const std::vector<AllowedDevice>& rules) {
  const std::vector<bpf_insn> p = program(rules);
  static char license[] = "Apache-2.0";
  char log[4096] = {};
  bpf_attr attr{};
  attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  attr.insns = reinterpret_cast<uint64_t>(p.data());
  attr.insn_cnt = static_cast<uint32_t>(p.size());
  attr.license = reinterpret_cast<uint64_t>(license);
  attr.log_buf = reinterpret_cast<uint64_t>(log);
  attr.log_size = sizeof log;
  attr.log_level = 1;
  const long fd = bpf(BPF_PROG_LOAD, attr);
  if (fd < 0) {
    const int err = errno;
    return core::unavailable(std::string("cgroup v2: cannot load the device filter (eBPF): ") +
                             std::strerror(err) + (log[0] != '\0' ? std::string(": ") + log : ""));
  }
  return static_cast<int>(fd);
}

}  // namespace

const std::vector<AllowedDevice>& basicDevices() {
  static const std::vector<AllowedDevice> devices = {
      {1, 3, false}, {1, 5, false}, {1, 7, false}, {1, 8, false},
      {1, 9, false}, {5, 0, false}, {5, 2, false}, {136, 0, true},
  };
  return devices;
}

core::Status attachDeviceFilter(const std::string& dir, const std::vector<DeviceRule>& allowed) {
  std::vector<AllowedDevice> rules = basicDevices();
  for (const DeviceRule& d : allowed) {
    rules.push_back({d.major, d.minor, false});
  }
  TESSERA_ASSIGN_OR_RETURN(const int prog, load(rules));
  const int cg = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cg < 0) {
    const int err = errno;
    ::close(prog);
    return core::unavailable("cgroup v2: cannot open " + dir + ": " + std::strerror(err));
  }
  bpf_attr attr{};
  attr.target_fd = static_cast<uint32_t>(cg);
  attr.attach_bpf_fd = static_cast<uint32_t>(prog);
  attr.attach_type = BPF_CGROUP_DEVICE;
  attr.attach_flags = BPF_F_ALLOW_MULTI;  // Filters of the groups above still apply too.
  const long rc = bpf(BPF_PROG_ATTACH, attr);
  const int err = errno;
  ::close(cg);
  ::close(prog);  // The attachment keeps the program.
  if (rc != 0) {
    return core::unavailable("cgroup v2: cannot attach the device filter to " + dir + ": " +
                             std::strerror(err));
  }
  return core::Status::ok();
}

core::Status probeDeviceFilter() {
  TESSERA_ASSIGN_OR_RETURN(const int prog, load(basicDevices()));
  ::close(prog);
  return core::Status::ok();
}

}  // namespace tessera::agent
