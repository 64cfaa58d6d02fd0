// Notebooks on this node: the lab tunnel's listener (agent/lab_tunnel.h) and
// which task's notebook a ticket may reach.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/agent.h"

namespace ringmaster::agent {

void Agent::StartLabTunnel() {
  if (options_.tunnel_port < 0) return;
  auto tunnel = std::make_unique<LabTunnel>(
      [this](int64_t task_id, int64_t attempt) { return NotebookSocket(task_id, attempt); }, clock_);
  if (Status st = tunnel->Start(options_.tunnel_port); !st.ok()) {
    spdlog::error("agent: notebooks on this node cannot be reached: {}", st.ToString());
    return;
  }
  spdlog::info("agent: lab tunnels on port {}", tunnel->port());
  lab_tunnel_ = std::move(tunnel);
}

// Only a running attempt this agent holds: a ticket for an ended or an older
// attempt reaches nothing. The socket is the one the notebook's command makes
// (server/lab_proxy.h's NotebookCommand) in the task's own work directory,
// opened as OpenNotebookSocket says: only the task's own.
StatusOr<UniqueFd> Agent::NotebookSocket(int64_t task_id, int64_t attempt) {
  const TaskRef ref{task_id, static_cast<int>(attempt)};
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = tasks_.find(ref);
    if (it == tasks_.end() || !it->second.launched || it->second.exit || it->second.stop_sent) {
      return NotFound(fmt::format("task {} attempt {} is not running on this node", task_id, attempt));
    }
  }
  RM_ASSIGN_OR_RETURN(TaskSandbox sandbox, executor_->SandboxOf(ref.Key()));
  return OpenNotebookSocket(sandbox.dir, sandbox.uid);
}

}  // namespace ringmaster::agent
