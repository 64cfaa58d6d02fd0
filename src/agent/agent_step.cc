// What a one-task agent needs beyond an agent's ordinary life (split from
// agent.cc): a Slurm step's wrapper (cli/slurm_step.h) watches what the agent
// holds to know when its task is over and abandons the task when Slurm ends
// the step.
#include <algorithm>
#include <atomic>
#include <set>
#include <thread>


#include "agent/agent.h"
#include "common/log.h"

namespace ringmaster::agent {

Agent::Held Agent::Holding() {
  std::lock_guard<std::mutex> l(mu_);
  return Held{ever_assigned_, tasks_.size()};
}

void Agent::Abandon(std::chrono::milliseconds grace) {
  abandoned_ = true;
  // Slurm SIGKILLs the wrapper KillWait (30 s by default) after its SIGTERM:
  // everything here ends within grace + kAbandonSlack, joins included, so the
  // tasks are killed and released before that.
  const auto start = std::chrono::steady_clock::now();
  const auto kill_at = start + grace;
  const auto until = kill_at + kAbandonSlack;
  // Stops what has started and was not stopped yet, with what is left of
  // the grace; one still staging never starts (stop_sent). The launched keys.
  std::set<std::string> asked;
  const auto stop_all = [this, kill_at, &asked] {
    const auto left = std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                 kill_at - std::chrono::steady_clock::now()));
    std::vector<std::string> keys;
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [ref, t] : tasks_) {
      t.stop_sent = true;
      if (t.launched) keys.push_back(ref.Key());
    }
    for (const std::string& key : keys) {
      if (asked.insert(key).second) (void)executor_->Stop(key, left);
    }
    return keys;
  };
  (void)stop_all();
  // The threads are joined while the tasks' grace runs; a task whose start
  // was under way when Stop came is launched meanwhile and stopped below.
  std::atomic<bool> joined{false};
  std::thread stopper([this, &joined] {
    Stop();
    joined = true;
  });
  std::set<std::string> ended;
  std::vector<std::string> keys;
  for (;;) {
    const bool all_joined = joined;  // read before the keys: a launch before the join is among them
    keys = stop_all();
    for (const std::string& key : keys) {
      if (!ended.count(key) && executor_->Poll(key)) ended.insert(key);  // Poll sends the SIGKILL when due
    }
    if ((all_joined && ended.size() == keys.size()) || std::chrono::steady_clock::now() > until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (const std::string& key : keys) {
    if (ended.count(key)) {
      spdlog::info("agent: task {} stopped; its end is left unreported", key);
    } else {
      // Its cgroup's processes are killed with it: nothing of it outlives the wrapper.
      (void)executor_->Poll(key);  // the SIGKILL to its process group, past its deadline
      spdlog::error("agent: task {} did not end {} ms after SIGKILL; killing what is left of it", key,
                    kAbandonSlack.count());
    }
    executor_->Release(key);
  }
  stopper.join();  // a thread still busy now is one no cancellation reaches
}

}  // namespace ringmaster::agent
