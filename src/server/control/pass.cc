#include "server/control/pass.h"

#include <algorithm>

#include <fmt/format.h>

#include "server/control/snapshot.h"
#include "server/job_service.h"

namespace ringmaster::server {

using protocol::JobSpec;

using store::IsTerminal;
using store::Job;
using store::State;
using store::StateName;
using store::Task;

Status JobService::RunPass() {
  std::lock_guard<std::mutex> l(mu_);
  struct PassTimer {
    monitor::Histogram& h;
    Clock* clock;
    int64_t start;
    ~PassTimer() { h.Observe(static_cast<double>(clock->SteadyMs() - start) / 1000.0); }
  } timer{pass_seconds_, clock_, clock_->SteadyMs()};
  resized_this_pass_.clear();
  PassInput in;
  RM_RETURN_IF_ERROR(ReadPassLocked(in));
  if (options_.backend == "slurm") {
    // Slurm places and starts the gangs; preemption and elastic resizing are
    // the agents' (docs/slurm.md).
    scheduler::Plan plan = AdmitExternalLocked(in);
    RM_RETURN_IF_ERROR(HandOverLocked(plan, in));
    return RecordPassLocked(plan, in);
  }
  scheduler::Plan plan;
  if (!in.queue.empty()) plan = scheduler_->Schedule(in.snap, in.queue);
  RM_RETURN_IF_ERROR(ApplyPlanLocked(plan, in));
  std::vector<scheduler::JobRequest> waiting;
  for (const auto& r : in.queue) {
    if (plan.pending_reasons.count(r.job_id)) waiting.push_back(r);
  }
  std::set<int64_t> made_room;
  RM_RETURN_IF_ERROR(AutoscaleMeasuredLocked(in.snap.nodes, in.active, in.placed, !waiting.empty()));
  RM_RETURN_IF_ERROR(
      AutoscaleLocked(std::move(in.snap.nodes), in.active, waiting, &plan.pending_reasons, &made_room));
  RM_RETURN_IF_ERROR(WatchUsageLocked(in.active, in.placed, in.now_ms));
  RM_RETURN_IF_ERROR(PreemptLocked(plan, made_room, in.now_ms));
  return RecordPassLocked(plan, in);
}

Status JobService::ReadPassLocked(PassInput& in) {
  RM_ASSIGN_OR_RETURN(in.nodes, store_->ListNodes());
  for (auto& n : in.nodes) ApplyLive(&n);
  {
    RM_ASSIGN_OR_RETURN(auto placed, store_->ListPlacedTasks());
    RM_RETURN_IF_ERROR(ExpireLeasesLocked(in.nodes, placed));
    RM_RETURN_IF_ERROR(DrainLocked(in.nodes, placed));
  }
  RM_ASSIGN_OR_RETURN(in.placed, store_->ListPlacedTasks());
  RM_ASSIGN_OR_RETURN(in.active, store_->ListActiveJobs());
  RM_ASSIGN_OR_RETURN(auto users, store_->ListUsers());
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    tasks_on_.clear();
    for (const Task& t : in.placed) tasks_on_[t.node_id].insert(t.id);
  }
  std::map<int64_t, std::string> user_names;
  for (const auto& u : users) user_names[u.id] = u.name;
  const int64_t now = in.now_ms = clock_->NowMs();

  in.snap.now_ms = now;
  std::vector<NodeLive> live;
  for (const auto& n : in.nodes) {
    NodeLive l{NodeReady(n), n.cordoned ? CordonText(n) : "", std::nullopt, std::nullopt};
    if (monitor::Monitor* m = options_.monitor) {
      const int64_t since = now - options_.load_window_ms;
      l.cpu_util = m->NodeCpuUtil(n.id, since);
      l.gpu_util = m->NodeGpuUtil(n.id, since);
    }
    live.push_back(std::move(l));
    in.node_names[n.id] = n.name;
  }
  in.snap.nodes = BuildNodeStates(in.nodes, live, in.placed, {options_.overlay_subnet, options_.overlay_block_prefix});

