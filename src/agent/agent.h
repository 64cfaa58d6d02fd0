// Agent: runs on every node. Through its ControlPlane it registers the node,
// heartbeats with samples, long-polls for assignments and reconciles them with
// what runs, ships output by offset and reports exits; without an answer for
// the server's window it stops its tasks (fencing). Time comes from its Clock;
// each thread's loop body is a step tests call. Start/Stop from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/container/image_cache.h"
#include "agent/container/layer_store.h"
#include "agent/container/registry_images.h"
#include "agent/control_plane.h"
#include "agent/executor/executor.h"
#include "agent/executor/task_users.h"
#include "agent/lab_tunnel.h"
#include "agent/node/node_info.h"
#include "agent/task_files.h"
#include "client/api_client.h"
#include "common/clock.h"
#include "protocol/agent.h"
#include "net/job_network.h"
#include "net/overlay.h"

namespace ringmaster::agent {

struct AgentOptions {
  std::string server_url;
  std::string token;    // an agent token for this node (scope agent)
  std::string ca_file;  // for https server URLs: the CA to trust ("" = the system's)
  std::string data_dir;          // task directories live under data_dir/tasks
  std::string node_name;         // "" = hostname
  int64_t cpu_milli = 0;         // 0 = detect
  int64_t memory_bytes = 0;      // 0 = detect
  std::string address;           // how other nodes reach tasks here; "" = this host's IPv4 address
  int port_lo = 31000;           // ports the platform may hand to tasks on this node
  int port_hi = 31999;
  std::map<std::string, std::string> labels;  // what jobs' node selectors match
  TaskUsers task_users;                       // who each user's tasks run as
  std::chrono::milliseconds heartbeat_interval{2000};
  // How often the node and its tasks are sampled (the monitor); the samples
  // ride on the heartbeats. 0 = not sampled.
  std::chrono::milliseconds sample_interval{1000};
  std::string nvml_library = "libnvidia-ml.so.1";
  // The node's GPUs as given instead of NVML's (a Slurm step: the GPUs Slurm
  // bound to it, which NVML may not see); nullopt = NVML's.
  std::optional<std::vector<GpuInfo>> gpus;
  std::chrono::milliseconds tick_interval{200};
  // A task's metrics file past this is not shipped (the server keeps no more).
  int64_t max_metrics_bytes = 16 << 20;
  // Log and metrics bytes shipped per tick, all tasks together: a tick stays
  // short however much tasks write (heartbeats have their own thread anyway).
  int64_t ship_bytes_per_tick = 16 << 20;
  // The node's cache of staged inputs (<data_dir>/cache), by SHA-256.
  int64_t input_cache_bytes = int64_t{20} << 30;
  // Where tasks' images are kept (by digest); "" = <data_dir>/images.
  // Registries' images keep their layers under <image cache>/layers.
  std::string image_cache_dir;
  // Images from registries: their CAs, plain-http registries, this node's
  // platform, dockerd's socket (docker pulls); the layer cache's size (LRU
  // past it) and what one layer may unpack to (a decompression bomb stops there).
  RegistryImageOptions registry;
  uint64_t layer_cache_bytes = uint64_t{100} << 30;
  UnpackLimits unpack_limits;
  // How often a running task's checkpoints/latest is looked at.
  std::chrono::milliseconds checkpoint_poll{250};
  // A task whose own thread watches its exit (the executor's exit fd) is
  // polled by the tick only this often, as a safety net; 0: on every tick
  // (tests that step the agent by hand, so an exit is seen on the next tick).
  std::chrono::milliseconds watched_exit_poll{1000};
  // How long an ended task's uploads are retried before its exit is
  // reported without them (the message says what was not uploaded).
  std::chrono::milliseconds upload_deadline{10 * 60 * 1000};
  // Containers' network: "host", or an overlay across nodes ("vxlan",
  // "ovs-gre"; docs/cluster.md), for which `address` is the tunnel endpoint.
  std::string network = "host";
  std::string ovs_dir = "/var/run/openvswitch";
  // Tasks on the node's own network (process tasks, and containers off the
  // overlay): "isolated" puts each job in a namespace of its own
  // (net/job_network.h; the CLI's default, which needs root), "host" shares
  // the host's (the default here: tests of the agent alone touch no network).
  std::string task_network = "host";
  std::string task_subnet = "10.213.0.0/16";
  std::string task_allow;  // what tasks may reach of the node and the server: "CIDR[:port],..."
  int task_ephemeral_lo = 40000, task_ephemeral_hi = 47999;  // forwarded in blocks, one per job
  std::string self_exe;  // the ringmaster binary: runc's hook that attaches a container
  // Where a task's staging plan comes from; empty: the server (TaskFiles::Plan).
  // Tests without the files API give one of their own.
  std::function<StatusOr<StagePlan>(int64_t task_id, int attempt)> stage_plan;
  // The agent protocol this agent speaks (protocol/agent.h); another
  // value only to test how a server refuses a skewed agent.
  int protocol_version = protocol::kAgentProtocol;
  // Where the server reaches notebooks on this node (agent/lab_tunnel.h):
  // 0 = any free port (told to the server), -1 = no notebooks here.
  int tunnel_port = 0;
};

class Agent {
 public:
  // `control` null: HTTP to options.server_url. `clock` null: the real one;
  // else it must outlive the agent.
  Agent(AgentOptions options, std::unique_ptr<Executor> executor, std::unique_ptr<ControlPlane> control = nullptr,
        const Clock* clock = nullptr);
  ~Agent();

