#include "server/job_service.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/crypto.h"
#include "common/strings.h"
#include "common/thread_name.h"
#include "scheduler/scheduler.h"
#include "server/control/state_machine.h"
#include "server/privileges.h"
#include "server/timeline.h"

namespace ringmaster::server {

using store::Desired;
using store::IsTerminal;
using store::Job;
using store::State;
using store::StateName;
using store::Task;
using protocol::JobSpec;
using protocol::JobSpecFromJson;
using protocol::RankEnd;

namespace {

std::string ExitReason(const TaskReport& r) {
  if (!r.message.empty() && r.exit_code == -1 && r.signal == 0) return "could not start: " + r.message;
  // What the agent adds (e.g. outputs it could not upload) follows the exit.
  const std::string more = r.message.empty() ? "" : "; " + r.message;
  // Killed for its memory: that first, then how it ended.
  if (r.message.rfind("out of memory", 0) == 0) {
    const char* name = r.signal ? sigabbrev_np(r.signal) : nullptr;
    return r.signal ? fmt::format("{}: killed by signal {}{}", r.message, r.signal, name ? fmt::format(" (SIG{})", name) : "")
                    : fmt::format("{}: exit code {}", r.message, r.exit_code);
  }
  if (r.signal != 0) {
    const char* name = sigabbrev_np(r.signal);
    return fmt::format("killed by signal {}{}{}", r.signal, name ? fmt::format(" (SIG{})", name) : "", more);
  }
  return fmt::format("exit code {}{}", r.exit_code, more);
}

JobServiceOptions WithJobSecretKey(JobServiceOptions o) {
  if (o.job_secret_key.empty()) o.job_secret_key = RandomHex(32);
  return o;
}

}  // namespace

JobService::JobService(store::MetaStore* store, Clock* clock, JobServiceOptions options)
    : store_(store),
      clock_(clock),
      started_steady_ms_(clock->SteadyMs()),
      options_(WithJobSecretKey(options)),
      scheduler_(std::move(scheduler::Scheduler::Create(options.scheduler).value())),
      // Versions start from the clock so that an agent's index from before a
      // server restart never matches: it gets a fresh list at once.
      version_base_(static_cast<uint64_t>(clock->NowMs())) {}

JobService::~JobService() { Stop(); }

void JobService::Start() {
  LearnCheckpointTimes();
  loop_ = std::thread([this] {
    NameThisThread("server-sched");
    Loop();
  });
}

void JobService::LearnCheckpointTimes() {
  if (options_.files) {
    auto active = store_->ListActiveJobs();
    for (const Job& j : active.ok() ? *active : std::vector<Job>{}) {
      auto latest = options_.files->Head(fmt::format("jobs/{}/checkpoints/latest", j.id));
      if (latest.ok()) NoteCheckpoint(j.id, latest->mtime_ms);
    }
  }
}

void JobService::NoteCheckpoint(int64_t job_id, int64_t ms) {
  std::lock_guard<std::mutex> l(checkpoint_mu_);
  int64_t& at = checkpoint_ms_[job_id];
  at = std::max(at, ms);
}

void JobService::Stop() {
  {
    std::lock_guard<std::mutex> l(loop_mu_);
    stopping_ = true;
  }
  loop_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
  std::vector<std::function<void()>> fire;
  {
    std::lock_guard<std::mutex> l(watch_mu_);
    closed_ = true;
    for (auto& [id, w] : watches_) fire.push_back(std::move(w.fn));
    watches_.clear();
  }
  for (auto& fn : fire) fn();
}

void JobService::Wake() {
  {
    std::lock_guard<std::mutex> l(loop_mu_);
    wake_ = true;
  }
  loop_cv_.notify_all();
}

void JobService::Loop() {
  int64_t last_pass_ms = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> l(loop_mu_);
      loop_cv_.wait_for(l, options_.schedule_interval, [this] { return wake_ || stopping_; });
      if (stopping_) return;
      // Woken by a burst (every submit and report wakes it): rest as long as
      // the last pass took, so passes take at most half the time and what
      // they wait on (mu_, the store) is free the other half. A pass over a
      // few jobs takes a millisecond; one over 10,000 queued ones, tens.
      if (last_pass_ms > 0) {
        loop_cv_.wait_for(l, std::chrono::milliseconds(last_pass_ms), [this] { return stopping_; });
        if (stopping_) return;
      }
      wake_ = false;
    }
    const auto start = std::chrono::steady_clock::now();
    // Nothing may end this thread but Stop(): a failure is one pass's, logged.
    try {
      Status st = RunPass();
      if (!st.ok()) spdlog::error("scheduler: {}", st.ToString());
    } catch (const std::exception& e) {
      spdlog::error("scheduler: a pass threw: {}", e.what());
    }
    last_pass_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    last_pass_ms = std::min<int64_t>(last_pass_ms, 1000);
  }
}

