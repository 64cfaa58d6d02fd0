// The scheduler: a pure function from (cluster snapshot, pending queue, clock
// reading) to a plan — which gangs start where, which running jobs are
// preempted for whom, and, for every job left pending, why, per node, in
// words a user can act on. No I/O, no shared state: a Scheduler is immutable
// after Create and thread-safe.
//
// It is assembled by name from a SchedulerConfig, like the Kubernetes
// scheduler framework's profiles: Filter plugins say whether one replica may
// go on a node, Score plugins rank the nodes that pass (plugins.h), and one
// queue Policy orders the queue and says who may preempt whom (policy.h).
// Gangs are all or none. Per-user quotas guarantee a share; idle quota may be
// borrowed and is reclaimed by preemption. A user without a quota is
// guaranteed a fair share instead; a job preempts another user's job only to
// reclaim one of these, never for its priority. With heterogeneity_aware, a job
// that accepts several GPU types goes on the type it runs fastest on.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ringmaster::scheduler {

struct Resources {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int gpus = 0;
};

struct NodeState {
  int64_t id = 0;
  std::string name;
  bool ready = true;           // false: heartbeat lost, or cordoned; nothing new is placed there
  std::string cordoned;        // not ready for an admin: "cordoned: <why>", "draining"; "" = not
  Resources capacity;
  Resources allocated;         // held by tasks already placed there
  std::string gpu_model;       // e.g. "NVIDIA H200"; "" when the node has no GPUs
  std::map<std::string, std::string> labels;
  // What its agent runs tasks with ("process", "runc", "docker"); empty = {"process"}.
  std::vector<std::string> executors;
  bool overlay = false;  // its agent has a container overlay (agent --network vxlan|ovs-gre)
  // Resources by identity, taken inside the plan like Nomad's dynamic ports
  // (pools.h). Left at their defaults (the simulator's nodes) none is taken.
  int port_lo = 0, port_hi = -1;  // its port range; empty (hi < lo): its tasks get port 0
  std::set<int> ports_used;
  bool gpu_indices = false;   // GPUs by index: 0..capacity.gpus-1 less gpus_used
  std::set<int> gpus_used;
  std::string overlay_network;  // the overlay's mode ("vxlan", "ovs-gre"): a gang joins one only
  uint32_t address_first = 0;   // its overlay block's task addresses: [first, first + count)
  int address_count = 0;
  std::set<uint32_t> addresses_used;
  // Measured use (heartbeats), 0..1: what the load-aware score looks at.
  double cpu_util = 0;
  double memory_util = 0;
  double gpu_util = 0;
};

struct JobRequest {
  int64_t job_id = 0;
  int replicas = 1;
  Resources per_task;
  // Accepted GPU types, any of them; each a case-insensitive substring of a
  // node's gpu_model. Empty: any node.
  std::vector<std::string> gpu_types;
  std::map<std::string, std::string> node_selector;  // labels the node must have
  // Executors that may run it, any of them (a job with an image: runc or
  // docker; without: process; or the one its spec pins). Empty: any node.
  std::vector<std::string> executors;
  bool needs_overlay = false;  // `network: overlay`: only nodes with a container overlay
  // Its replicas take an overlay address each where every node of the gang
  // is on one overlay (and runs runc); with needs_overlay, nowhere else.
  bool joins_overlay = false;
  std::string user;
  int priority = 0;
  int64_t submit_ms = 0;
  // Relative training speed per GPU type (e.g. {"v100": 3.1, "k80": 1}):
  // what heterogeneity-aware placement ranks the types by.
  std::map<std::string, double> throughput;
  // LAS: device-seconds this job has received (GPU-seconds, or CPU-seconds
  // for CPU-only jobs), over all its runs.
  double attained_service_s = 0;
  // Backfill: how long a run is expected to take (its time limit); 0 = unknown.
  int64_t expected_runtime_ms = 0;
  // Placed by measured use alone (the load-aware score, with what the gang
  // adds to each node): an elastic job that scales on measured use grows
  // onto the least-loaded nodes and leaves the most loaded when it shrinks.
  bool rank_by_measured_use = false;
};

// What one replica holds on its node by identity (0 / empty: none).
struct ReplicaSlot {
  int port = 0;
  std::vector<int> gpus;  // GPU indices
  uint32_t address = 0;   // overlay address, host byte order
  bool operator==(const ReplicaSlot&) const = default;
};

struct RunningJob {
  JobRequest request;
  std::vector<int64_t> node_ids;  // one per replica
  int64_t started_ms = 0;         // this run's start
  int64_t last_checkpoint_ms = 0; // 0 = none in this run
  bool stopping = false;          // already told to stop: its resources free up soon
  std::vector<ReplicaSlot> slots; // what each replica holds by identity (empty: nothing)
};

// Quotas guarantee a user a share; -1 = unlimited. A job beyond its user's
// quota may borrow idle capacity (if `borrow`), and a job within quota may
// preempt borrowers to take its share back. A user without one has a fair
// share: the ready nodes split evenly among the users with jobs.
struct Quota {
  int64_t cpu_milli = -1;
  int gpus = -1;
  bool borrow = true;
};