  // Open, then each step on a thread of its own, in a loop with waits.
  void Start();
  // Stops the agent's threads; tasks keep running.
  void Stop();

  // The steps. Open re-adopts the tasks an earlier agent left and its fencing
  // clock; the others are one round of a thread's loop each.
  void Open();
  // Registers the node if it is not, then one long poll of at most `wait`
  // and the tasks reconciled with its answer. An error: wait, then again.
  Status SyncOnce(std::chrono::seconds wait);
  // Ships output and reports starts and exits.
  void Tick();
  void HeartbeatOnce();
  // Stops every task when the server has not answered for its fencing window.
  void FenceOnce();
  int64_t node_id() const { return node_id_; }
  // Waits until every task it holds has started or failed to (each starts
  // on a thread of its own), and each that has ended has had its files
  // uploaded by its thread (so the next tick reports it); false if `guard`
  // passed first. For tests that step the agent by hand.
  bool WaitSettled(std::chrono::milliseconds guard);

  // For a one-task agent (a Slurm step, agent_step.cc). Whether a task was
  // ever assigned here, and how many it holds: staging, running, or ended
  // and not yet reported (a task whose exit the server accepted is not held,
  // though a reply may list it until the node's next change). Thread-safe.
  struct Held {
    bool ever_assigned = false;
    size_t held = 0;
  };
  Held Holding();
  // Instead of Stop when whoever runs the agent is ending it (Slurm cancels a
  // step): stops every task (SIGTERM, SIGKILL after `grace`) and the agent's
  // threads, reporting no exit (the server learns the end from Slurm), and
  // returns once the tasks have ended, their cgroups killed and files
  // removed: within `grace` + kAbandonSlack whatever the tasks do (a thread
  // no cancellation reaches excepted).
  void Abandon(std::chrono::milliseconds grace);
  static constexpr std::chrono::milliseconds kAbandonSlack{3000};

 private:
  // One attempt of a task: what the agent remembers it by. A task id alone
  // is not enough, and neither is it forever (ids may come back after a delete).
  struct TaskRef {
    int64_t task_id = 0;
    int attempt = 0;
    auto operator<=>(const TaskRef&) const = default;
    std::string Key() const;  // the executor's key, "42.1"
  };
  struct LocalTask {
    TaskRef ref;
    int64_t job_id = 0;
    std::vector<std::string> outputs;  // what to upload when it ends
    std::vector<int> gpus;             // the node's GPUs it holds, by index
    bool launched = false;    // the executor has it (staging is over)
    bool files_done = false;  // its last checkpoint and outputs are uploaded (or given up on)
    std::optional<TaskExit> exit;
    bool stop_sent = false;
    std::chrono::milliseconds stop_grace{5000};  // for a stop asked for while it was staging
    bool reported_running = false;
    uint64_t unlisted_at = 0;      // the last reply (replies_) that did not list it
    bool metrics_refused = false;  // the metrics file was unsafe to read; said once
    int64_t shipped = 0;           // bytes of the log the server has
    int64_t metrics_shipped = 0;   // bytes of the metrics file the server has
    std::shared_ptr<LayerLease> layers;  // a registry image's layers, held while it runs
    // Its exit is watched by its thread (the executor's exit fd): the tick
    // polls it only now and then (polled_ms), or while it is being stopped.
    bool exit_watched = false;
    int64_t polled_ms = 0;
    // The launch's timeline (steady ms; 0: not reached), logged when its exit
    // is recorded (debug: "launch timeline").
    struct Timeline {
      int64_t assigned = 0, network = 0, planned = 0, started = 0, exited = 0, uploaded = 0;
    } times;
  };

