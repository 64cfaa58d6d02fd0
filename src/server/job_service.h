// JobService: the server's control plane. It owns the job and task state
// machine (PENDING -> SCHEDULED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED,
// every transition an event with a reason and a time), runs the scheduler
// (a pure function, scheduler/) over the MetaStore's snapshot, and speaks the
// agent protocol: node registration and heartbeats, assignments by long-poll,
// and task reports fenced by (node, attempt).
//
// A job with a failed or cancelled task is stopped as a whole: the other
// tasks are told to stop, and the job takes its final state (or restarts,
// within max_restarts) only once every task has ended — no half-alive jobs.
// Thread-safe: one mutex serialises state changes. Agents' long-polls wait
// without a thread (WatchNode), so any number of nodes costs no threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "files/blob_store.h"
#include "monitor/monitor.h"
#include "monitor/prometheus.h"
#include "net/ipv4.h"
#include "scheduler/scheduler.h"
#include "protocol/job_spec.h"
#include "store/meta_store.h"

namespace ringmaster::server {

struct PassInput;

struct JobServiceOptions {
  // The container overlay's addresses (docs/cluster.md): a block of
  // overlay_block_prefix bits per node that has an overlay, task addresses
  // from its node's block.
  net::Ipv4Net overlay_subnet{0x0AF40000, 16};  // 10.244.0.0/16
  int overlay_block_prefix = 24;
  // A node's lease: without a heartbeat this long it is unreachable and gets
  // no new work; its tasks keep running.
  int64_t node_timeout_ms = 10'000;
  // Silent for this long, a node's agent stops its tasks (fencing: it is
  // told this window when it registers); one lease later the server marks
  // them LOST and their gangs restart elsewhere, so no rank runs twice. A
  // server away for less (a restart, an upgrade) stops no task: silence
  // counts from the server's start at the earliest.
  int64_t node_lost_after_ms = 300'000;
  // A job restarts after min(restart_backoff_ms * 2^(restarts so far), max_restart_backoff_ms).
  int64_t restart_backoff_ms = 1'000;
  int64_t max_restart_backoff_ms = 60'000;
  int64_t stop_grace_ms = 5'000;     // SIGTERM .. SIGKILL
  // SIGTERM .. SIGKILL for a gang stopped to resume later (a preemption or an
  // elastic resize): time to finish a step (or an evaluation) and checkpoint.
  int64_t checkpoint_grace_ms = 30'000;
  std::chrono::milliseconds schedule_interval{1000};
  // The files service: preemption reads when each job last checkpointed from
  // jobs/<id>/checkpoints/latest there. nullptr = no checkpoint times.
  files::BlobStore* files = nullptr;
  // Called (under the service's lock: it must only queue work) when a job
  // reaches a terminal state. The server archives the job's logs from it.
  std::function<void(int64_t job_id)> on_job_ended;
  // Elastic jobs grow while no job waits and the cluster's allocated share
  // (the larger of CPU and GPU) is below this; at most once per cooldown.
  double elastic_scale_up_below = 0.7;
  // Above this allocated share, an elastic job's workers beyond min also
  // yield to waiting jobs of its own priority (below it, only to higher ones).
  double elastic_scale_down_above = 0.9;
  int64_t elastic_cooldown_ms = 5'000;
  // A user may have at most this many PENDING jobs; more is refused with
  // ResourceExhausted (HTTP 429). 0 = no limit.
  int64_t max_pending_jobs_per_user = 500;
  // The metrics pipeline (monitor/): measured use for the load-aware score
  // and `autoscale`, stragglers and idle allocations. nullptr = none.
  monitor::Monitor* monitor = nullptr;
  // How often stragglers and idle allocations are looked for (events on the job).
  int64_t usage_eval_interval_ms = 5'000;
  // The window of measured use the load-aware score reads.
  int64_t load_window_ms = 30'000;
  // The scheduler's policy, plugins, preemption and quotas (scheduler.h).
  // REQUIRES: valid (scheduler::Scheduler::Create accepts it).
  scheduler::SchedulerConfig scheduler;
  // Where tasks run: "agents" (the scheduler places gangs on agents' nodes)
  // or "slurm" (a pass admits gangs and hands each to a cluster manager,
  // which places and starts it: server/slurm_backend.h, control/external.cc).
  std::string backend = "agents";
  // On "slurm": at most this many gangs handed over and not yet started
  // (waiting in Slurm's queue); the rest wait in Ringmaster's, in its order.
  int max_handed_over = 1000;
  int max_handed_over_per_user = 100;  // of those, one user's
  // On "slurm": called (under the service's lock: it must only queue work)
  // when a gang was handed over or one handed over is to stop.
  std::function<void()> on_external_work;
  // The key each job's RINGMASTER_JOB_SECRET derives from (32 bytes, kept
  // secret; the server derives it from its secrets key). "" = a random key
  // for this process's life.
  std::string job_secret_key;
};

// A gang handed to a cluster manager (backend "slurm"), one attempt of it.
struct ExternalGang {
  int64_t job_id = 0;
  int attempt = 0;
  int64_t user_id = 0;
  std::string user;
  std::string job_name;
  std::shared_ptr<const protocol::JobSpec> spec;
  int replicas = 0;
  // Every rank is on its step's node (the cluster manager started it).
  bool bound = false;
  // Cancelled, failed or restarting: the cluster manager's job must end.
  bool stopping = false;
  std::string stop_reason;
  std::string reason;         // the job's reason now (what `show` prints)
  int64_t stop_since_ms = 0;  // when the job was last updated while stopping (wall clock)
};

// How a cluster manager's job ended, as EndExternalGang applies it to the gang.
enum class ExternalEnd {
  kRequeue,    // not the job's fault (a node failed): it starts again at once, not counted as a restart
  kFailed,     // its ranks failed (within max_restarts the job restarts)
  kFatal,     // it cannot go on (Slurm's time limit, Slurm refused it): the job fails
  kLost,       // its ranks ended without a word (within max_restarts the job restarts)
  kStopped,    // it was stopping, and has: cancelled or restarting as the job's stop says
};

struct TaskReport {
  int64_t node_id = 0;
  int attempt = 0;
  std::string state;  // "running" | "exited"
  int exit_code = -1;
  int signal = 0;
  std::string message;
  // Set (timeline.h IsAgentPhase): only where the task is in starting or
  // ending, recorded as a task event; `state` and the exit are not read.
  std::string phase;
};

// What /metrics tells of the scheduler. Counters count since the server started.
struct SchedulerStats {
  uint64_t passes = 0;
  uint64_t placements = 0;   // gangs placed
  uint64_t preemptions = 0;  // gangs preempted
  uint64_t resizes = 0;      // elastic grows and shrinks on measured use (autoscale)
  int64_t queue_length = 0;  // pending jobs at the last pass
  std::map<std::string, int64_t> pending_by_reason;  // at the last pass, by kind
  monitor::HistogramData pass_seconds;
};

// A pending reason's kind ("resources", "gpus", "ports", "quota", ...): a
// label of few values for /metrics.
std::string PendingReasonKind(const std::string& reason);

// What an admin made of a node, as pending jobs and `nodes` say it:
// "cordoned: <reason>", "draining: <reason>" ("" when neither).
std::string CordonText(const store::Node& node);

class JobService {
 public:
  JobService(store::MetaStore* store, Clock* clock, JobServiceOptions options = {});
  ~JobService();

