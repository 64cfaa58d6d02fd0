// Scheduler v0: a pure function from (cluster snapshot, ordered queue) to a
// plan. It does resource fit (cpu, memory, gpu count, gpu type), gang
// placement (all replicas of a job or none), strict FIFO in the given queue
// order, and records for every job it leaves pending why, per node, in words
// a user can act on. No I/O, no clock, no shared state: thread-safe.
//
// Queue discipline: the caller orders the queue (the server uses priority,
// then submission order). A job that fits the cluster's total capacity but
// not its free capacity now blocks every job behind it (strict FIFO, no
// backfill: that comes with the policy framework). A job that could never fit
// even on an empty cluster does not block anyone.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ringmaster::scheduler {

struct Resources {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int gpus = 0;
};

struct NodeState {
  int64_t id = 0;
  std::string name;
  bool ready = true;           // false: heartbeat lost; nothing new is placed there
  Resources capacity;
  Resources allocated;         // held by tasks already placed there
  std::string gpu_model;       // e.g. "NVIDIA H200"; "" when the node has no GPUs
};

struct JobRequest {
  int64_t job_id = 0;
  int replicas = 1;
  Resources per_task;
  std::string gpu_type;  // "" = any; otherwise a case-insensitive substring of the node's gpu_model
};

struct Placement {
  int64_t job_id = 0;
  std::vector<int64_t> node_ids;  // one per replica, in rank order
};

struct Plan {
  std::vector<Placement> placements;
  std::map<int64_t, std::string> pending_reasons;  // job id -> why it stays pending
};

Plan Schedule(const std::vector<NodeState>& nodes, const std::vector<JobRequest>& queue);

// Places one gang on `nodes` (best fit, all or none): on success adds its
// allocation to the nodes and returns the node id of every replica in rank
// order; otherwise leaves `nodes` as they were and returns {}. The building
// block policies (the simulator's FIFO, backfill, LAS) place with.
std::vector<int64_t> PlaceGang(std::vector<NodeState>& nodes, const JobRequest& job);

// "2 x {cpu 1, memory 512Mi, gpu 1 (a100)}"
std::string DescribeRequest(const JobRequest& job);

}  // namespace ringmaster::scheduler
