#include "agent/container/seccomp_profile.h"

namespace ringmaster::agent {

nlohmann::json TaskSeccompProfile() {
  using nlohmann::json;
  const json denied = {"acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module",
                       "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_kernel_syms",
                       "init_module", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl",
                       "lookup_dcookie", "mount", "mount_setattr", "move_mount", "name_to_handle_at",
                       "nfsservctl", "open_by_handle_at", "open_tree", "perf_event_open", "pivot_root",
                       "process_vm_readv", "process_vm_writev", "quotactl", "reboot", "request_key",
                       "setns", "settimeofday", "stime", "swapoff", "swapon", "sysfs", "_sysctl", "umount", "umount2",
                       "unshare", "uselib", "userfaultfd", "ustat", "vm86", "vm86old",
                       // io_uring: a large kernel surface, and its work escapes seccomp.
                       "io_uring_setup", "io_uring_enter", "io_uring_register"};
  json rules = json::array({{{"names", denied}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", 1}}});
  // New namespaces through clone(2) too: one rule per flag (rules for one
  // call are alternatives). clone3's flags are in memory a filter cannot
  // read: ENOSYS makes libc fall back to clone.
  for (uint64_t flag : {0x00020000ULL /*NEWNS*/, 0x02000000ULL /*NEWCGROUP*/, 0x04000000ULL /*NEWUTS*/,
                        0x08000000ULL /*NEWIPC*/, 0x10000000ULL /*NEWUSER*/, 0x20000000ULL /*NEWPID*/,
                        0x40000000ULL /*NEWNET*/}) {
    rules.push_back({{"names", {"clone"}}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", 1},
                     {"args", {{{"index", 0}, {"value", flag}, {"valueTwo", flag}, {"op", "SCMP_CMP_MASKED_EQ"}}}}});
  }
  rules.push_back({{"names", {"clone3"}}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", 38}});
  json profile = {{"defaultAction", "SCMP_ACT_ALLOW"},
                  {"architectures", {"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"}},
                  {"syscalls", rules}};
  return profile;
}

}  // namespace ringmaster::agent
