#include "server/control/state_machine.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/control/snapshot.h"
#include "protocol/job_roles.h"
#include "server/job_service.h"

namespace ringmaster::server {

using protocol::JobSpec;
using protocol::JobSpecFromJson;
using protocol::RankEnd;

using store::Desired;
using store::IsTerminal;
using store::Job;
using store::State;
using store::StateName;
using store::Task;

Task PendingTask(const JobSpec& spec, const std::string& reason, int64_t now) {
  Task t;
  t.state = State::kPending;
  t.reason = reason;
  t.cpu_milli = spec.cpu_milli;
  t.memory_bytes = spec.memory_bytes;
  t.gpus = spec.gpus;
  t.created_ms = now;
  return t;
}

Status JobService::SetJobState(Job& job, State to, const std::string& reason) {
  const int64_t now = clock_->NowMs();
  store::Event ev{0, job.id, 0, -1, now, StateName(job.state), StateName(to), reason};
  job.state = to;
  job.reason = reason;
  job.updated_ms = now;
  if (to == State::kRunning && job.started_ms == 0) job.started_ms = now;
  if (IsTerminal(to)) {
    job.finished_ms = now;
    specs_.erase(job.id);
  }
  if (to != State::kPending) not_before_steady_.erase(job.id);
  RM_RETURN_IF_ERROR(store_->UpdateJob(job));
  RM_RETURN_IF_ERROR(store_->AddEvent(ev));
  if (IsTerminal(to) && options_.on_job_ended) options_.on_job_ended(job.id);
  return Status::Ok();
}

StatusOr<std::shared_ptr<const JobSpec>> JobService::SpecLocked(const Job& job) {
  auto it = specs_.find(job.id);
  if (it != specs_.end()) return it->second;
  RM_ASSIGN_OR_RETURN(JobSpec spec, JobSpecFromJson(job.spec_json));
  auto shared = std::make_shared<const JobSpec>(std::move(spec));
  specs_[job.id] = shared;
  return shared;
}

Status JobService::FailUnreadableLocked(Job& job, const Status& why) {
  spdlog::error("job {}: {}", job.id, why.ToString());
  if (job.stop_state == State::kFailed || job.stop_state == State::kSucceeded) return Status::Ok();
  return store_->InTransaction([&]() -> Status {
    job.stop_state = State::kFailed;
    job.stop_reason = "its stored spec cannot be read: " + why.message();
    RM_RETURN_IF_ERROR(store_->UpdateJob(job));
    return SettleJobLocked(job.id);
  });
}

Status JobService::SetTaskState(Task& task, State to, const std::string& reason) {
  const int64_t now = clock_->NowMs();
  store::Event ev{0, task.job_id, task.id, task.rank, now, StateName(task.state), StateName(to), reason};
  task.state = to;
  task.reason = reason;
  if (to == State::kRunning) {
    task.started_ms = now;
    running_since_steady_[task.id] = clock_->SteadyMs();
  } else {
    running_since_steady_.erase(task.id);
  }
  if (IsTerminal(to)) task.finished_ms = now;
  RM_RETURN_IF_ERROR(store_->UpdateTask(task));
  return store_->AddEvent(ev);
}

Status JobService::SettleJobLocked(int64_t job_id) {
  RM_ASSIGN_OR_RETURN(Job job, store_->GetJob(job_id));
  if (IsTerminal(job.state)) return Status::Ok();
  RM_ASSIGN_OR_RETURN(auto tasks, store_->ListTasks(job_id));

  // A failed task stops the whole gang (and restarts it if restarts are left).
  if (!job.stop_state) {
    for (const Task& t : tasks) {
      if (t.state != State::kFailed && t.state != State::kLost) continue;
      std::string what = fmt::format("rank {} {}: {}", t.rank, t.state == State::kLost ? "lost" : "failed", t.reason);
      if (job.restarts < job.max_restarts) {
        job.stop_state = State::kPending;
        job.stop_reason = fmt::format("restart {} of {} after {}", job.restarts + 1, job.max_restarts, what);
      } else {
        job.stop_state = State::kFailed;
        job.stop_reason = what;
      }
      RM_RETURN_IF_ERROR(store_->UpdateJob(job));
      break;
    }
  }
  // A job with roles is done when its deciding role is (the chief, else the
  // workers): its ps, servers, scheduler or evaluator serve until stopped.
  if (auto spec = SpecLocked(job); !job.stop_state && spec.ok() && !(*spec)->roles.empty()) {
    std::vector<RankEnd> ends;
    for (const Task& t : tasks) ends.push_back({t.rank, IsTerminal(t.state), t.state == State::kSucceeded});
    if (std::string why = protocol::RolesDone((*spec)->roles, ends); !why.empty()) {
      job.stop_state = State::kSucceeded;
      job.stop_reason = why;
      RM_RETURN_IF_ERROR(store_->UpdateJob(job));
    }
  }
  if (job.stop_state) {
    for (Task& t : tasks) {
      if (!IsTerminal(t.state) && t.desired != Desired::kStop) {
        if (t.state == State::kPending) {
          RM_RETURN_IF_ERROR(SetTaskState(t, State::kCancelled, job.stop_reason));
          continue;
        }
        t.desired = Desired::kStop;
        RM_RETURN_IF_ERROR(store_->UpdateTask(t));
        BumpNodeLocked(t.node_id);
      }
    }
  }

  bool all_ended = std::all_of(tasks.begin(), tasks.end(), [](const Task& t) { return IsTerminal(t.state); });
  if (!all_ended) return Status::Ok();

  // The run is over: bank the service it received (LAS orders by it).
  for (const Task& t : tasks) job.service_s += TaskService(t, t.finished_ms);
  if (!job.stop_state) {
    last_resize_ms_.erase(job.id);
    return SetJobState(job, State::kSucceeded, fmt::format("all {} tasks succeeded", tasks.size()));
  }
  State final_state = *job.stop_state;
  std::string reason = job.stop_reason;
  job.stop_state.reset();
  job.stop_reason.clear();
  if (final_state == State::kSucceeded) {
    last_resize_ms_.erase(job.id);
    return SetJobState(job, final_state, fmt::format("{}; the other roles were stopped", reason));
  }
  if (final_state != State::kPending) {
    last_resize_ms_.erase(job.id);
    return SetJobState(job, final_state, reason);
  }

  if (job.resize_to > 0) {
    // An elastic resize: the gang restarts at its new size at once (no backoff,
    // not a restart), and resumes from its checkpoint.
    RM_ASSIGN_OR_RETURN(auto spec, SpecLocked(job));
    RM_RETURN_IF_ERROR(store_->ResizeTasks(job.id, job.resize_to, PendingTask(*spec, reason, clock_->NowMs())));
    job.replicas = job.resize_to;
    job.resize_to = 0;
    RM_ASSIGN_OR_RETURN(tasks, store_->ListTasks(job.id));
  } else {
    // Restart the gang after an exponential backoff (a crash loop does not hammer the cluster).
    const int64_t backoff = std::min(options_.max_restart_backoff_ms,
                                     options_.restart_backoff_ms << std::min(job.restarts, 20));
    job.not_before_ms = clock_->NowMs() + backoff;  // shown, and used after a server restart
    not_before_steady_[job.id] = clock_->SteadyMs() + backoff;
    reason += fmt::format("; next attempt in {}", FormatDuration(backoff));
    job.restarts++;
  }
  // Every task goes back to PENDING for a new attempt.
  for (Task& t : tasks) {
    t.node_id = 0;
    t.port = 0;
    t.gpu_indices.clear();
    t.overlay_ip.clear();
    t.desired = Desired::kRun;
    t.exit_code.reset();
    t.started_ms = t.finished_ms = 0;  // this run's times are banked; the next run sets its own
    if (t.state == State::kPending) {
      RM_RETURN_IF_ERROR(store_->UpdateTask(t));  // a rank a resize just added
    } else {
      RM_RETURN_IF_ERROR(SetTaskState(t, State::kPending, reason));
    }
  }
  return SetJobState(job, State::kPending, reason);
}

Status JobService::ResizeLocked(Job& job, int replicas, const std::string& why) {
  job.resize_to = replicas;
  job.stop_state = State::kPending;
  job.stop_reason = why;
  RM_RETURN_IF_ERROR(store_->UpdateJob(job));
  last_resize_ms_[job.id] = clock_->NowMs();
  resized_this_pass_.insert(job.id);
  spdlog::info("job {}: {}", job.id, why);
  return SettleJobLocked(job.id);
}

bool JobService::BackoffOver(const Job& job, int64_t now) {
  // Kept until the job leaves PENDING (SetJobState): a pass that does not
  // place it must not fall back to the wall clock.
  auto it = not_before_steady_.find(job.id);
  if (it != not_before_steady_.end()) return clock_->SteadyMs() >= it->second;
  // Set before this server started: the wall clock's time, but never a wait
  // longer than the longest backoff (the clock was set back meanwhile).
  return job.not_before_ms <= now || job.not_before_ms - now > options_.max_restart_backoff_ms;
}

}  // namespace ringmaster::server
