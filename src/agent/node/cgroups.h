// Cgroups: the limits a task runs under, in a cgroup of its own made before
// it starts (/ringmaster/<agent instance>/<task key>; the shim moves a process
// in, runc and Docker put a container in a child). Backends for cgroup v1 and
// v2 (cgroups_v1.cc, cgroups_v2.cc), chosen at start by what the host mounts.
// Thread-compatible; the functions that only read are thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::agent {

// Bandwidth limits on the task's disk; 0 = none.
struct IoLimits {
  int64_t read_bps = 0;
  int64_t write_bps = 0;
  int64_t read_iops = 0;
  int64_t write_iops = 0;
  bool any() const { return read_bps > 0 || write_bps > 0 || read_iops > 0 || write_iops > 0; }
};

struct TaskLimits {
  int64_t cpu_milli = 0;     // a CFS quota per 100 ms period; 0 = none
  int64_t memory_bytes = 0;  // the hard limit; 0 = none
  int64_t pids = 0;          // pids.max; 0 = none
  IoLimits io;               // on the block device holding the task's sandbox
  // Character devices (major, minor) the task must not open: the node's GPUs
  // that are not its own.
  std::vector<std::pair<int, int>> deny_devices;
};

// What a task's cgroup counted, read after it ended.
struct CgroupUsage {
  int64_t oom_kills = 0;        // processes the OOM killer ended (v2: below the cgroup too)
  int64_t memory_failcnt = 0;   // times usage hit the limit (v2: memory.events max)
  int64_t memory_max_bytes = 0; // peak usage; -1 = not known (v2 before Linux 5.19)
  int64_t cpu_periods = 0;      // CFS periods with a quota in force
  int64_t cpu_throttled = 0;    // ... in which the task was throttled
  int64_t cpu_throttled_ns = 0;
};

// A task cgroup's use at one moment.
struct LiveUsage {
  int64_t cpu_ns = -1;        // CPU time so far; -1 = not accounted
  int64_t memory_bytes = 0;   // usage less inactive page cache (what `docker stats` shows)
  int64_t pids = 0;
  int64_t oom_kills = 0;
};

struct CgroupOptions {
  std::string instance;               // this agent's subtree: /ringmaster/<instance>
  std::string root = "/sys/fs/cgroup";  // where the hierarchy (v2) or hierarchies (v1) are mounted
  // A path on the disk tasks write to (the sandbox root): its block device
  // gets the io limits. "" = none.
  std::string io_path;
  std::string sys_root = "/sys";      // where /sys/dev/block is (tests give another)
};

class Cgroups {
 public:
  virtual ~Cgroups() = default;

  // The backend for what is mounted at options.root: v2 when it is a cgroup2
  // mount (its statfs magic, or a cgroup.controllers file at its top), else
  // v1. FailedPrecondition when the controllers tasks need are missing or
  // read-only (not root).
  static StatusOr<std::unique_ptr<Cgroups>> Detect(const CgroupOptions& options);

  virtual int Version() const = 0;  // 1 or 2
  // "/ringmaster/<instance>/<key>": what runc's cgroupsPath and Docker's
  // CgroupParent take (the same path in every v1 hierarchy).
  std::string PathOf(const std::string& key) const { return base_ + "/" + key; }
  // That cgroup's directory holding `controller`'s files (v2: the one directory).
  virtual std::string DirOf(const std::string& controller, const std::string& key) const = 0;
  // The cgroup.procs files a process writes its pid to, to join the task's cgroup.
  virtual std::vector<std::string> ProcsFiles(const std::string& key) const = 0;

  // Makes the task's cgroup and sets its limits. A leftover of an earlier
  // attempt with the same key is emptied and reused.
  virtual Status Create(const std::string& key, const TaskLimits& limits) const = 0;
  CgroupUsage Usage(const std::string& key) const;
  // What the task's cgroup uses now (the monitor samples it every second);
  // nullopt when the cgroup is not there (removed, or never made).
  virtual std::optional<LiveUsage> Live(const std::string& key) const = 0;
  // Kills what is left in the task's cgroup and removes it (children first).
  virtual void Remove(const std::string& key) const = 0;

  // The block device ("major:minor") that gets the io limits; "" = none found.
  const std::string& io_device() const { return io_device_; }

 protected:
  std::string root_;
  std::string base_;       // "/ringmaster/<instance>"
  std::string io_device_;
};

// The counters of a cgroup, from its memory and cpu directories (the same
// directory on v2).
CgroupUsage ReadCgroupUsage(int version, const std::string& memory_dir, const std::string& cpu_dir);

// The kernel's OOM notifications for a task's memory cgroup, for poll(2):
// v1 an eventfd registered on memory.oom_control (cgroup.event_control); v2
// memory.events, which the kernel marks POLLPRI when a count changes. Both
// fire for an OOM anywhere below the cgroup, a runtime's child included.
// Single-threaded (the shim's).
class OomWatch {
 public:
  // Not watching (fd() == -1) when `memory_dir` is "" or has no such file.
  OomWatch(int version, const std::string& memory_dir);
  ~OomWatch();
  OomWatch(const OomWatch&) = delete;
  OomWatch& operator=(const OomWatch&) = delete;
  int fd() const { return fd_; }
  short events() const;
  // Reads what the kernel reported (call when poll says so, and once at the
  // end); true once an OOM happened since the watch began. The watch ends
  // (fd() == -1) when its cgroup is gone.
  bool Check();

 private:
  int version_;
  int fd_ = -1;
  int64_t base_ = 0;  // v2: oom + oom_kill when the watch began
  bool fired_ = false;
};

// Moves the calling process into the cgroup whose cgroup.procs files are
// given; what went wrong, or "". Async-signal-safe enough for a forked child
// (open/write/close only).
std::string JoinCgroup(const std::vector<std::string>& procs_files);

// Why a task that ended this way was killed, if it was for memory: "out of
// memory (limit 64Mi)"; else "". `oom_event`: the cgroup's OOM notification
// fired while it ran (the shim watches it); usage.oom_kills: the OOM killer
// counted a kill. The limit being hit (failcnt) is no evidence: reclaiming
// page cache hits it too.
std::string OutOfMemoryReason(const CgroupUsage& usage, bool oom_event, int exit_code, int signal, int64_t memory_limit);

// The whole disk ("major:minor") holding `path`, through <sys_root>/dev/block
// (a partition maps to its disk, as io.max and blkio.throttle want); "" when
// the path is on no block device (tmpfs, overlay, NFS).
std::string BlockDeviceOf(const std::string& path, const std::string& sys_root = "/sys");

}  // namespace ringmaster::agent
