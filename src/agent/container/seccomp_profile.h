// The seccomp profile of runc and docker tasks: a denylist of what Docker's
// default profile refuses an unprivileged container (namespaces, mounts,
// keyrings, modules, BPF, perf, userfaultfd, clocks, ...) plus io_uring, all
// with EPERM; clone3 with ENOSYS (libc falls back to clone, whose flags a
// filter can read). Everything else is allowed. Pure function, thread-safe.
#pragma once

#include <nlohmann/json.hpp>

namespace ringmaster::agent {

// In the OCI runtime spec's form (linux.seccomp), which Docker's
// `seccomp=<profile>` security option reads too.
nlohmann::json TaskSeccompProfile();

}  // namespace ringmaster::agent
