// Cgroups: the limits a task runs under, on cgroup v1 (what these hosts
// mount: /sys/fs/cgroup/{cpu,memory,pids,devices}). Every task attempt gets
// its own cgroup, /ringmaster/<agent instance>/<task key> in each hierarchy,
// made and limited by the agent before the task starts, whatever runs it:
//  - the process executor's shim moves the task into it before exec;
//  - runc puts the container in a child of it (cgroupsPath .../<key>/task);
//  - Docker puts the container in a child of it (HostConfig.CgroupParent).
// The limits sit on the task's cgroup, so they hold for every executor and
// no runtime can loosen them (v1 limits are hierarchical). Its counters tell
// an out-of-memory kill from any other SIGKILL. Thread-compatible; the
// functions that only read are thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::agent {

struct TaskLimits {
  int64_t cpu_milli = 0;     // CFS quota per 100 ms period; 0 = none
  int64_t memory_bytes = 0;  // memory.limit_in_bytes; 0 = none
  int64_t pids = 0;          // pids.max; 0 = none
  // Character devices (major, minor) the task must not open: the node's GPUs
  // that are not its own.
  std::vector<std::pair<int, int>> deny_devices;
};

// What a task's cgroup counted, read after it ended.
struct CgroupUsage {
  int64_t oom_kills = 0;        // processes the OOM killer ended in the cgroup itself
  int64_t memory_failcnt = 0;   // times usage hit the limit (in the cgroup or below it)
  int64_t memory_max_bytes = 0; // peak usage
  int64_t cpu_periods = 0;      // CFS periods with a quota in force
  int64_t cpu_throttled = 0;    // ... in which the task was throttled
  int64_t cpu_throttled_ns = 0;
};

// A task cgroup's use at one moment.
struct LiveUsage {
  int64_t cpu_ns = -1;        // CPU time so far (cpuacct.usage); -1 = not accounted
  int64_t memory_bytes = 0;   // usage less inactive page cache (what `docker stats` shows)
  int64_t pids = 0;
  int64_t oom_kills = 0;
};

class Cgroups {
 public:
  // The v1 hierarchies of this host; `instance` names this agent's subtree.
  // FailedPrecondition when the memory, cpu or pids hierarchy is missing or
  // read-only (not root, cgroup v2 only).
  static StatusOr<Cgroups> Detect(const std::string& instance, const std::string& mount_root = "/sys/fs/cgroup");

  // "/ringmaster/<instance>/<key>": the same path in every hierarchy (what
  // runc's cgroupsPath and Docker's CgroupParent take).
  std::string PathOf(const std::string& key) const;
  // That cgroup's directory in `controller`'s hierarchy.
  std::string DirOf(const std::string& controller, const std::string& key) const;
  // The cgroup.procs files a process writes its pid to, to join the task's cgroup.
  std::vector<std::string> ProcsFiles(const std::string& key) const;

  // Makes the task's cgroup in each hierarchy and sets its limits. A leftover
  // of an earlier attempt with the same key is emptied and reused.
  Status Create(const std::string& key, const TaskLimits& limits) const;
  CgroupUsage Usage(const std::string& key) const;
  // What the task's cgroup uses now (the monitor samples it every second);
  // nullopt when the cgroup is not there (removed, or never made).
  std::optional<LiveUsage> Live(const std::string& key) const;
  // Kills what is left in the task's cgroup and removes it (children first).
  void Remove(const std::string& key) const;

  // The controllers Create touches: memory, cpu, pids, devices, and cpuacct
  // where its hierarchy is writable (the CPU time the monitor reads).
  const std::vector<std::string>& Controllers() const { return controllers_; }

 private:
  std::vector<std::string> controllers_;
  std::string mount_root_;
  std::string base_;  // "/ringmaster/<instance>"
};

// The counters of a cgroup, from its memory and cpu directories.
CgroupUsage ReadCgroupUsage(const std::string& memory_dir, const std::string& cpu_dir);

// Moves the calling process into the cgroup whose cgroup.procs files are
// given; what went wrong, or "". Async-signal-safe enough for a forked child
// (open/write/close only).
std::string JoinCgroup(const std::vector<std::string>& procs_files);

// Why a task that ended this way was killed, if it was for memory: "out of
// memory (limit 64Mi)"; else "". `oom_event`: the cgroup's OOM notification
// fired while it ran (the shim watches it); usage.oom_kills: the OOM killer
// counted a kill in the task's own cgroup. The limit being hit (failcnt) is
// no evidence: reclaiming page cache hits it too.
std::string OutOfMemoryReason(const CgroupUsage& usage, bool oom_event, int exit_code, int signal, int64_t memory_limit);

}  // namespace ringmaster::agent
