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

#include "common/strings.h"
#include "scheduler/scheduler.h"
#include "server/job_overlay.h"

namespace ringmaster::server {

using store::Desired;
using store::IsTerminal;
using store::Job;
using store::State;
using store::StateName;
using store::Task;

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

}  // namespace

namespace {

// A new, unplaced task of a job with `spec`'s per-task resources.
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

}  // namespace

JobService::JobService(store::MetaStore* store, Clock* clock, JobServiceOptions options)
    : store_(store),
      clock_(clock),
      started_steady_ms_(clock->SteadyMs()),
      options_(options),
      scheduler_(std::move(scheduler::Scheduler::Create(options.scheduler).value())),
      // Versions start from the clock so that an agent's index from before a
      // server restart never matches: it gets a fresh list at once.
      version_base_(static_cast<uint64_t>(clock->NowMs())) {}

JobService::~JobService() { Stop(); }

void JobService::Start() {
  LearnCheckpointTimes();
  loop_ = std::thread([this] { Loop(); });
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
      Status st = ScheduleOnce();
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

// Not under mu_: a submit is one insert (the store has its own lock), and
// waits for no scheduling pass. The pending limit may be passed by the few
// submits that race it.
StatusOr<int64_t> JobService::Submit(const store::User& user, const JobSpec& spec) {
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
  const Task tmpl = PendingTask(spec, "waiting for the scheduler", now);
  int64_t id = 0;
  RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
    RM_ASSIGN_OR_RETURN(id, store_->CreateJob(job, tmpl));
    return store_->AddEvent({0, id, 0, -1, now, "", "PENDING", "submitted by " + user.name});
  }));
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
  Wake();
  return Status::Ok();
}

