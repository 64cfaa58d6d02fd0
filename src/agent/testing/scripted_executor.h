// ScriptedExecutor: an Executor whose tasks start at once and end as told (Poll
// says `exit_` of every task), for the agent's tests. Remembers what it was
// asked to start and stop. Thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/executor/executor.h"

namespace ringmaster::agent {

class ScriptedExecutor final : public Executor {
 public:
  Status Start(const TaskLaunch& launch) override {
    std::lock_guard<std::mutex> l(mu_);
    launches_.push_back(launch);
    cv_.notify_all();
    return Status::Ok();
  }
  Status Stop(const std::string& key, std::chrono::milliseconds) override {
    std::lock_guard<std::mutex> l(mu_);
    stopped_.push_back(key);
    return Status::Ok();
  }
  std::optional<TaskExit> Poll(const std::string& key) override {
    std::lock_guard<std::mutex> l(mu_);
    if (!exit_ && exit_on_stop_ && std::find(stopped_.begin(), stopped_.end(), key) != stopped_.end()) {
      return TaskExit{-1, 15, "stopped"};
    }
    return exit_;
  }
  StatusOr<OutputChunk> ReadOutput(const std::string&, TaskOutput, int64_t, size_t) override {
    return NotFound("nothing");
  }
  std::map<std::string, std::string> Recover() override { return recovered_; }
  StatusOr<TaskSandbox> SandboxOf(const std::string&) override { return NotFound("no sandbox"); }
  void Release(const std::string&) override {}

  std::vector<TaskLaunch> launches() {
    std::lock_guard<std::mutex> l(mu_);
    return launches_;
  }
  std::vector<std::string> stopped() {
    std::lock_guard<std::mutex> l(mu_);
    return stopped_;
  }
  // Waits (a hang guard, not a pause: tasks start on their own threads) until `key` has started.
  bool WaitStarted(const std::string& key, std::chrono::milliseconds guard = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, guard, [&] {
      for (const auto& launch : launches_) {
        if (launch.key == key) return true;
      }
      return false;
    });
  }
  void set_exit(std::optional<TaskExit> exit) {
    std::lock_guard<std::mutex> l(mu_);
    exit_ = std::move(exit);
  }
  // Tasks run until stopped, then end by SIGTERM (with set_exit(nullopt)).
  void set_exit_on_stop(bool on) {
    std::lock_guard<std::mutex> l(mu_);
    exit_on_stop_ = on;
  }

  std::map<std::string, std::string> recovered_;  // what an earlier agent left running (set before Start)

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<TaskExit> exit_ = TaskExit{0, 0, ""};  // GUARDED_BY(mu_): what Poll says of every task
  bool exit_on_stop_ = false;                           // GUARDED_BY(mu_)
  std::vector<TaskLaunch> launches_;                    // GUARDED_BY(mu_)
  std::vector<std::string> stopped_;                    // GUARDED_BY(mu_)
};

}  // namespace ringmaster::agent
