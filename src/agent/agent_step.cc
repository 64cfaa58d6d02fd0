// What a one-task agent needs beyond an agent's ordinary life (split from
// agent.cc): a Slurm step's wrapper (cli/slurm_step.h) watches what the agent
// holds to know when its task is over and abandons the task when Slurm ends
// the step.
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
  // Stops what has started; one still staging never starts (stop_sent).
  const auto stop_all = [this, grace] {
    std::vector<std::string> keys;
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [ref, t] : tasks_) {
      t.stop_sent = true;
      if (t.launched) keys.push_back(ref.Key());
    }
    // Idempotent: the first call's SIGKILL deadline holds.
    for (const std::string& key : keys) (void)executor_->Stop(key, grace);
    return keys;
  };
  (void)stop_all();  // the tasks' grace runs while the threads are joined
  Stop();
  // A task whose start was under way when Stop came is launched by now.
  const std::vector<std::string> keys = stop_all();
  // The tasks are real processes: their ends are waited for in real time.
  const auto until = std::chrono::steady_clock::now() + grace + std::chrono::seconds(5);
  std::set<std::string> ended;
  while (ended.size() < keys.size()) {
    for (const std::string& key : keys) {
      if (!ended.count(key) && executor_->Poll(key)) ended.insert(key);  // Poll sends the SIGKILL when due
    }
    if (ended.size() < keys.size() && std::chrono::steady_clock::now() > until) {
      spdlog::error("agent: {} of {} tasks did not end after SIGKILL", keys.size() - ended.size(), keys.size());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (const std::string& key : ended) {
    spdlog::info("agent: task {} stopped; its end is left unreported", key);
    executor_->Release(key);
  }
}

}  // namespace ringmaster::agent