  // Starts / stops the background scheduler loop.
  // Starts the scheduler loop, after learning when each active job last
  // checkpointed (one HEAD of jobs/<id>/checkpoints/latest each).
  void Start();
  // What Start learns first: each active job's checkpoints/latest time in the store.
  void LearnCheckpointTimes();
  // A job's checkpoints/latest was written at `ms` (the files API tells,
  // whoever wrote it: the agent, or the user).
  void NoteCheckpoint(int64_t job_id, int64_t ms);
  void Stop();

  // A non-empty `submit_key` makes the submit idempotent per user: a retry
  // with the same key returns the job the first one made, and sets *existed.
  StatusOr<int64_t> Submit(const store::User& user, const protocol::JobSpec& spec, const std::string& submit_key = "",
                           bool* existed = nullptr);
  Status Cancel(int64_t job_id, const std::string& by);

  // `held`: the tasks (id, attempt) the agent runs or holds. A task it
  // reported running on this node that it no longer holds is gone (its
  // agent's data was lost with the node): LOST at once, not at the lease.
  // nullopt: the agent does not say (an older protocol).
  StatusOr<int64_t> RegisterNode(const store::Node& node,
                                 const std::optional<std::set<std::pair<int64_t, int>>>& held = std::nullopt);
  // `fence_after_ms`: the fencing window the agent says it keeps (-1: it
  // does not say, an older protocol); kept with the node (job_nodes.cc).
  Status Heartbeat(int64_t node_id, double cpu_util, int64_t memory_used_bytes, int64_t fence_after_ms = -1);
  // The container overlay as node `node_id` sees it: {"subnet", "block",
  // "peers": [{"node", "address", "block"}]} of every node with an overlay
  // of the same mode; null when the node has none.
  StatusOr<nlohmann::json> Overlay(int64_t node_id);
  int64_t LeaseMs() const { return options_.node_timeout_ms; }
  // How long an agent keeps running its tasks without the server.
  int64_t FenceAfterMs() const { return options_.node_lost_after_ms; }
  // Silent past this, a node is lost: its tasks are marked LOST. A node's
  // own is longer while its agent keeps a longer window (told before a
  // restart of this server with a shorter one).
  int64_t LostAfterMs() const { return options_.node_lost_after_ms + options_.node_timeout_ms; }
  int64_t LostAfterMs(const store::Node& node) const;
  // Block k of the overlay subnet, "10.244.3.0/24"; "" for none.
  std::string OverlayBlock(int k) const {
    auto b = net::Block(options_.overlay_subnet, options_.overlay_block_prefix, k);
    return b ? net::FormatCidr(*b) : "";
  }
  // The tasks this node should run or stop now: {"index": I, "tasks": [...]}.
  StatusOr<nlohmann::json> Assignments(int64_t node_id);
  // The node's assignment index: it changes whenever what the node should run does.
  uint64_t NodeIndex(int64_t node_id);
  // Calls `fn` once when the node's index moves away from `index`, or when the
  // service stops. Returns 0 without calling it if the index already differs
  // (answer now). `fn` may run while the service's state lock is held (not
  // the watch lock): it may call Unwatch, and must otherwise only hand work off
  // (post it to a pool), never call anything else of the service.
  uint64_t WatchNode(int64_t node_id, uint64_t index, std::function<void()> fn);
  // Forgets a watch that has not fired; a no-op once it has.
  void Unwatch(uint64_t watch_id);
  Status ReportTask(int64_t task_id, const TaskReport& report);
  // A node's reports of one tick, in order, in one transaction: a result each.
  std::vector<Status> ReportTasks(const std::vector<std::pair<int64_t, TaskReport>>& reports);