  void SyncLoop();
  void TickLoop();
  // Heartbeats on a thread of their own: nothing tasks do can delay them.
  void HeartbeatLoop();
  Status Register();
  void Reconcile(const std::vector<protocol::Assignment>& assignments);
  // A task's own thread: stages and starts it (`assignment`; none for a task
  // re-adopted from an earlier agent), uploads its checkpoints while it runs
  // and its last checkpoint and outputs when it ends.
  void RunTask(TaskRef ref, std::optional<protocol::Assignment> assignment, std::shared_ptr<std::atomic<bool>> finished);
  void StartWorkerLocked(const TaskRef& ref, std::optional<protocol::Assignment> assignment);
  // A registry's image for the task, with its owner's login (asked of the server).
  StatusOr<RegistryImages::Ready> PullRegistryImage(const TaskRef& ref, const std::string& image,
                                                    const std::string& runtime, const std::function<bool()>& stopped);
  // Joins the task threads that have returned (never waits on a busy one).
  void ReapWorkers();
  // Stages and starts one assignment; the task's exit if it could not start.
  std::optional<TaskExit> Launch(const TaskRef& ref, const protocol::Assignment& assignment, LocalTask* t);
  // The final uploads; "" or what could not be uploaded.
  std::string FinalUploads(const LocalTask& t, std::string* synced);
  std::string SyncedPath(const TaskRef& ref) const;
  // Ships what is new of a task's log or metrics, within *budget bytes (which
  // it lowers); true once everything there is to ship is shipped.
  bool ShipOutput(TaskOutput what, LocalTask& t, int64_t* shipped, int64_t* budget);
  // A tick's reports in one call (or a few, past protocol::kMaxReportsPerBody):
  // a result per report, fewer when a call failed (those go again next tick).
  std::vector<protocol::TaskReportResult> SendReports(int64_t node, const protocol::TaskReports& batch);
  void LogTimeline(const std::string& key, const LocalTask::Timeline& t) const;
  // Tells the server the task is "staging", "pulling", "starting" or
  // "uploading" (its timeline), with the next tick's reports; best effort.
  void ReportPhase(const LocalTask& t, const char* phase);
  // A janitor's thread: what a reported task held (its files and cgroups,
  // Release; its network, Detach), off the tick's path; drains its queue
  // before Stop returns.
  void DetachLoop();
  void Release(const std::string& key);
  // The monitor's sampling: the node (NodeSampler) and each running task's
  // cgroup, every sample_interval, queued for the next heartbeat.
  void SampleLoop();
  protocol::NodeSample SampleOnce(NodeSampler& sampler);
  // The overlay as the server describes it (register and heartbeat replies):
  // set up once, its tunnels kept in step.
  void ApplyOverlay(const protocol::Overlay& overlay);
  // The silence after which tasks are fenced, ms; 0 = never (or not told yet).
  int64_t FenceWindowMs() const;
  // The server's fencing window, from its answer to a registration or a
  // heartbeat: kept, and on disk for the next agent.
  void AdoptFenceWindow(int64_t ms);
  // The server answered a heartbeat (or a registration) sent at steady `sent_ms`:
  // the fencing clock restarts there, kept on disk for the next agent.
  void NoteContact(int64_t sent_ms);
  // What an earlier agent on this node knew: the fencing window and the last
  // contact (if this boot's), so re-adopted tasks keep counting from it.
  void LoadFencing();
  int64_t SteadyMs() const { return clock_->SteadyMs(); }
  // The task's network (agent_network.cc): its job's namespace on this
  // node, or the overlay's hook, in `launch`; a TaskExit when it cannot run.
  std::optional<TaskExit> PrepareNetwork(const std::string& key, const protocol::Assignment& a, TaskLaunch* launch);
  // The job networks' bridge and table (once; REQUIRES: net_mu_ held).
  Status SetUpJobNetworkLocked();
  // Re-adopted tasks keep their job's namespace; the rest are removed.
  void AdoptJobNetworks(const std::vector<std::pair<std::string, std::string>>& key_and_name);
  // What the overlay and the job's namespace keep for an ended task (its
  // ports, flows); not under mu_.
  void Detach(const std::string& key);
  void SleepFor(std::chrono::milliseconds d);
  // Notebooks (agent_lab.cc): the tunnel's listener, and the socket of a
  // running task's notebook for a ticket that names it.
  void StartLabTunnel();
  StatusOr<UniqueFd> NotebookSocket(int64_t task_id, int64_t attempt);
  std::unique_ptr<LabTunnel> lab_tunnel_;

