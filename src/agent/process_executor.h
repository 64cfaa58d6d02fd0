// ProcessExecutor: runs each task as a process in its own session and
// process group, supervised by a shim (`ringmaster shim DIR`, after
// containerd-shim and conmon): the shim is detached from the agent, writes
// the task's pgid and, when it ends, its exit status into the task's
// directory. So tasks outlive an agent crash or restart, and a new agent
// re-adopts them from the directories. Stop signals the whole process group.
// Thread-safe.
#pragma once

#include <mutex>

#include "agent/executor.h"

namespace ringmaster::agent {

class ProcessExecutor final : public Executor {
 public:
  // state_dir: where task directories live. shim_binary: the ringmaster binary.
  ProcessExecutor(std::string state_dir, std::string shim_binary);

  Status Start(const TaskLaunch& launch) override;
  Status Stop(const std::string& key, std::chrono::milliseconds grace) override;
  std::optional<TaskExit> Poll(const std::string& key) override;
  std::string LogPath(const std::string& key) const override;
  std::string MetricsPath(const std::string& key) const override;
  std::map<std::string, std::string> Recover() override;
  void Release(const std::string& key) override;

 private:
  std::string TaskDir(const std::string& key) const;

  const std::string state_dir_;
  const std::string shim_binary_;
  std::mutex mu_;
  struct Stopping {
    std::chrono::steady_clock::time_point kill_at;  // SIGKILL from then on
    bool term_sent = false;
  };
  // Signals the stopping task's group as its stop request requires by now.
  void SignalLocked(const std::string& key, Stopping& s);

  std::map<std::string, Stopping> stopping_;  // GUARDED_BY(mu_)
};

// Entry point of `ringmaster shim DIR`. Returns the process exit code.
int RunShim(const std::string& task_dir);

}  // namespace ringmaster::agent
