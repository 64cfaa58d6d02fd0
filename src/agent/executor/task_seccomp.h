// The seccomp filter of process tasks (runc and docker tasks have
// TaskSeccompProfile): no user namespaces (clone or unshare with
// CLONE_NEWUSER: EPERM; clone3: ENOSYS, so libc falls back to clone) and no
// io_uring (EPERM). Everything else is allowed. Thread-safe (no state).
#pragma once

#include <string>

namespace ringmaster::agent {

// Installs the filter on the calling thread, inherited across fork and exec.
// Needs PR_SET_NO_NEW_PRIVS set (or CAP_SYS_ADMIN). "" or why it failed.
std::string InstallTaskSeccomp();

}  // namespace ringmaster::agent