  const AgentOptions options_;
  const std::unique_ptr<Executor> executor_;
  const client::ApiClient api_;  // for files and images; the protocol goes through control_
  const std::unique_ptr<ControlPlane> control_;
  const Clock* const clock_;
  NodeInventory inventory_;
  std::string address_;
  std::mutex samples_mu_;
  std::deque<protocol::NodeSample> samples_;  // GUARDED_BY(samples_mu_): taken, not yet sent
  // The sampler thread's: each task's CPU time at its last sample (ns, steady ms).
  std::map<std::string, std::pair<int64_t, int64_t>> last_cpu_;

  std::atomic<bool> running_{false};
  std::atomic<bool> abandoned_{false};  // Abandon: no report leaves any more
  bool ever_assigned_ = false;          // GUARDED_BY(mu_)
  std::atomic<int64_t> node_id_{0};
  uint64_t index_ = 0;  // the sync step's: the last assignments answer's
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<TaskRef, LocalTask> tasks_;  // GUARDED_BY(mu_)
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;  // set as RunTask returns
  };
  std::map<TaskRef, Worker> workers_;  // GUARDED_BY(mu_): RunTask threads of tasks_
  std::vector<Worker> zombies_;        // GUARDED_BY(mu_): threads of forgotten tasks, joined once finished
  TaskFiles files_;
  ImageCache images_;
  RegistryImages registry_images_;
  // GUARDED_BY(mu_): reported and forgotten, while the server still lists
  // them (a reply may predate the report); pruned to what it lists.
  std::set<TaskRef> released_;
  uint64_t replies_ = 0;  // GUARDED_BY(mu_): assignment replies reconciled
  bool kick_ = false;     // GUARDED_BY(mu_): a task's thread asks for a tick now
  std::vector<std::pair<TaskRef, std::string>> phases_;  // GUARDED_BY(mu_): for the next tick's reports
  std::mutex detach_mu_;
  std::condition_variable detach_cv_;
  std::deque<std::string> detach_queue_;  // GUARDED_BY(detach_mu_): keys of reported tasks, to release
  bool detach_stop_ = false;              // GUARDED_BY(detach_mu_)
  static constexpr int kJanitors = 4;
  std::vector<std::thread> janitors_;  // set by Start, cleared by Stop (the tick thread reads it between)
  std::thread sync_thread_, tick_thread_, heartbeat_thread_, sample_thread_, fence_thread_;
  std::mutex net_mu_;
  std::unique_ptr<net::Overlay> overlay_;  // GUARDED_BY(net_mu_); null until set up
  std::string overlay_error_;              // GUARDED_BY(net_mu_): why it is not
  std::optional<std::vector<protocol::OverlayPeer>> peers_applied_;  // GUARDED_BY(net_mu_)
  // Set under net_mu_, never reset once set; used without it (JobNetwork is thread-safe).
  std::unique_ptr<net::JobNetwork> job_network_;
  std::string job_network_error_;                 // GUARDED_BY(net_mu_): why it is not
  // Fencing: the server's window, and when it last answered (steady clock, ms).
  std::atomic<int64_t> fence_after_ms_{0};
  std::atomic<int64_t> last_contact_ms_{0};
  std::atomic<int64_t> contact_saved_ms_{0};  // when last_contact was last written to disk
  std::mutex fence_mu_;  // serialises NoteContact and AdoptFenceWindow (and their files)
  bool fenced_ = false;  // GUARDED_BY(mu_): tasks were stopped for it; said once
};

}  // namespace ringmaster::agent
