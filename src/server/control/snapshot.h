// The scheduler's view of the cluster, built from store rows and what the
// server knows live (leases, measured use): pure functions of their
// arguments, no store access, so a pass's input is testable with vectors.
// Ports, GPU indices and overlay addresses in use go in as the nodes' pools.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "net/ipv4.h"
#include "scheduler/scheduler.h"
#include "protocol/job_spec.h"
#include "store/meta_store.h"

namespace ringmaster::server {

// What the server knows of a node beyond its row.
struct NodeLive {
  bool ready = true;                // its lease holds (and no admin cordoned it: see BuildNodeStates)
  std::string cordoned;             // CordonText, "" when not cordoned
  std::optional<double> cpu_util;   // measured over the load window; unset: the heartbeat's
  std::optional<double> gpu_util;
};

// The overlay's address plan (JobServiceOptions).
struct OverlayPlan {
  net::Ipv4Net subnet;
  int block_prefix = 24;
};

// One NodeState per row (`live` in the same order): capacity, what `placed`
// tasks hold there (resources, ports, GPU indices, overlay addresses),
// labels, executors and overlay block.
std::vector<scheduler::NodeState> BuildNodeStates(const std::vector<store::Node>& nodes,
                                                  const std::vector<NodeLive>& live,
                                                  const std::vector<store::Task>& placed, const OverlayPlan& overlay);

// What the scheduler sees of a job (`user`: its owner's name).
scheduler::JobRequest RequestFor(const store::Job& job, const protocol::JobSpec& spec, const std::string& user);

// A running gang as preemption, quotas and LAS see it. `tasks`: its placed
// tasks; `running_since_steady`: when this server saw each start.
struct RunningSnapshot {
  scheduler::RunningJob job;
  bool all_running = false;
  int64_t ran_ms = 0;  // how long the gang has run (what its time limit is checked against)
};
RunningSnapshot BuildRunningJob(scheduler::JobRequest request, std::vector<const store::Task*> tasks, int64_t now_ms,
                            int64_t steady_now_ms, const std::map<int64_t, int64_t>& running_since_steady);

// Device-seconds a task has held from its start up to `until_ms`: what LAS
// counts as attained service.
double TaskService(const store::Task& t, int64_t until_ms);


}  // namespace ringmaster::server