void JobService::BumpNodeLocked(int64_t node_id) {
  std::vector<std::function<void()>> fire;
  {
    std::lock_guard<std::mutex> l(watch_mu_);
    auto [it, inserted] = node_versions_.try_emplace(node_id, version_base_);
    ++it->second;
    for (auto w = watches_.begin(); w != watches_.end();) {
      if (w->second.node_id != node_id) {
        ++w;
        continue;
      }
      fire.push_back(std::move(w->second.fn));
      w = watches_.erase(w);
    }
  }
  for (auto& fn : fire) fn();  // outside watch_mu_: a watcher may Unwatch
}

uint64_t JobService::NodeIndex(int64_t node_id) {
  std::lock_guard<std::mutex> l(watch_mu_);
  auto it = node_versions_.find(node_id);
  return it == node_versions_.end() ? version_base_ : it->second;
}

uint64_t JobService::WatchNode(int64_t node_id, uint64_t index, std::function<void()> fn) {
  std::lock_guard<std::mutex> l(watch_mu_);
  auto it = node_versions_.find(node_id);
  const uint64_t current = it == node_versions_.end() ? version_base_ : it->second;
  if (current != index || closed_) return 0;
  const uint64_t id = next_watch_++;
  watches_[id] = Watch{node_id, std::move(fn)};
  return id;
}

void JobService::Unwatch(uint64_t watch_id) {
  std::lock_guard<std::mutex> l(watch_mu_);
  watches_.erase(watch_id);
}






// Not under mu_: a submit is one insert (the store has its own lock), and
// waits for no scheduling pass. The pending limit may be passed by the few
// submits that race it.
StatusOr<int64_t> JobService::Submit(const store::User& user, const JobSpec& spec, const std::string& submit_key,
                                     bool* existed) {
  if (existed) *existed = false;
  RM_RETURN_IF_ERROR(CheckJobPrivileges(user, spec));
  if (options_.backend == "slurm") {
    // What Slurm's allocations cannot give (docs/slurm.md), refused rather than ignored.
    if (spec.notebook()) return InvalidArgument("kind: a notebook (dev) needs agents; this server runs jobs on Slurm");
    if (!spec.node_selector.empty()) {
      return InvalidArgument("node_selector: this server runs jobs on Slurm, which places them itself");
    }
  }
  // A retry (the answer to the first try was lost, or its server failed
  // over) finds the first try's job before any limit is counted.
  auto earlier = [&]() -> StatusOr<int64_t> {
    auto j = store_->GetJobBySubmitKey(user.id, submit_key);
    if (!j.ok()) return j.status();
    if (existed) *existed = true;
    return j->id;
  };
  if (!submit_key.empty()) {
    auto id = earlier();
    if (id.ok() || id.status().code() != StatusCode::kNotFound) return id;
  }
  if (options_.max_pending_jobs_per_user > 0) {
    RM_ASSIGN_OR_RETURN(int64_t pending, store_->CountJobs(user.id, State::kPending));
    if (pending >= options_.max_pending_jobs_per_user) {
      return ResourceExhausted(fmt::format(
          "user {} has {} pending jobs, the limit: wait for some to start, or cancel some (ringmaster cancel)",
          user.name, pending));
    }
  }
  const int64_t now = clock_->NowMs();
  Job job;
  job.user_id = user.id;
  job.name = spec.name;
  job.kind = spec.kind;
  job.state = State::kPending;
  job.reason = "waiting for the scheduler";
  job.spec_json = JobSpecToJson(spec).dump();
  job.priority = spec.priority;
  job.replicas = spec.replicas;
  job.max_restarts = spec.max_restarts;
  job.created_ms = job.updated_ms = now;
  job.submit_key = submit_key;
  const Task tmpl = PendingTask(spec, "waiting for the scheduler", now);
  int64_t id = 0;
  Status made = store_->InTransaction([&]() -> Status {
    RM_ASSIGN_OR_RETURN(id, store_->CreateJob(job, tmpl));
    return store_->AddEvent({0, id, 0, -1, now, "", "PENDING", "submitted by " + user.name});
  });
  // Two tries with one key at once: the second finds the first's job.
  if (made.code() == StatusCode::kAlreadyExists && !submit_key.empty()) return earlier();
  RM_RETURN_IF_ERROR(made);
  spdlog::info("job {} ({}) submitted by {}: {} x {}", id, spec.name, user.name, spec.replicas, spec.kind);
  Wake();
  return id;
}

Status JobService::Cancel(int64_t job_id, const std::string& by) {
  std::lock_guard<std::mutex> l(mu_);
  RM_ASSIGN_OR_RETURN(Job job, store_->GetJob(job_id));
  if (IsTerminal(job.state)) {
    return FailedPrecondition(fmt::format("job {} already ended: {}", job_id, StateName(job.state)));
  }
  // Already stopping for good: cancelled, or its chief (workers) succeeded and
  // the serving roles are on their way out; the job ends as it was going to.
  if (job.stop_state == State::kCancelled || job.stop_state == State::kSucceeded) return Status::Ok();
  RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
    job.stop_state = State::kCancelled;
    job.stop_reason = "cancelled by " + by;
    job.updated_ms = clock_->NowMs();
    RM_RETURN_IF_ERROR(store_->UpdateJob(job));
    RM_ASSIGN_OR_RETURN(auto tasks, store_->ListTasks(job_id));
    for (Task& t : tasks) {
      if (t.state == State::kPending) {
        RM_RETURN_IF_ERROR(SetTaskState(t, State::kCancelled, job.stop_reason));
      } else if (!IsTerminal(t.state) && t.desired != Desired::kStop) {
        t.desired = Desired::kStop;
        RM_RETURN_IF_ERROR(store_->UpdateTask(t));
        BumpNodeLocked(t.node_id);
      }
    }
    return SettleJobLocked(job_id);
  }));
  if (options_.on_external_work) options_.on_external_work();
  Wake();
  return Status::Ok();
}

