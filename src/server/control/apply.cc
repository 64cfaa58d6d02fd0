// The plan applier: each placement of a plan becomes one store transaction
// (its tasks SCHEDULED on their nodes with the ports, GPU indices and overlay
// addresses the scheduler chose, the job SCHEDULED), and its nodes' agents are woken.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "net/ipv4.h"
#include "scheduler/pools.h"
#include "server/control/pass.h"
#include "server/job_service.h"

namespace ringmaster::server {

using store::Desired;
using store::Job;
using store::State;
using store::Task;

Status JobService::ApplyPlanLocked(const scheduler::Plan& plan, PassInput& in) {
  std::map<int64_t, scheduler::NodeState*> snapshot;  // grows with this pass's placements (the autoscaler reads it)
  for (auto& n : in.snap.nodes) snapshot[n.id] = &n;
  std::map<int64_t, const scheduler::JobRequest*> request;
  for (const auto& r : in.queue) request[r.job_id] = &r;
  for (const auto& p : plan.placements) {
    Job& job = *in.by_id[p.job_id];
    std::vector<std::pair<int64_t, int64_t>> placed;  // (node, task)
    RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
      RM_ASSIGN_OR_RETURN(auto tasks, store_->ListTasks(job.id));
      std::set<int64_t> touched;
      std::string where;
      for (size_t i = 0; i < tasks.size() && i < p.node_ids.size(); ++i) {
        Task& t = tasks[i];
        const scheduler::ReplicaSlot slot = i < p.slots.size() ? p.slots[i] : scheduler::ReplicaSlot{};
        t.node_id = p.node_ids[i];
        t.attempt += 1;
        t.desired = Desired::kRun;
        t.port = slot.port;
        t.gpu_indices = fmt::format("{}", fmt::join(slot.gpus, ","));
        t.overlay_ip = slot.address != 0 ? net::FormatIpv4(slot.address) : "";
        RM_RETURN_IF_ERROR(SetTaskState(t, State::kScheduled, "placed on " + in.node_names[t.node_id]));
        touched.insert(t.node_id);
        placed.emplace_back(t.node_id, t.id);
      }
      for (int64_t n : touched) {
        where += (where.empty() ? "" : ", ") + in.node_names[n];
        BumpNodeLocked(n);
      }
      return SetJobState(job, State::kScheduled,
                         "placed on " + where + (p.borrowing ? " (borrowing idle quota: preemptible)" : ""));
    }));
    spdlog::info("job {} scheduled", job.id);
    {
      // Its agent may report on these from now on, not only after the next pass.
      std::lock_guard<std::mutex> sl(stats_mu_);
      ++stats_.placements;
      for (const auto& [node_id, task_id] : placed) tasks_on_[node_id].insert(task_id);
    }
    const scheduler::Resources& per_task = request[job.id]->per_task;
    for (size_t i = 0; i < p.node_ids.size(); ++i) {
      auto it = snapshot.find(p.node_ids[i]);
      if (it == snapshot.end()) continue;
      scheduler::NodeState& n = *it->second;
      n.allocated.cpu_milli += per_task.cpu_milli;
      n.allocated.memory_bytes += per_task.memory_bytes;
      n.allocated.gpus += per_task.gpus;
      if (i < p.slots.size()) scheduler::HoldSlot(n, p.slots[i]);
    }
  }
  return Status::Ok();
}

}  // namespace ringmaster::server
