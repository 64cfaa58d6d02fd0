// Names for the threads of a process, as `top -H`, perf and /proc/PID/task/*/comm
// show them: "http-io", "agent-tick", ... (at most 15 characters). The
// server's threads start with "http-" or "server-", the agent's with
// "agent-": bench/node_launch splits one `ringmaster up`'s CPU by them.
// Thread-safe.
#pragma once

namespace ringmaster {

// Names the calling thread (longer names are cut to 15 characters).
void NameThisThread(const char* name);

}  // namespace ringmaster