Status JobService::ReportTask(int64_t task_id, const TaskReport& r) {
  std::lock_guard<std::mutex> l(mu_);
  Status st = ReportTaskLocked(task_id, r);
  Wake();
  return st;
}

std::vector<Status> JobService::ReportTasks(const std::vector<std::pair<int64_t, TaskReport>>& reports) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<Status> out;
  // One transaction, so one commit (and one log sync) for the whole tick. A
  // report refused on its own (another attempt's, an unknown task) is that
  // report's answer; any other failure is the store's, and undoes them all.
  Status st = store_->InTransaction([&]() -> Status {
    out.clear();
    for (const auto& [task_id, r] : reports) {
      Status one = ReportTaskLocked(task_id, r);
      const StatusCode code = one.code();
      if (!one.ok() && code != StatusCode::kFailedPrecondition && code != StatusCode::kNotFound &&
          code != StatusCode::kInvalidArgument) {
        return one;
      }
      out.push_back(std::move(one));
    }
    return Status::Ok();
  });
  if (!st.ok()) out.assign(reports.size(), st);
  Wake();
  return out;
}

Status JobService::ReportTaskLocked(int64_t task_id, const TaskReport& r) {
  RM_ASSIGN_OR_RETURN(Task task, store_->GetTask(task_id));
  if (task.node_id != r.node_id || task.attempt != r.attempt) {
    return FailedPrecondition(fmt::format("task {} attempt {} is not assigned to node {} (current: attempt {} on node {})",
                                          task_id, r.attempt, r.node_id, task.attempt, task.node_id));
  }
  if (!r.phase.empty()) {
    if (IsTerminal(task.state)) return Status::Ok();  // late: the task's timeline has ended
    const std::string state = StateName(task.state);
    const std::string reason = PhaseEventReason(r.phase);
    // A report the agent sent again (its answer was lost, or it went to a new
    // leader) is recorded once: the task's latest event is it already.
    RM_ASSIGN_OR_RETURN(auto events, store_->ListEvents(task.job_id));
    for (auto e = events.rbegin(); e != events.rend(); ++e) {
      if (e->task_id != task.id) continue;
      if (e->reason == reason) return Status::Ok();
      break;
    }
    return store_->AddEvent({0, task.job_id, task.id, task.rank, clock_->NowMs(), state, state, reason});
  }
  if (IsTerminal(task.state)) {
    if (r.state == "exited") return Status::Ok();  // a repeated report
    return FailedPrecondition(fmt::format("task {} already ended: {}", task_id, StateName(task.state)));
  }
  if (r.state == "running") {
    if (task.state != State::kScheduled) return Status::Ok();
    return store_->InTransaction([&]() -> Status {
      RM_RETURN_IF_ERROR(SetTaskState(task, State::kRunning, "started"));
      RM_ASSIGN_OR_RETURN(Job job, store_->GetJob(task.job_id));
      if (job.state == State::kScheduled) {
        RM_RETURN_IF_ERROR(SetJobState(job, State::kRunning, fmt::format("rank {} started", task.rank)));
      }
      return Status::Ok();
    });
  }
  if (r.state != "exited") return InvalidArgument("state: must be \"running\" or \"exited\", got \"" + r.state + "\"");

  Status st = store_->InTransaction([&]() -> Status {
    RM_ASSIGN_OR_RETURN(Job job, store_->GetJob(task.job_id));
    std::string what = ExitReason(r);
    if (r.exit_code >= 0) task.exit_code = r.exit_code;
    if (task.desired == Desired::kStop) {
      RM_RETURN_IF_ERROR(SetTaskState(task, State::kCancelled,
                                      fmt::format("{} ({})", job.stop_reason.empty() ? "stopped" : job.stop_reason, what)));
    } else if (r.exit_code == 0 && r.signal == 0 && r.message.empty()) {
      RM_RETURN_IF_ERROR(SetTaskState(task, State::kSucceeded, what));
    } else {
      RM_RETURN_IF_ERROR(SetTaskState(task, State::kFailed, what));
    }
    return SettleJobLocked(task.job_id);
  });
  // Its agent learns at once that the server no longer lists it (a Slurm
  // step, whose one task this was, exits then).
  if (st.ok()) BumpNodeLocked(task.node_id);
  return st;
}

}  // namespace ringmaster::server