  // Node lifecycle, an admin's (node_lifecycle.cc). `name`: a node's name (or id).
  StatusOr<store::Node> FindNode(const std::string& name);
  // A cordoned node gets no new work; a drained one also loses what it runs:
  // elastic jobs shrink off it, other jobs checkpoint and restart elsewhere
  // (neither counted as a restart). `reason` shows in `nodes` and in pending jobs.
  Status Cordon(const std::string& name, const std::string& reason, bool drain);
  Status Uncordon(const std::string& name);
  // Forgets a node that is gone: its tasks are LOST now (their jobs restart
  // elsewhere within max_restarts). Refused while the node is heard from (its
  // agent would register it again) and, without `force`, while it holds
  // tasks its agent may still run (silent for less than LostAfterMs): an
  // admin who knows the host is down says `force`.
  Status DeleteNode(const std::string& name, bool force);

  // One scheduling pass (control/pass.h): snapshot, schedule, apply the plan,
  // autoscale, preempt. The loop calls it, tests call it directly.
  Status RunPass();

  // Backend "slurm" (control/external.cc). The gangs handed over, SCHEDULED
  // or RUNNING, with what their cluster manager must do.
  StatusOr<std::vector<ExternalGang>> ExternalGangs();
  // Why a handed-over gang that has not started waits (the cluster manager's
  // pending reason, in words): the job's reason, recorded when it changes.
  Status NoteExternalReason(int64_t job_id, int attempt, const std::string& reason);
  // The cluster manager's job of this attempt ended: its tasks that have not
  // ended end as `how` says, and the job settles. A no-op for another attempt.
  Status EndExternalGang(int64_t job_id, int attempt, ExternalEnd how, const std::string& reason);
  // The step node of a gang's rank: "slurm-<job>-<attempt>-<rank>", and back.
  static std::string StepNodeName(int64_t job_id, int attempt, int rank);
  static bool ParseStepNodeName(const std::string& name, int64_t* job_id, int* attempt, int* rank);
  SchedulerStats Stats() const;
  // Where each job left pending by the last pass stands in the queue, in the
  // order its policy tried them (1 = tried first). Jobs that pass did not
  // consider (submitted since, waiting out a restart backoff) are absent.
  std::shared_ptr<const std::map<int64_t, int>> QueuePositions() const;
  // The tasks placed on the node at the last pass: the ones its agent may
  // report samples of.
  std::set<int64_t> TasksOn(int64_t node_id) const;
  // Whether the node's lease holds: heard from within node_timeout_ms (steady clock).
  bool NodeReady(const store::Node& node) const;
  // "ready", "unreachable" (silent past its lease: no new work, its tasks
  // still count as running) or "lost" (silent past LostAfterMs).
  std::string NodeStateName(const store::Node& node) const;
  // The node as last heard from (heartbeats are held in memory): its
  // heartbeat time and usage replace the stored ones.
  void ApplyLive(store::Node* node) const;

