// Work inside a network namespace in-process: on a thread of its own that
// ends with the work. That thread never goes back to the host's namespace,
// so nothing else can ever run in the wrong one. Thread-safe.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"

namespace ringmaster::net {

// Makes a new network namespace, binds it at `path` (a file that exists, in
// a mount that does not propagate) and runs fn in it.
Status InNewNamespace(const std::string& path, const std::function<Status()>& fn);
// Runs fn in the namespace at `path` (a bind mount or /proc/PID/ns/net).
Status InNamespace(const std::string& path, const std::function<Status()>& fn);

// Writes `value` to /proc/sys/`key` ("net/ipv4/ip_local_port_range"): the
// net.* keys are those of the calling thread's namespace.
Status WriteSysctl(const std::string& key, const std::string& value);

}  // namespace ringmaster::net
