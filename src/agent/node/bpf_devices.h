// Device control on cgroup v2: there is no devices.deny file, so a
// BPF_PROG_TYPE_CGROUP_DEVICE program, hand-assembled as runc's devicefilter
// does and loaded with bpf(2) (no libbpf), is attached to the task's cgroup.
// It refuses the listed character devices (every access: EPERM) and allows
// the rest. Thread-safe (no shared state).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ringmaster::agent {

// Attaches a program denying `chars` (major, minor) to the cgroup v2
// directory `cgroup_dir`, with BPF_F_ALLOW_MULTI: programs on the cgroup's
// ancestors (systemd's, a container runtime's) keep applying, and all must
// allow an access. The attachment lives as long as the cgroup. Fails on a
// filesystem that is not cgroup2 and without CAP_SYS_ADMIN.
Status AttachDeviceDenyList(const std::string& cgroup_dir, const std::vector<std::pair<int, int>>& chars);

}  // namespace ringmaster::agent