 private:
  Status ReportTaskLocked(int64_t task_id, const TaskReport& report);
  Status SetJobState(store::Job& job, store::State to, const std::string& reason);
  Status SetTaskState(store::Task& task, store::State to, const std::string& reason);
  // After a task ended: stop the rest if it failed; finish or restart the job once all ended.
  Status SettleJobLocked(int64_t job_id);
  // Elastic jobs: grows running ones into idle capacity, shrinks lower-priority
  // ones (not below min) so a waiting job fits, and adds that job to
  // `made_room`. `nodes` holds this pass's placements.
  Status AutoscaleLocked(std::vector<scheduler::NodeState> nodes, const std::vector<store::Job>& active,
                         const std::vector<scheduler::JobRequest>& waiting, std::map<int64_t, std::string>* reasons,
                         std::set<int64_t>* made_room);
  // Elastic jobs with `autoscale`: one replica more or fewer on their
  // measured use over the window (monitor/), at most once per cooldown.
  // `nodes` holds this pass's placements; `grown` gets the jobs resized.
  Status AutoscaleMeasuredLocked(const std::vector<scheduler::NodeState>& nodes, const std::vector<store::Job>& active,
                                 const std::vector<store::Task>& placed, bool anyone_waiting);
  // Stragglers and idle allocations (monitor/): each raised or cleared flag an event on its job.
  Status WatchUsageLocked(const std::vector<store::Job>& active, const std::vector<store::Task>& placed, int64_t now);
  // What the monitor knows of a running gang.
  monitor::RunningGang GangOf(const store::Job& job, const std::vector<store::Task>& placed) const;
  // Stops a job's gang so that it is requeued at once with `replicas` tasks,
  // not counted as a restart: an elastic resize, or a preemption (same size).
  Status ResizeLocked(store::Job& job, int replicas, const std::string& why);
  // The job's spec, parsed once and cached until the job ends (a stored spec
  // never changes), so a scheduler pass does not re-parse every pending job.
  StatusOr<std::shared_ptr<const protocol::JobSpec>> SpecLocked(const store::Job& job);
  // A job whose stored spec cannot be read fails (its tasks are stopped); the server goes on.
  Status FailUnreadableLocked(store::Job& job, const Status& why);
  // The steps of RunPass (control/pass.cc, control/apply.cc).
  Status ReadPassLocked(PassInput& in);
  Status ApplyPlanLocked(const scheduler::Plan& plan, PassInput& in);
  Status PreemptLocked(const scheduler::Plan& plan, const std::set<int64_t>& made_room, int64_t now);
  Status RecordPassLocked(const scheduler::Plan& plan, PassInput& in);
  // Backend "slurm": which pending gangs are handed over now (in the
  // policy's order, within quotas and max_handed_over), and handing them
  // over (tasks SCHEDULED on no node yet, a new attempt each).
  scheduler::Plan AdmitExternalLocked(const PassInput& in);
  Status HandOverLocked(const scheduler::Plan& plan, PassInput& in);
  // A step node registered: once every rank of its gang has one, the gang's
  // tasks are placed on them (their agents then get their assignments).
  Status BindStepNodeLocked(const store::Node& node);
  // When the job's `latest` checkpoint last reached the files service (0:
  // never, or not since the server started): preemption's measure of the
  // work a victim would lose.
  int64_t LastCheckpointMs(const store::Job& job) const;
  // The node's block of the overlay subnet (job_overlay.cc); -1 on the host network.
  StatusOr<int> OverlayBlockLocked(const store::Node& node);
  // Marks the tasks of nodes whose lease ran out LOST and settles their jobs.
  Status ExpireLeasesLocked(const std::vector<store::Node>& nodes, const std::vector<store::Task>& placed);
  // Moves the jobs with tasks on draining nodes away (node_lifecycle.cc).
  Status DrainLocked(const std::vector<store::Node>& nodes, const std::vector<store::Task>& placed);
  void BumpNodeLocked(int64_t node_id);
  // Everything a task finds in its environment: the spec's env, then
  // RINGMASTER_*, torch (RANK, LOCAL_RANK, MASTER_ADDR, ...), TF_CONFIG, DMLC_*.
  StatusOr<std::map<std::string, std::string>> TaskEnvironment(const store::Job& job, const protocol::JobSpec& spec,
                                                               const store::Task& task,
                                                               const std::vector<store::Task>& gang);
  // Milliseconds since the node was last heard from (steady clock; since this
  // server started if never).
  int64_t SilentMs(int64_t node_id) const;
  // Whether a pending job's restart backoff has passed.
  bool BackoffOver(const store::Job& job, int64_t now);
  void Wake();
  void Loop();