namespace {

// Device-seconds a task has held from its start up to `until_ms`: what LAS
// counts as attained service.
double TaskService(const Task& t, int64_t until_ms) {
  if (t.started_ms <= 0 || until_ms <= t.started_ms) return 0;
  return static_cast<double>(until_ms - t.started_ms) / 1000 * scheduler::Devices({t.cpu_milli, t.memory_bytes, t.gpus});
}

}  // namespace

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
    if (std::string why = RolesDone((*spec)->roles, ends); !why.empty()) {
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

Status JobService::ReportTask(int64_t task_id, const TaskReport& r) {
  std::lock_guard<std::mutex> l(mu_);
  RM_ASSIGN_OR_RETURN(Task task, store_->GetTask(task_id));
  if (task.node_id != r.node_id || task.attempt != r.attempt) {
    return FailedPrecondition(fmt::format("task {} attempt {} is not assigned to node {} (current: attempt {} on node {})",
                                          task_id, r.attempt, r.node_id, task.attempt, task.node_id));
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
  Wake();
  return st;
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

scheduler::JobRequest JobService::RequestFor(const Job& j, const JobSpec& spec, const std::string& user) const {
  scheduler::JobRequest r;
  r.job_id = j.id;
  r.replicas = j.replicas;
  r.per_task = {spec.cpu_milli, spec.memory_bytes, spec.gpus};
  r.gpu_types = spec.gpu_types;
  r.throughput = spec.gpu_throughput;
  r.node_selector = spec.node_selector;
  if (!spec.executor.empty()) {
    r.executors = {spec.executor};
  } else if (spec.network == "overlay") {
    r.executors = {"runc"};  // the overlay joins runc containers (docs/cluster.md)
  } else if (!spec.image.empty()) {
    r.executors = {"runc", "docker"};
  } else {
    r.executors = {"process"};
  }
  r.needs_overlay = spec.network == "overlay";
  r.user = user;
  r.priority = j.priority;
  r.submit_ms = j.created_ms;
  r.expected_runtime_ms = spec.time_limit_ms;
  r.attained_service_s = j.service_s;  // ended runs; ScheduleOnce adds the current one
  r.rank_by_measured_use = spec.autoscale.has_value();
  return r;
}

int64_t JobService::LastCheckpointMs(const Job& job) const {
  // The checkpoint a restart would resume from is the one `latest` names,
  // and `latest` is uploaded after its checkpoint's files. Kept in memory:
  // no store call under the service's lock.
  std::lock_guard<std::mutex> l(checkpoint_mu_);
  auto it = checkpoint_ms_.find(job.id);
  return it == checkpoint_ms_.end() ? 0 : it->second;
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

Status JobService::ScheduleOnce() {
  std::lock_guard<std::mutex> l(mu_);
  const int64_t pass_start = clock_->SteadyMs();
  struct PassTimer {
    monitor::Histogram& h;
    Clock* clock;
    int64_t start;
    ~PassTimer() { h.Observe(static_cast<double>(clock->SteadyMs() - start) / 1000.0); }
  } timer{pass_seconds_, clock_, pass_start};
  resized_this_pass_.clear();
  RM_ASSIGN_OR_RETURN(auto nodes, store_->ListNodes());
  for (auto& n : nodes) ApplyLive(&n);
  {
    RM_ASSIGN_OR_RETURN(auto placed, store_->ListPlacedTasks());
    RM_RETURN_IF_ERROR(ExpireLeasesLocked(nodes, placed));
    RM_RETURN_IF_ERROR(DrainLocked(nodes, placed));
  }
  RM_ASSIGN_OR_RETURN(auto placed, store_->ListPlacedTasks());
  RM_ASSIGN_OR_RETURN(auto active, store_->ListActiveJobs());
  RM_ASSIGN_OR_RETURN(auto users, store_->ListUsers());
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    tasks_on_.clear();
    for (const Task& t : placed) tasks_on_[t.node_id].insert(t.id);
  }
  std::map<int64_t, std::string> user_names;
  for (const auto& u : users) user_names[u.id] = u.name;
  const int64_t now = clock_->NowMs();

  scheduler::Snapshot snap;
  snap.now_ms = now;
  std::map<int64_t, std::string> node_names;
  for (const auto& n : nodes) {
    scheduler::NodeState s;
    s.id = n.id;
    s.name = n.name;
    s.ready = NodeReady(n) && !n.cordoned;
    if (n.cordoned) s.cordoned = CordonText(n);
    s.capacity = {n.cpu_milli, n.memory_bytes, n.gpu_count};
    s.gpu_model = n.gpu_model;
    s.cpu_util = n.cpu_util;
    if (monitor::Monitor* m = options_.monitor) {
      // Measured over a window, not one heartbeat's reading: a spike does not steer placement.
      const int64_t since = now - options_.load_window_ms;
      s.cpu_util = m->NodeCpuUtil(n.id, since).value_or(n.cpu_util);
      s.gpu_util = m->NodeGpuUtil(n.id, since).value_or(0.0);
    }
    const auto labels = nlohmann::json::parse(n.labels_json, nullptr, /*allow_exceptions=*/false);
    if (labels.is_object()) {
      for (const auto& [k, v] : labels.items()) {
        if (v.is_string()) s.labels[k] = v.get<std::string>();
      }
    }
    s.memory_util = n.memory_bytes > 0 ? static_cast<double>(n.memory_used_bytes) / static_cast<double>(n.memory_bytes) : 0;
    s.executors = Split(n.executors, ',');
    s.overlay = n.network != "host" && n.overlay_block >= 0;
    for (const Task& t : placed) {
      if (t.node_id != n.id) continue;
      s.allocated.cpu_milli += t.cpu_milli;
      s.allocated.memory_bytes += t.memory_bytes;
      s.allocated.gpus += t.gpus;
    }
    node_names[n.id] = n.name;
    snap.nodes.push_back(std::move(s));
  }

  // Running gangs: what preemption may choose from, what quotas count, how
  // much service each job has had (LAS), and time limits.
  std::map<int64_t, std::vector<const Task*>> gang_tasks;
  for (const Task& t : placed) gang_tasks[t.job_id].push_back(&t);
  const bool anyone_waiting = std::any_of(active.begin(), active.end(), [](const Job& j) {
    return j.state == State::kPending && !j.stop_state;
  });
  for (Job& j : active) {
    auto g = gang_tasks.find(j.id);
    if (g == gang_tasks.end()) continue;
    auto spec_or = SpecLocked(j);
    if (!spec_or.ok()) {
      RM_RETURN_IF_ERROR(FailUnreadableLocked(j, spec_or.status()));
      continue;
    }
    const JobSpec& spec = **spec_or;
    scheduler::RunningJob rj;
    rj.request = RequestFor(j, spec, user_names[j.user_id]);
    std::vector<const Task*> tasks = g->second;
    std::sort(tasks.begin(), tasks.end(), [](const Task* a, const Task* b) { return a->rank < b->rank; });
    int64_t started = 0;
    // How long the gang has run, on the steady clock where this server saw it
    // start (the wall clock's times only after a restart, never negative).
    int64_t ran_ms = INT64_MAX;
    bool all_running = true;
    for (const Task* t : tasks) {
      rj.node_ids.push_back(t->node_id);
      started = std::max(started, t->started_ms);
      auto since = running_since_steady_.find(t->id);
      ran_ms = std::min(ran_ms, since != running_since_steady_.end() ? clock_->SteadyMs() - since->second
                                                                      : std::max<int64_t>(0, now - t->started_ms));
      all_running = all_running && t->state == State::kRunning;
      if (t->state == State::kRunning) rj.request.attained_service_s += TaskService(*t, now);
    }
    rj.started_ms = all_running ? started : now;
    // Only preemption reads checkpoint times: no directory listings while nothing waits.
    const int64_t ckpt = anyone_waiting ? LastCheckpointMs(j) : 0;
    rj.last_checkpoint_ms = ckpt > rj.started_ms ? ckpt : 0;
    rj.stopping = j.stop_state.has_value();
    if (all_running && !rj.stopping) {
      if (spec.time_limit_ms > 0 && ran_ms > spec.time_limit_ms) {
        j.stop_state = State::kFailed;
        j.stop_reason = fmt::format("time limit {} reached", FormatDuration(spec.time_limit_ms));
        RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
          RM_RETURN_IF_ERROR(store_->UpdateJob(j));
          return SettleJobLocked(j.id);
        }));
        rj.stopping = true;
      }
    }
    snap.running.push_back(std::move(rj));
  }

  std::vector<Job> pending;
  for (const Job& j : active) {
    if (j.state == State::kPending && !j.stop_state && BackoffOver(j, now)) pending.push_back(j);
  }
  std::vector<scheduler::JobRequest> queue;
  std::map<int64_t, Job*> by_id;
  for (Job& j : pending) {
    auto spec = SpecLocked(j);
    if (!spec.ok()) {
      RM_RETURN_IF_ERROR(FailUnreadableLocked(j, spec.status()));
      continue;
    }
    queue.push_back(RequestFor(j, **spec, user_names[j.user_id]));
    by_id[j.id] = &j;
  }
  std::map<int64_t, const scheduler::JobRequest*> queue_by_id;
  for (const auto& r : queue) queue_by_id[r.job_id] = &r;
  scheduler::Plan plan;
  if (!queue.empty()) plan = scheduler_->Schedule(snap, queue);
  std::vector<scheduler::NodeState>& snapshot = snap.nodes;  // allocations below grow with this pass's placements
  // Every placed task gets a port from its node's range (like Nomad's
  // dynamic ports): the lowest one no placed task on that node holds.
  std::map<int64_t, std::set<int>> used_ports;
  for (const Task& t : placed) {
    if (t.port > 0) used_ports[t.node_id].insert(t.port);
  }
  std::map<int64_t, const store::Node*> node_by_id;
  for (const auto& n : nodes) node_by_id[n.id] = &n;
  // And the GPUs it holds, by index: the lowest ones no placed task on that
  // node holds, so two tasks never share a GPU.
  std::map<int64_t, std::set<int>> used_gpus;
  for (const Task& t : placed) {
    for (const std::string& g : Split(t.gpu_indices, ',')) used_gpus[t.node_id].insert(std::atoi(g.c_str()));
  }
  auto take_gpus = [&](int64_t node_id, int count) -> std::string {
    std::vector<std::string> got;
    const store::Node* n = node_by_id[node_id];
    for (int g = 0; g < n->gpu_count && static_cast<int>(got.size()) < count; ++g) {
      if (used_gpus[node_id].insert(g).second) got.push_back(std::to_string(g));
    }
    return fmt::format("{}", fmt::join(got, ","));
  };
  // And, where it joins the container overlay, an address of its node's block.
  OverlayAddresses addresses(options_.overlay_subnet, options_.overlay_block_prefix, placed);
  auto take_port = [&](int64_t node_id) -> int {
    const store::Node* n = node_by_id[node_id];
    for (int port = n->port_lo; port <= n->port_hi; ++port) {
      if (port > 0 && used_ports[node_id].insert(port).second) return port;
    }
    return 0;
  };
  std::vector<std::pair<int64_t, int64_t>> newly_placed;  // (node, task) of the gang being placed
  for (const auto& p : plan.placements) {
    Job& job = *by_id[p.job_id];
    // Ports first: a gang whose node has no free port stays pending, whole.
    std::vector<int> ports;
    std::string no_port;
    for (int64_t node_id : p.node_ids) {
      const store::Node* n = node_by_id[node_id];
      int port = take_port(node_id);
      if (port == 0 && n->port_hi >= n->port_lo) {
        no_port = fmt::format("node {} has no free port in {}-{}", n->name, n->port_lo, n->port_hi);
      }
      ports.push_back(port);
    }
    if (!no_port.empty()) {
      for (size_t i = 0; i < ports.size(); ++i) used_ports[p.node_ids[i]].erase(ports[i]);
      plan.pending_reasons[job.id] = "waiting for ports: " + no_port;
      continue;
    }
    // GPUs by index, likewise all or none (the scheduler counted them; a node
    // that re-registered with fewer may still disagree).
    std::vector<std::string> gpu_sets;
    std::string no_gpu;
    const int per_task_gpus = queue_by_id[job.id]->per_task.gpus;
    for (int64_t node_id : p.node_ids) {
      gpu_sets.push_back(per_task_gpus > 0 ? take_gpus(node_id, per_task_gpus) : "");
      const size_t got = gpu_sets.back().empty() ? 0 : std::count(gpu_sets.back().begin(), gpu_sets.back().end(), ',') + 1;
      if (static_cast<int>(got) < per_task_gpus) no_gpu = fmt::format("node {} has no {} free GPUs", node_by_id[node_id]->name, per_task_gpus);
    }
    if (!no_gpu.empty()) {
      for (size_t i = 0; i < gpu_sets.size(); ++i) {
        for (const std::string& g : Split(gpu_sets[i], ',')) used_gpus[p.node_ids[i]].erase(std::atoi(g.c_str()));
      }
      for (size_t i = 0; i < ports.size(); ++i) used_ports[p.node_ids[i]].erase(ports[i]);
      plan.pending_reasons[job.id] = "waiting for GPUs: " + no_gpu;
      continue;
    }
    std::vector<std::string> ips;
    std::string no_ip;
    auto job_spec = SpecLocked(job);
    std::vector<const store::Node*> gang_nodes;
    for (int64_t node_id : p.node_ids) gang_nodes.push_back(node_by_id[node_id]);
    const bool joins = job_spec.ok() && GangJoinsOverlay(**job_spec, gang_nodes);
    if (!joins && job_spec.ok() && (*job_spec)->network == "overlay") {
      no_ip = "the gang's nodes are not all on one overlay (agents' --network differ)";
    }
    for (const store::Node* n : gang_nodes) {
      ips.push_back(joins ? addresses.Take(*n) : "");
      if (joins && ips.back().empty()) no_ip = fmt::format("node {} has no free overlay address", n->name);
    }
    if (!no_ip.empty()) {
      for (size_t i = 0; i < ips.size(); ++i) {
        addresses.Give(p.node_ids[i], ips[i]);
        for (const std::string& g : Split(gpu_sets[i], ',')) used_gpus[p.node_ids[i]].erase(std::atoi(g.c_str()));
        used_ports[p.node_ids[i]].erase(ports[i]);
      }
      plan.pending_reasons[job.id] = "waiting for the overlay: " + no_ip;
      continue;
    }
    RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
      RM_ASSIGN_OR_RETURN(auto tasks, store_->ListTasks(job.id));
      std::set<int64_t> touched;
      std::string where;
      for (size_t i = 0; i < tasks.size() && i < p.node_ids.size(); ++i) {
        Task& t = tasks[i];
        t.node_id = p.node_ids[i];
        t.attempt += 1;
        t.desired = Desired::kRun;
        t.port = ports[i];
        t.gpu_indices = gpu_sets[i];
        t.overlay_ip = ips[i];
        RM_RETURN_IF_ERROR(SetTaskState(t, State::kScheduled, "placed on " + node_names[t.node_id]));
        touched.insert(t.node_id);
        newly_placed.emplace_back(t.node_id, t.id);
      }
      for (int64_t n : touched) {
        where += (where.empty() ? "" : ", ") + node_names[n];
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
      for (const auto& [node_id, task_id] : newly_placed) tasks_on_[node_id].insert(task_id);
      newly_placed.clear();
    }
    for (int64_t node_id : p.node_ids) {
      for (auto& n : snapshot) {
        if (n.id != node_id) continue;
        n.allocated.cpu_milli += queue_by_id[job.id]->per_task.cpu_milli;
        n.allocated.memory_bytes += queue_by_id[job.id]->per_task.memory_bytes;
        n.allocated.gpus += queue_by_id[job.id]->per_task.gpus;
      }
    }
  }
  std::vector<scheduler::JobRequest> waiting;
  for (const auto& r : queue) {
    if (plan.pending_reasons.count(r.job_id)) waiting.push_back(r);
  }
  std::set<int64_t> made_room;
  RM_RETURN_IF_ERROR(AutoscaleMeasuredLocked(snapshot, active, placed, !waiting.empty()));
  RM_RETURN_IF_ERROR(AutoscaleLocked(std::move(snapshot), active, waiting, &plan.pending_reasons, &made_room));
  RM_RETURN_IF_ERROR(WatchUsageLocked(active, placed, now));
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
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    ++stats_.passes;
    stats_.queue_length = static_cast<int64_t>(queue.size());
    stats_.pending_by_reason.clear();
    for (const auto& [job_id, reason] : plan.pending_reasons) ++stats_.pending_by_reason[PendingReasonKind(reason)];
  }
  for (const auto& [job_id, reason] : plan.pending_reasons) {
    Job& job = *by_id[job_id];
    if (job.reason == reason) continue;
    job.reason = reason;
    job.updated_ms = clock_->NowMs();
    RM_RETURN_IF_ERROR(store_->UpdateJob(job));
  }
  return Status::Ok();
}

}  // namespace ringmaster::server
