// Node lifecycle, an admin's (split from job_service.cc): cordon (no new
// work), drain (no new work, and what runs there moves away: elastic jobs
// shrink off the node, other jobs checkpoint and restart elsewhere, as a
// preemption does) and delete (forget a node that is gone; its tasks are
// LOST now instead of when its lease would run out).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "common/log.h"
#include "server/job_service.h"

namespace ringmaster::server {

using store::Job;
using store::State;
using store::StateName;
using store::Task;

std::string CordonText(const store::Node& n) {
  if (!n.cordoned) return "";
  return std::string(n.draining ? "draining" : "cordoned") + (n.cordon_reason.empty() ? "" : ": " + n.cordon_reason);
}

StatusOr<store::Node> JobService::FindNode(const std::string& name) {
  RM_ASSIGN_OR_RETURN(auto nodes, store_->ListNodes());
  for (const store::Node& n : nodes) {
    if (n.name == name) return n;
  }
  // A name that is all digits may be a node's id (as `nodes` lists them).
  if (!name.empty() && name.size() <= 18 && std::all_of(name.begin(), name.end(), ::isdigit)) {
    for (const store::Node& n : nodes) {
      if (n.id == std::stoll(name)) return n;
    }
  }
  return NotFound(fmt::format("node \"{}\" does not exist (ringmaster nodes lists them)", name.substr(0, 64)));
}

Status JobService::Cordon(const std::string& name, const std::string& reason, bool drain) {
  std::lock_guard<std::mutex> l(mu_);
  RM_ASSIGN_OR_RETURN(store::Node n, FindNode(name));
  // Draining a node keeps it cordoned; cordoning a draining one stops the drain.
  RM_RETURN_IF_ERROR(store_->SetNodeCordon(n.id, true, reason, drain));
  spdlog::info("node {} {}{}", n.name, drain ? "draining" : "cordoned", reason.empty() ? "" : ": " + reason);
  Wake();
  return Status::Ok();
}

Status JobService::Uncordon(const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  RM_ASSIGN_OR_RETURN(store::Node n, FindNode(name));
  RM_RETURN_IF_ERROR(store_->SetNodeCordon(n.id, false, "", false));
  spdlog::info("node {} uncordoned", n.name);
  Wake();
  return Status::Ok();
}

Status JobService::DeleteNode(const std::string& name, bool force) {
  std::lock_guard<std::mutex> l(mu_);
  RM_ASSIGN_OR_RETURN(store::Node n, FindNode(name));
  RM_ASSIGN_OR_RETURN(auto placed, store_->ListPlacedTasks());
  std::vector<Task> here;
  for (const Task& t : placed) {
    if (t.node_id == n.id) here.push_back(t);
  }
  // Even with force: its agent would register it again at once, without the
  // cordon or drain an admin gave it, and take new work.
  if (NodeReady(n)) {
    return FailedPrecondition(fmt::format(
        "node {} is still heard from{}: drain it (ringmaster nodes drain {}) and stop its agent before deleting it",
        n.name, here.empty() ? "" : fmt::format(" and holds {} tasks", here.size()), n.name));
  }
  // Silent, but its agent may still run what it holds (it fences only when
  // the window is out): restarting those elsewhere now could run a rank twice.
  const int64_t silent = SilentMs(n.id);
  if (!force && !here.empty() && silent <= LostAfterMs(n)) {
    return FailedPrecondition(fmt::format(
        "node {} holds {} tasks that its agent may still run (silent for {}; it stops them once silent for {}): "
        "wait until then, or delete it with --force if you know the host is down",
        n.name, here.size(), FormatDuration(silent), FormatDuration(LostAfterMs(n) - options_.node_timeout_ms)));
  }
  RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
    for (Task& t : here) {
      RM_RETURN_IF_ERROR(SetTaskState(t, State::kLost, fmt::format("node {} deleted by an admin", n.name)));
      RM_RETURN_IF_ERROR(SettleJobLocked(t.job_id));
    }
    return store_->DeleteNode(n.id);
  }));
  {
    std::lock_guard<std::mutex> ll(live_mu_);
    live_.erase(n.id);
  }
  spdlog::warn("node {} deleted ({} tasks lost with it)", n.name, here.size());
  BumpNodeLocked(n.id);  // its agent's long-poll answers now (404: it registers again, if it is there)
  Wake();
  return Status::Ok();
}

}  // namespace ringmaster::server