struct SchedulerConfig {
  std::string policy = "backfill";  // fifo | priority | backfill | las
  std::vector<std::string> filters = {"health", "gpu-type", "labels", "executor", "resources"};
  std::vector<std::pair<std::string, double>> scores = {{"binpack", 1}, {"locality", 1}, {"load-aware", 0.5}};
  bool preemption = true;
  bool heterogeneity_aware = false;
  std::map<std::string, Quota> quotas;  // by user; users not listed are unlimited
  // How many feasible nodes to score per replica: 0 = adaptive as in
  // Kubernetes' percentageOfNodesToScore (all below 100 nodes, then 50% falling
  // to 5%, at least 100); a negative value scores every node.
  int nodes_to_score = 0;
  // LAS (Tiresias' discretised 2D-LAS): level boundaries in device-seconds,
  // and how long a (re)started job runs before it may be preempted again.
  std::vector<double> las_thresholds_s = {3600, 36000};
  int64_t las_min_run_ms = 300'000;
  int backfill_depth = 500;  // jobs looked at behind a blocked head (Slurm's bf_max_job_test)
};

struct Snapshot {
  int64_t now_ms = 0;
  std::vector<NodeState> nodes;
  std::vector<RunningJob> running;
};

struct Placement {
  int64_t job_id = 0;
  std::vector<int64_t> node_ids;  // one per replica, in rank order
  bool borrowing = false;         // beyond its user's quota: the first to be reclaimed
  std::vector<ReplicaSlot> slots; // per replica, in rank order: its port, GPUs, address
};

struct Preemption {
  int64_t job_id = 0;   // the victim: told to checkpoint and stop, then requeued
  int64_t for_job = 0;  // the job it makes room for
  double lost_work_s = 0;  // device-seconds since its last checkpoint
  std::string reason;
};

struct Plan {
  std::vector<Placement> placements;
  std::vector<Preemption> preemptions;
  std::map<int64_t, std::string> pending_reasons;  // job id -> why it stays pending
  std::vector<int64_t> queue_order;  // the pending jobs' ids in the order the policy tried them
};

class FilterPlugin;
class ScorePlugin;
class Policy;

class Scheduler {
 public:
  // InvalidArgument naming the field for an unknown policy or plugin.
  static StatusOr<std::unique_ptr<Scheduler>> Create(const SchedulerConfig& config);
  ~Scheduler();

  Plan Schedule(const Snapshot& snapshot, const std::vector<JobRequest>& pending) const;

  // Places one gang (all or none) with this scheduler's filters and scores: on
  // success adds its allocation to `nodes` and returns the node id of every
  // replica in rank order; otherwise leaves `nodes` as they were and returns {}.
  std::vector<int64_t> PlaceGang(std::vector<NodeState>& nodes, const JobRequest& job) const;

  class Pass;
  // PlaceGang for a caller that places many gangs on one set of nodes (the
  // simulator): static-filter results are kept between calls. REQUIRES:
  // `facts` outlives the Placer and its nodes' health, GPU models and labels
  // do not change (allocations may).
  class Placer {
   public:
    Placer(Placer&&) noexcept;
    ~Placer();
    std::vector<int64_t> PlaceGang(std::vector<NodeState>& nodes, const JobRequest& job);

   private:
    friend class Scheduler;
    explicit Placer(std::unique_ptr<Pass> pass);
    std::unique_ptr<Pass> pass_;
  };
  Placer NewPlacer(const std::vector<NodeState>& facts) const;

  const SchedulerConfig& config() const { return config_; }

 private:
  explicit Scheduler(SchedulerConfig config);
  // The running jobs `job` should preempt to fit on `future` (the nodes once
  // stopping jobs are gone): fewest needed, least lost work first.
  // Other users' jobs only where `within_share` and they are `beyond_share`
  // (job id -> why they may be reclaimed); the same user's by the policy.
  std::vector<Preemption> ChooseVictims(Pass& pass, const Snapshot& snap, const std::vector<NodeState>& future,
                                        const JobRequest& job, bool within_share,
                                        const std::map<int64_t, std::string>& beyond_share,
                                        const std::set<int64_t>& going) const;

  SchedulerConfig config_;
  std::vector<std::unique_ptr<FilterPlugin>> static_filters_;   // node facts only: evaluated once per job shape
  std::vector<std::unique_ptr<FilterPlugin>> dynamic_filters_;  // also look at allocations
  std::vector<std::unique_ptr<FilterPlugin>> pool_filters_;     // ports, GPU indices, addresses (pools.h)
  std::vector<std::pair<std::unique_ptr<ScorePlugin>, double>> scores_;
  std::unique_ptr<Policy> policy_;
};

// "2 x {cpu 1, memory 512Mi, gpu 1 (a100|h100)}"
std::string DescribeRequest(const JobRequest& job);

// The devices one task holds: GPUs, or CPU cores for a CPU-only task. Lost
// work and attained service are counted in device-seconds.
double Devices(const Resources& per_task);
// Devices(per_task) times replicas: a whole job's device-seconds per second.
double DeviceWeight(const JobRequest& job);

}  // namespace ringmaster::scheduler
