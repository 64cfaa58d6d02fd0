// Leases and drains (JobService's, under its lock, at the start of a pass):
// the tasks of a node silent past its fencing window and a lease more are
// LOST and their gangs settle; the jobs on a draining node move away.
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

Status JobService::ExpireLeasesLocked(const std::vector<store::Node>& nodes, const std::vector<Task>& placed) {
  for (const store::Node& n : nodes) {
    // Its agent has stopped its tasks by now (it fences at its window without
    // the server, a lease earlier): they can run elsewhere.
    const int64_t silent = SilentMs(n.id);
    if (silent <= LostAfterMs(n)) continue;
    for (Task t : placed) {
      if (t.node_id != n.id) continue;
      RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
        RM_RETURN_IF_ERROR(SetTaskState(t, State::kLost, fmt::format("node {} lost: no heartbeat for {}", n.name,
                                                                     FormatDuration(silent))));
        return SettleJobLocked(t.job_id);
      }));
      spdlog::warn("task {} (job {} rank {}) lost with node {}", t.id, t.job_id, t.rank, n.name);
    }
  }
  return Status::Ok();
}

Status JobService::DrainLocked(const std::vector<store::Node>& nodes, const std::vector<Task>& placed) {
  std::map<int64_t, const store::Node*> draining;
  for (const store::Node& n : nodes) {
    if (n.cordoned && n.draining) draining[n.id] = &n;
  }
  if (draining.empty()) return Status::Ok();
  // Each job with tasks there, with how many and where.
  std::map<int64_t, std::pair<int, std::string>> jobs;
  for (const Task& t : placed) {
    auto it = draining.find(t.node_id);
    if (it == draining.end()) continue;
    auto& [count, where] = jobs[t.job_id];
    ++count;
    if (where.find(it->second->name) == std::string::npos) where += (where.empty() ? "" : ", ") + it->second->name;
  }
  const int64_t now = clock_->NowMs();
  for (const auto& [job_id, off] : jobs) {
    const auto& [count, where] = off;
    RM_ASSIGN_OR_RETURN(Job job, store_->GetJob(job_id));
    if (job.stop_state || store::IsTerminal(job.state)) continue;  // leaving already
    auto spec = SpecLocked(job);
    if (!spec.ok()) {
      RM_RETURN_IF_ERROR(FailUnreadableLocked(job, spec.status()));
      continue;
    }
    // An elastic job that can do without those workers gives them up; any
    // other stops whole and is placed again elsewhere (the node is cordoned),
    // resuming from its checkpoint.
    const bool shrink = (*spec)->elastic() && job.replicas - count >= (*spec)->min_replicas;
    const int to = shrink ? job.replicas - count : job.replicas;
    const std::string why =
        shrink ? fmt::format("scale down from {} to {} workers: node {} is draining", job.replicas, to, where)
               : fmt::format("moving off node {}, which is draining: checkpoint, stop and restart elsewhere", where);
    RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
      RM_RETURN_IF_ERROR(store_->AddEvent({0, job.id, 0, -1, now, StateName(job.state), StateName(job.state), why}));
      return ResizeLocked(job, to, why);
    }));
  }
  return Status::Ok();
}

}  // namespace ringmaster::server
