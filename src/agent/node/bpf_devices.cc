#include "agent/node/bpf_devices.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace ringmaster::agent {
namespace {

bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst;
  i.src_reg = src;
  i.off = off;
  i.imm = imm;
  return i;
}

// r1 is the bpf_cgroup_dev_ctx: access_type (access << 16 | type), major, minor.
// Returns 0 (deny) for a listed char device, 1 (allow) for everything else.
std::vector<bpf_insn> Program(const std::vector<std::pair<int, int>>& chars) {
  std::vector<bpf_insn> p = {
      Insn(BPF_LDX | BPF_W | BPF_MEM, 2, 1, 0, 0),      // r2 = access_type
      Insn(BPF_ALU | BPF_AND | BPF_K, 2, 0, 0, 0xffff),  // r2 &= 0xffff: the device type
      Insn(BPF_LDX | BPF_W | BPF_MEM, 3, 1, 4, 0),      // r3 = major
      Insn(BPF_LDX | BPF_W | BPF_MEM, 4, 1, 8, 0),      // r4 = minor
  };
  for (const auto& [major, minor] : chars) {
    // Each rule is 5 instructions; a mismatch jumps to the next rule.
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, 2, 0, 4, BPF_DEVCG_DEV_CHAR));
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, 3, 0, 3, major));
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, 4, 0, 2, minor));
    p.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0));
    p.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  }
  p.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 1));
  p.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return p;
}

}  // namespace

Status AttachDeviceDenyList(const std::string& cgroup_dir, const std::vector<std::pair<int, int>>& chars) {
  const std::vector<bpf_insn> insns = Program(chars);
  static const char kLicense[] = "Apache-2.0";
  // Loaded without the verifier's log first: a log too small for the
  // program's trace fails the load itself (ENOSPC, from about 14 rules), and
  // a node may have many GPUs to deny. Only a failure is loaded again with a
  // log large enough to say why (as runc and cilium do).
  auto load = [&](std::vector<char>* log) {
    bpf_attr attr{};
    attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
    attr.insns = reinterpret_cast<uint64_t>(insns.data());
    attr.insn_cnt = static_cast<uint32_t>(insns.size());
    attr.license = reinterpret_cast<uint64_t>(kLicense);
    if (log) {
      attr.log_buf = reinterpret_cast<uint64_t>(log->data());
      attr.log_size = static_cast<uint32_t>(log->size());
      attr.log_level = 1;
    }
    return static_cast<int>(syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof attr));
  };
  const int prog = load(nullptr);
  if (prog < 0) {
    const int err = errno;
    std::vector<char> log(1 << 20, '\0');
    const int again = load(&log);
    if (again >= 0) close(again);
    log.back() = '\0';
    // The verifier's last lines say why; the whole trace would be one huge line.
    std::string why(log.data());
    if (why.size() > 400) why = "..." + why.substr(why.size() - 400);
    return Internal(fmt::format("loading the device filter (bpf BPF_PROG_LOAD): {}{}{}", std::strerror(err),
                                why.empty() ? "" : ": ", why));
  }
  const int cg = open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cg < 0) {
    const int err = errno;
    close(prog);
    return Internal(fmt::format("open {}: {}", cgroup_dir, std::strerror(err)));
  }
  bpf_attr attach{};
  attach.target_fd = static_cast<uint32_t>(cg);
  attach.attach_bpf_fd = static_cast<uint32_t>(prog);
  attach.attach_type = BPF_CGROUP_DEVICE;
  attach.attach_flags = BPF_F_ALLOW_MULTI;
  const int rc = static_cast<int>(syscall(SYS_bpf, BPF_PROG_ATTACH, &attach, sizeof attach));
  const int err = errno;
  // The cgroup holds its own reference to an attached program.
  close(cg);
  close(prog);
  if (rc != 0) {
    return Internal(fmt::format("attaching the device filter to {} (bpf BPF_PROG_ATTACH): {}", cgroup_dir,
                                std::strerror(err)));
  }
  return Status::Ok();
}

}  // namespace ringmaster::agent
