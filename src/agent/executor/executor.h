// Executor: how an agent runs one task attempt on its node. One executor
// (ProcessExecutor) supervises every task under a detached shim, and runs it
// one of three ways, as TaskLaunch::runtime says: "process" (a bare process
// in its own session, as its user's unprivileged uid), "runc" (an OCI
// container over the image's layers) or "docker" (a container through the
// Engine API); docs/containers.md compares them. Every task attempt has a
// key unique on the node, its own cgroup with the job's limits (cgroups.h),
// and its combined stdout/stderr and metrics are read back with ReadOutput.
// Thread-safety: implementations are safe to call from several threads.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/executor/task_users.h"
#include "agent/node/cgroups.h"
#include "common/status.h"

namespace ringmaster::agent {

// Where a task's files are on its node: its sandbox (whose parent is root's),
// with the work directory `work/` inside, both its user's.
struct TaskSandbox {
  std::string dir;
  uid_t uid = 0;
  gid_t gid = 0;
};

struct TaskLaunch {
  std::string key;                         // e.g. "42.1" (task id . attempt)
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // the task's whole environment
  std::string working_dir;                 // "" = the task's own scratch directory
  TaskIdentity identity;                   // who it runs as (never root)
  // Directories the task needs: made as the task's user, after it dropped
  // root, before its command starts.
  std::vector<std::string> make_dirs;
  // Called with the new work directory (an fd; its user's, still empty but
  // for what this puts there) before the task starts: staging its files.
  // An error fails the start.
  std::function<Status(int work_fd)> prepare;
  std::string meta_json;                   // opaque, returned by Recover()

  // How it runs: "process", "runc" or "docker" (one the executor offers).
  std::string runtime = "process";
  // For runc and docker: the image, pulled to this node already (ImageCache).
  struct Image {
    std::string name;    // "torch"
    std::string digest;  // sha256 hex of its rootfs tar
    std::string tar;     // the rootfs tar (Docker imports it once)
    std::vector<std::string> layers;  // unpacked, read-only, top first (overlayfs lowerdir order)
    std::map<std::string, std::string> env;  // the image's own (PATH, LANG, NODE_PATH, ...)
    // A registry's image: "host/repo@sha256:<manifest hex>" (name is then
    // the reference as the job wrote it). Docker runs it by this reference,
    // pulled already; "" = one of the site's images (tar).
    std::string reference;
    // Docker: brings `tar` onto the node, called only when dockerd lacks the
    // image (runc deletes the tar once it has unpacked the image); the tar
    // stays while the launch that called it lives. Unset: `tar` is there.
    std::function<Status()> fetch_tar;
  } image;
  // "host", "none", "overlay" (containers) or "job": the job's own
  // namespace on the node (net/job_network.h), at `netns`, which a process
  // enters before it drops root and a runc container joins.
  std::string network = "host";
  std::string netns;
  // "overlay": runc's createRuntime hook (argv) that attaches the
  // container's network namespace to the node's overlay (net/overlay.h).
  std::vector<std::string> network_hook;
  TaskLimits limits;             // enforced through the task's cgroup on every runtime
  // What it may keep on the node's disk (its sandbox, a container's writable
  // root); past it, it is stopped and fails naming its disk limit. 0 = the
  // executor's default.
  int64_t disk_bytes = 0;
  std::vector<int> gpus;         // the node's GPU indices (nvidiaN) the task holds
};

struct TaskExit {
  int exit_code = -1;  // -1 when killed by a signal or never started
  int signal = 0;
  std::string message;  // set when the command could not be started
};

// What a task wrote: its combined stdout/stderr, or the metrics it appended
// to $RINGMASTER_METRICS_FILE (one JSON object per line).
enum class TaskOutput { kLog, kMetrics };

struct OutputChunk {
  std::string data;  // bytes from the offset asked for, at most the maximum asked for
  int64_t size = 0;  // the whole file's size when read
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual Status Start(const TaskLaunch& launch) = 0;
  // Asks the task to stop: SIGTERM to its process group now, SIGKILL once
  // `grace` has passed (enforced by later Poll calls). Idempotent.
  virtual Status Stop(const std::string& key, std::chrono::milliseconds grace) = 0;
  // nullopt while the task runs; its exit once it has ended.
  virtual std::optional<TaskExit> Poll(const std::string& key) = 0;
  // Reads what the task wrote from byte `offset`. NotFound: nothing written
  // yet. PermissionDenied: the file is not one the agent may read for the
  // task (a metrics file the task replaced by a symlink, a FIFO, another
  // user's file); the message says why.
  virtual StatusOr<OutputChunk> ReadOutput(const std::string& key, TaskOutput what, int64_t offset,
                                           size_t max_bytes) = 0;
  // Where the task's files are (running or ended, until Release).
  virtual StatusOr<TaskSandbox> SandboxOf(const std::string& key) = 0;
  // Tasks left by an earlier run of the agent (running or ended), with their meta_json.
  virtual std::map<std::string, std::string> Recover() = 0;
  // Forgets an ended task and deletes what it left on disk.
  virtual void Release(const std::string& key) = 0;
  // A descriptor that becomes readable once the task has ended (its exit is
  // then there for Poll), owned by the caller; -1 when there is none (poll).
  virtual int ExitFd(const std::string& key) { return -1; }
  // How it can run tasks (TaskLaunch::runtime): what the agent offers the server.
  virtual std::vector<std::string> Runtimes() const { return {"process"}; }
  // What the task's cgroup uses now; nullopt when its use is not accounted
  // (limits off). Thread-safe: the monitor's sampler calls it.
  virtual std::optional<LiveUsage> Usage(const std::string& key) { return std::nullopt; }
};

}  // namespace ringmaster::agent
