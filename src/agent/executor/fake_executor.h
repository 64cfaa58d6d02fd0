// FakeExecutor: the Executor contract in memory, for tests of what drives an
// executor (the agent). Tasks run until the test ends them (Finish) or a
// Stop does: SIGTERM ends a task at once unless the test made it ignore
// SIGTERM, then SIGKILL at the first Poll after the grace. Output is what the
// test appends. Its state outlives the object through a shared Node, so a
// new FakeExecutor over the same Node recovers the tasks as an agent restart
// would. Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/executor/executor.h"

namespace ringmaster::agent {

struct FakeExecutorOptions {
  // Where sandboxes are made (<dir>/<key>, with work/ inside, passed to
  // TaskLaunch::prepare); "" = none: prepare is not called and SandboxOf is NotFound.
  std::string sandbox_dir;
  std::vector<std::string> runtimes = {"process"};
  // Every task ends with this as soon as it starts (and each recovered
  // one at once); nullopt = tasks run until Finish or Stop.
  std::optional<TaskExit> exit_at_start;
  std::function<std::chrono::steady_clock::time_point()> now = [] { return std::chrono::steady_clock::now(); };
};

class FakeExecutor final : public Executor {
 public:
  // What survives a restart of the executor: the tasks and their files.
  struct Node;
  struct Task;

  explicit FakeExecutor(FakeExecutorOptions options = {}, std::shared_ptr<Node> node = nullptr);
  ~FakeExecutor() override;

  Status Start(const TaskLaunch& launch) override;
  Status Stop(const std::string& key, std::chrono::milliseconds grace) override;
  std::optional<TaskExit> Poll(const std::string& key) override;
  StatusOr<OutputChunk> ReadOutput(const std::string& key, TaskOutput what, int64_t offset,
                                   size_t max_bytes) override;
  StatusOr<TaskSandbox> SandboxOf(const std::string& key) override;
  std::map<std::string, std::string> Recover() override;
  void Release(const std::string& key) override;
  int ExitFd(const std::string& key) override;
  std::vector<std::string> Runtimes() const override { return options_.runtimes; }
  std::optional<LiveUsage> Usage(const std::string& key) override;

  // ---- what a test does to the tasks
  // The state to hand to the next FakeExecutor (an agent restart).
  std::shared_ptr<Node> node() const { return node_; }
  // A task an earlier agent left (running, or ended when `exit` is set).
  void AddLeftover(const std::string& key, const std::string& meta_json, std::optional<TaskExit> exit = std::nullopt);
  // Ends a running task (no-op once it ended).
  void Finish(const std::string& key, TaskExit exit);
  // Appends to what the task wrote.
  void Write(const std::string& key, TaskOutput what, const std::string& data);
  // The task ignores SIGTERM: a Stop ends it only once its grace has passed.
  void IgnoreTerm(const std::string& key);
  // Changes FakeExecutorOptions::exit_at_start for the starts and recoveries to come.
  void SetExitAtStart(std::optional<TaskExit> exit);
  // The next Start fails with `status` (the task is not started).
  void FailNextStart(Status status);
  void SetUsage(const std::string& key, LiveUsage usage);

  // ---- what a test reads back
  std::vector<TaskLaunch> launches() const;       // every Start that succeeded, in order
  std::vector<std::string> stopped() const;       // the key of every Stop, in order
  std::vector<std::string> released() const;      // the key of every Release, in order
  bool Running(const std::string& key) const;

 private:
  FakeExecutorOptions options_;  // exit_at_start GUARDED_BY(node_->mu)
  std::shared_ptr<Node> node_;
};

}  // namespace ringmaster::agent