  store::MetaStore* const store_;
  Clock* const clock_;
  const int64_t started_steady_ms_;  // leases count from here at the earliest: a restarted server gives agents time
  // Nodes as last heard from, in memory (Heartbeat).
  static constexpr int64_t kPersistHeartbeatMs = 30'000;
  struct Live {
    int64_t seen_steady_ms = 0;  // the lease's clock
    int64_t heartbeat_ms = 0;    // wall clock, for display
    double cpu_util = 0;
    int64_t memory_used_bytes = 0;
    int64_t persisted_steady_ms = 0;  // when the store last got it
    int64_t fence_ms = 0;             // the fencing window its agent keeps, as stored
  };
  mutable std::mutex live_mu_;  // acquired after mu_ (never before it)
  std::map<int64_t, Live> live_;  // GUARDED_BY(live_mu_)
  // Steady-clock times of this server's run (jumps of the wall clock do not move them):
  std::map<int64_t, int64_t> not_before_steady_;     // GUARDED_BY(mu_): job -> its restart backoff's end
  std::map<int64_t, int64_t> running_since_steady_;  // GUARDED_BY(mu_): running task -> when it started
  const JobServiceOptions options_;
  const std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::map<int64_t, int64_t> last_resize_ms_;  // GUARDED_BY(mu_): elastic job -> when it was last resized
  int64_t last_usage_eval_ms_ = 0;             // GUARDED_BY(mu_)
  std::set<int64_t> resized_this_pass_;        // GUARDED_BY(mu_): one resize per job and pass
  // Counters for /metrics, and the placed tasks by node (for TasksOn).
  mutable std::mutex stats_mu_;  // acquired after mu_ (never before it)
  SchedulerStats stats_;         // GUARDED_BY(stats_mu_), but pass_seconds
  monitor::Histogram pass_seconds_{{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  std::map<int64_t, std::set<int64_t>> tasks_on_;  // GUARDED_BY(stats_mu_)
  std::shared_ptr<const std::map<int64_t, int>> queue_positions_ =  // GUARDED_BY(stats_mu_)
      std::make_shared<const std::map<int64_t, int>>();
  std::map<int64_t, std::shared_ptr<const protocol::JobSpec>> specs_;  // GUARDED_BY(mu_): active jobs' parsed specs

  std::mutex mu_;  // serialises every state change
  mutable std::mutex checkpoint_mu_;
  std::map<int64_t, int64_t> checkpoint_ms_;  // GUARDED_BY(checkpoint_mu_): job -> its latest's time

  // Node indexes and their watchers. Acquired after mu_ (never before it).
  struct Watch {
    int64_t node_id;
    std::function<void()> fn;
  };
  std::mutex watch_mu_;
  std::map<int64_t, uint64_t> node_versions_;  // GUARDED_BY(watch_mu_)
  std::map<uint64_t, Watch> watches_;          // GUARDED_BY(watch_mu_)
  uint64_t next_watch_ = 1;                    // GUARDED_BY(watch_mu_)
  bool closed_ = false;                        // GUARDED_BY(watch_mu_): Stop() ends long-polls
  const uint64_t version_base_;

  std::mutex loop_mu_;
  std::condition_variable loop_cv_;
  bool wake_ = false;          // GUARDED_BY(loop_mu_)
  bool stopping_ = false;      // GUARDED_BY(loop_mu_)
  std::thread loop_;
};

}  // namespace ringmaster::server
