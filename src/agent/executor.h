// Executor: how an agent runs one task attempt on its node. Backends: the
// process executor (here; each task in its own session and process group
// under a shim), later runc and Docker. Every task attempt has a key unique
// on the node; its combined stdout/stderr goes to LogPath(key).
// Thread-safety: implementations are safe to call from several threads.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::agent {

struct TaskLaunch {
  std::string key;                         // e.g. "42.1" (task id . attempt)
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // the task's whole environment
  std::string working_dir;                 // "" = the task's own scratch directory
  std::string meta_json;                   // opaque, returned by Recover()
};

struct TaskExit {
  int exit_code = -1;  // -1 when killed by a signal or never started
  int signal = 0;
  std::string message;  // set when the command could not be started
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
  virtual std::string LogPath(const std::string& key) const = 0;
  // Where the task appends its metrics, one JSON object per line; the task
  // finds this path in RINGMASTER_METRICS_FILE.
  virtual std::string MetricsPath(const std::string& key) const = 0;
  // Tasks left by an earlier run of the agent (running or ended), with their meta_json.
  virtual std::map<std::string, std::string> Recover() = 0;
  // Forgets an ended task and deletes what it left on disk.
  virtual void Release(const std::string& key) = 0;
};

}  // namespace ringmaster::agent
