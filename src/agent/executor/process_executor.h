// ProcessExecutor: the one Executor (executor.h). Each task runs under a
// detached shim (shim.h) as its user's unprivileged uid: as a process in its
// own session, or in a container through a ContainerRuntime (runc, docker).
// Its control dir (<state_dir>/tasks/<key>) is the agent's; its sandbox is the
// task's and treated as hostile. Tasks outlive the agent. Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <optional>

#include "agent/container/container_runtime.h"
#include "agent/executor/disk_guard.h"
#include "agent/executor/executor.h"
#include "agent/executor/safe_fs.h"
#include "agent/executor/shim.h"
#include "agent/executor/staged_runtime.h"
#include "agent/node/cgroups.h"

namespace ringmaster::agent {

struct ProcessExecutorOptions {
  std::string state_dir;     // the agent's data dir; made (or kept) 0700
  // Where sandboxes live; every task's user must be able to traverse it.
  // "" = /var/lib/ringmaster/sandboxes for a root agent, else <state_dir>/sandboxes.
  // Each agent gets its own subdirectory (an id kept in state_dir), locked
  // while it runs, so several agents on one host never collide; one of a
  // gone agent that left no task behind is removed by the next agent to start.
  std::string sandbox_root;
  std::string shim_binary;   // the ringmaster binary
  // Stage the tools found next to this ringmaster binary for tasks (staged_runtime.h); "" = none.
  std::string runtime_from;
  int64_t max_log_bytes = int64_t{64} << 20;  // per task attempt; 0 = no cap
  int64_t max_procs = 4096;                   // RLIMIT_NPROC of each task uid; 0 = unchanged
  // Container runtimes by name ("runc", "docker"), beside "process".
  std::map<std::string, std::shared_ptr<ContainerRuntime>> runtimes;
  // Enforce tasks' limits with cgroups (cgroups.h). Required for container
  // runtimes; without root, or with `false`, process tasks run unlimited.
  bool limits = true;
  // Where the cgroup hierarchy is mounted (v1's hierarchies, or v2's one).
  std::string cgroup_root = "/sys/fs/cgroup";
  // Where the node's GPU device nodes are (nvidia0, nvidia1, ..., nvidiactl,
  // nvidia-uvm): /dev on a GPU host, a directory of mknod'ed fakes in tests.
  std::string gpu_device_dir = "/dev";
  // The site's CDI specs (cdi.h), applied to containers with GPUs; null = none.
  std::shared_ptr<CdiRegistry> cdi;
  std::map<int, std::string> gpu_uuids;  // GPU index -> NVML's UUID, to find a GPU's CDI device by
  // Tasks' disk (TaskLaunch::disk_bytes): the limit of a task whose launch
  // sets none (0 = none), how often each task's use is measured, and the
  // grace of the stop that ends a task past its limit.
  int64_t default_task_disk = 0;
  std::chrono::milliseconds disk_check_interval{5000};
  std::chrono::milliseconds disk_stop_grace{10000};
};

// In a task's control dir: its disk limit and the dirs measured against it
// (JSON), and why it was stopped when it went past it.
inline constexpr const char* kDiskWatchFile = "disk.json";
inline constexpr const char* kDiskStopFile = "disk-limit";

// A task's GPU variables: RINGMASTER_GPUS (the node's indices),
// CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES.
std::map<std::string, std::string> TaskGpuEnv(const TaskLaunch& launch);

class ProcessExecutor final : public Executor {
 public:
  static constexpr const char* kDefaultSandboxRoot = "/var/lib/ringmaster/sandboxes";

  // Makes the directories (refusing a sandbox root that task users cannot
  // reach or that others could tamper with) and stages the runtime.
  static StatusOr<std::unique_ptr<ProcessExecutor>> Create(ProcessExecutorOptions options);

  Status Start(const TaskLaunch& launch) override;
  Status Stop(const std::string& key, std::chrono::milliseconds grace) override;
  std::optional<TaskExit> Poll(const std::string& key) override;
  StatusOr<OutputChunk> ReadOutput(const std::string& key, TaskOutput what, int64_t offset,
                                   size_t max_bytes) override;
  std::map<std::string, std::string> Recover() override;
  // The task's sandbox, from its spec.
  StatusOr<TaskSandbox> SandboxOf(const std::string& key) override;
  void Release(const std::string& key) override;

  // This agent's directory of sandboxes: <sandbox_root>/<instance>.
  const std::string& sandbox_dir() const { return sandbox_dir_; }
  const StagedRuntime& runtime() const { return runtime_; }
  // "process" and the container runtimes: what the agent offers the server.
  std::vector<std::string> Runtimes() const override;
  // A pidfd of the task's shim, which writes exit.json and then exits.
  int ExitFd(const std::string& key) override;
  std::optional<LiveUsage> Usage(const std::string& key) override;
  // The task cgroups' layout; null when limits are not enforced.
  const Cgroups* cgroups() const { return cgroups_.get(); }
  const std::string& instance() const { return instance_; }
  // The control directory of a task: spec.json, pids, exit.json, output.log.
  std::string TaskDir(const std::string& key) const;

 private:
  explicit ProcessExecutor(ProcessExecutorOptions options) : options_(std::move(options)) {}


  struct Stopping {
    std::chrono::steady_clock::time_point kill_at;  // SIGKILL from then on
    bool term_sent = false;
  };
  // Signals the stopping task's group as its stop request requires by now.
  void SignalLocked(const std::string& key, Stopping& s);

  const ProcessExecutorOptions options_;
  // The container-specific part of Start: the container, and what the shim runs.
  // `gpus`: the node's GPU device nodes (GpuDevices, read once per start).
  // `writable`: where the container writes outside the sandbox (ContainerRuntime::Command).
  Status PrepareContainer(const TaskLaunch& launch, const std::string& sandbox, const std::map<int, DeviceNode>& gpus,
                          int64_t disk_bytes, ShimSpec* spec, std::vector<std::string>* writable);
  // Disk limits (process_executor_disk.cc): watching a started task's `dirs`
  // (recorded in its control dir, so a restarted agent watches it again),
  // and stopping one past its limit with the reason its exit then carries.
  void WatchDisk(const std::string& key, int64_t limit, const std::vector<std::string>& dirs);
  void RewatchDisk(const std::string& key);
  void StopForDisk(const std::string& key, int64_t used, int64_t limit);
  // The node's GPU device nodes by index (nvidiaN), from gpu_device_dir.
  std::map<int, DeviceNode> GpuDevices() const;

  std::string sandbox_dir_;
  std::string instance_;
  std::unique_ptr<Cgroups> cgroups_;
  UniqueFd instance_lock_;  // flock on <sandbox_dir>/agent.lock while this agent runs
  StagedRuntime runtime_;
  std::mutex mu_;
  std::map<std::string, Stopping> stopping_;  // GUARDED_BY(mu_)
  std::map<std::string, TaskSandbox> sandboxes_;  // GUARDED_BY(mu_): a cache of the specs'
  std::unique_ptr<DiskGuard> disk_;  // last: its thread, which calls StopForDisk, ends first
};

}  // namespace ringmaster::agent