  // Running gangs: what preemption may choose from, what quotas count, how
  // much service each job has had (LAS), and time limits.
  std::map<int64_t, std::vector<const Task*>> gang_tasks;
  for (const Task& t : in.placed) gang_tasks[t.job_id].push_back(&t);
  const bool anyone_waiting = std::any_of(in.active.begin(), in.active.end(), [](const Job& j) {
    return j.state == State::kPending && !j.stop_state;
  });
  for (Job& j : in.active) {
    auto g = gang_tasks.find(j.id);
    if (g == gang_tasks.end()) continue;
    auto spec_or = SpecLocked(j);
    if (!spec_or.ok()) {
      RM_RETURN_IF_ERROR(FailUnreadableLocked(j, spec_or.status()));
      continue;
    }
    const JobSpec& spec = **spec_or;
    RunningSnapshot rs = BuildRunningJob(RequestFor(j, spec, user_names[j.user_id]), g->second, now,
                                         clock_->SteadyMs(), running_since_steady_);
    scheduler::RunningJob& rj = rs.job;
    // Only preemption reads checkpoint times: no directory listings while nothing waits.
    const int64_t ckpt = anyone_waiting ? LastCheckpointMs(j) : 0;
    rj.last_checkpoint_ms = ckpt > rj.started_ms ? ckpt : 0;
    rj.stopping = j.stop_state.has_value();
    if (rs.all_running && !rj.stopping && spec.time_limit_ms > 0 && rs.ran_ms > spec.time_limit_ms) {
      j.stop_state = State::kFailed;
      j.stop_reason = fmt::format("time limit {} reached", FormatDuration(spec.time_limit_ms));
      RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
        RM_RETURN_IF_ERROR(store_->UpdateJob(j));
        return SettleJobLocked(j.id);
      }));
      rj.stopping = true;
    }
    in.snap.running.push_back(std::move(rj));
  }

  for (const Job& j : in.active) {
    if (j.state == State::kPending && !j.stop_state && BackoffOver(j, now)) in.pending.push_back(j);
  }
  for (Job& j : in.pending) {
    auto spec = SpecLocked(j);
    if (!spec.ok()) {
      RM_RETURN_IF_ERROR(FailUnreadableLocked(j, spec.status()));
      continue;
    }
    in.queue.push_back(RequestFor(j, **spec, user_names[j.user_id]));
    in.by_id[j.id] = &j;
  }
  return Status::Ok();
}

int64_t JobService::LastCheckpointMs(const Job& job) const {
  // The checkpoint a restart would resume from is the one `latest` names,
  // and `latest` is uploaded after its checkpoint's files. Kept in memory:
  // no store call under the service's lock.
  std::lock_guard<std::mutex> l(checkpoint_mu_);
  auto it = checkpoint_ms_.find(job.id);
  return it == checkpoint_ms_.end() ? 0 : it->second;
}

Status JobService::PreemptLocked(const scheduler::Plan& plan, const std::set<int64_t>& made_room, int64_t now) {
  // Preempted jobs checkpoint (SIGTERM, then stop_grace_ms) and go back to
  // the queue at once, not counted as restarts; the job they made room for
  // starts when they have stopped.
  // Where an elastic job shrinks for a waiting job, that is enough: no preemption.
  for (const auto& victim : plan.preemptions) {
    if (made_room.count(victim.for_job)) continue;
    RM_ASSIGN_OR_RETURN(Job vj, store_->GetJob(victim.job_id));
    if (vj.stop_state || IsTerminal(vj.state)) continue;
    RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
      RM_RETURN_IF_ERROR(store_->AddEvent({0, vj.id, 0, -1, now, StateName(vj.state), StateName(vj.state),
                                           victim.reason}));
      return ResizeLocked(vj, vj.replicas, victim.reason);
    }));
    std::lock_guard<std::mutex> sl(stats_mu_);
    ++stats_.preemptions;
  }
  return Status::Ok();
}

Status JobService::RecordPassLocked(const scheduler::Plan& plan, PassInput& in) {
  // Built once per pass, read by every list of jobs: positions among the jobs still pending.
  auto positions = std::make_shared<std::map<int64_t, int>>();
  for (int64_t id : plan.queue_order) {
    if (plan.pending_reasons.count(id)) positions->emplace(id, static_cast<int>(positions->size()) + 1);
  }
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    queue_positions_ = std::move(positions);
    ++stats_.passes;
    stats_.queue_length = static_cast<int64_t>(in.queue.size());
    stats_.pending_by_reason.clear();
    for (const auto& [job_id, reason] : plan.pending_reasons) ++stats_.pending_by_reason[PendingReasonKind(reason)];
  }
  for (const auto& [job_id, reason] : plan.pending_reasons) {
    Job& job = *in.by_id[job_id];
    if (job.reason == reason) continue;
    job.reason = reason;
    job.updated_ms = clock_->NowMs();
    RM_RETURN_IF_ERROR(store_->UpdateJob(job));
  }
  return Status::Ok();
}

}  // namespace ringmaster::server
