#include "agent/executor/task_seccomp.h"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace ringmaster::agent {
namespace {

// One architecture's numbers of the calls the filter looks at.
struct Calls {
  uint32_t clone, unshare, clone3, io_uring_setup, io_uring_enter, io_uring_register;
};

constexpr uint32_t kCloneNewUser = 0x10000000;  // CLONE_NEWUSER

sock_filter Stmt(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter Jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { return BPF_JUMP(code, k, jt, jf); }
uint32_t Errno(int e) { return SECCOMP_RET_ERRNO | (static_cast<uint32_t>(e) & SECCOMP_RET_DATA); }

// The checks for one architecture, ending in ALLOW. The syscall number is
// loaded first; each test jumps only forward past its own verdict.
std::vector<sock_filter> Checks(const Calls& c, bool x86_64) {
  std::vector<sock_filter> p;
  p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  if (x86_64) {
    // The x32 ABI (numbers with bit 30 set) is not for tasks.
    p.push_back(Jump(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1));
    p.push_back(Stmt(BPF_RET | BPF_K, Errno(ENOSYS)));
  }
  for (uint32_t nr : {c.io_uring_setup, c.io_uring_enter, c.io_uring_register}) {
    p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1));
    p.push_back(Stmt(BPF_RET | BPF_K, Errno(EPERM)));
  }
  p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, c.clone3, 0, 1));
  p.push_back(Stmt(BPF_RET | BPF_K, Errno(ENOSYS)));
  // clone's and unshare's flags are both the first argument (its low word).
  for (uint32_t nr : {c.clone, c.unshare}) {
    p.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 4));
    p.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));
    p.push_back(Jump(BPF_JMP | BPF_JSET | BPF_K, kCloneNewUser, 0, 1));
    p.push_back(Stmt(BPF_RET | BPF_K, Errno(EPERM)));
    p.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  }
  p.push_back(Stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  return p;
}

}  // namespace

std::string InstallTaskSeccomp() {
#if defined(__x86_64__)
  constexpr uint32_t kNative = AUDIT_ARCH_X86_64;
  const Calls native{56, 272, 435, 425, 426, 427};
  // 32-bit programs (int 0x80) reach the i386 table: the same checks there.
  const std::vector<sock_filter> other = Checks(Calls{120, 310, 435, 425, 426, 427}, false);
  constexpr bool kX86_64 = true;
#elif defined(__aarch64__)
  constexpr uint32_t kNative = AUDIT_ARCH_AARCH64;
  const Calls native{220, 97, 435, 425, 426, 427};
  const std::vector<sock_filter> other = {Stmt(BPF_RET | BPF_K, Errno(ENOSYS))};  // no compat tasks
  constexpr bool kX86_64 = false;
#else
#error "InstallTaskSeccomp: add this architecture's syscall numbers"
#endif
  const std::vector<sock_filter> mine = Checks(native, kX86_64);
  std::vector<sock_filter> prog;
  prog.push_back(Stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  prog.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, kNative, static_cast<uint8_t>(other.size()), 0));
  prog.insert(prog.end(), other.begin(), other.end());
  prog.insert(prog.end(), mine.begin(), mine.end());
  sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog, 0, 0) != 0) {
    return fmt::format("seccomp: {}", std::strerror(errno));
  }
  return "";
}

}  // namespace ringmaster::agent
