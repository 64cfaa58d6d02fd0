// ringmaster-sim's engine: replays a trace against a simulated GPU cluster
// with a fake clock, placing gangs with the scheduler's own PlaceGang (best
// fit, all or none) under one queue policy:
//
//   fifo      strict FIFO: the oldest pending job is placed first and blocks
//             everything behind it (the server's --policy fifo).
//   backfill  EASY backfill (Lifka 1995; Slurm's sched/backfill): FIFO, but
//             when the head is blocked it gets a reservation at the earliest
//             time enough GPUs free up (from running jobs' expected ends);
//             later jobs may start now if they end before that time or use
//             only GPUs the head will not need. Looks at most
//             backfill_depth jobs per pass (Slurm's bf_max_job_test: 500).
//   las       discretised 2D least-attained-service (Tiresias, NSDI'19):
//             jobs in priority levels by attained GPU-seconds (thresholds),
//             FIFO within a level, preemptive: a pass starts the highest
//             levels first and preempts running jobs that no longer make the
//             cut. Needs no duration estimates.
//
// Heterogeneous GPUs (Gavel, OSDI'20): with gpu_types the cluster has nodes of
// several GPU types, every job gets a model (seeded, uniformly from the
// throughput table) and runs at its throughput on the slowest type it holds,
// relative to its fastest type: a trace duration is the job's runtime on its
// fastest type. Placement is blind (best fit over every type, gangs may mix
// types) or heterogeneity-aware (the scheduler's option: the fastest type
// with room, one type per gang).
//
// Assumptions, also in docs/scheduler-sim.md: a job with G GPUs is one task
// of G GPUs when G <= gpus_per_node, else G / gpus_per_node tasks of a whole
// node each; backfill's estimates are the trace's real durations (perfect
// estimates, EASY's best case); a preempted job checkpoints before it stops
// and pays restart_overhead_s when it starts again; jobs larger than the
// cluster are skipped and counted. Passes run at arrivals, completions, LAS
// level changes and lease ends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/scheduler.h"
#include "sim/trace.h"

namespace ringmaster::sim {

enum class Policy { kFifo, kBackfill, kLas };
const char* PolicyName(Policy p);
bool ParsePolicy(const std::string& name, Policy* out);

struct SimOptions {
  int nodes = 64;
  int gpus_per_node = 8;
  Policy policy = Policy::kFifo;
  std::vector<double> las_thresholds_gpu_s = {3600, 36000};  // level boundaries in attained GPU-seconds
  int backfill_depth = 500;
  int64_t restart_overhead_s = 30;
  // LAS: a job that (re)started runs at least this long before it can be
  // preempted (a lease, as in Gandiva and Tiresias), so arrivals cannot thrash it.
  int64_t min_run_s = 300;
  // Heterogeneous cluster: (GPU type, nodes of it), each gpus_per_node GPUs;
  // replaces `nodes`. Needs throughputs covering the types.
  std::vector<std::pair<std::string, int>> gpu_types;
  const Throughputs* throughputs = nullptr;
  uint64_t seed = 1;  // assigns models to jobs
  bool heterogeneity_aware = false;
};

struct SimResult {
  std::string policy;
  int64_t jobs = 0;     // completed
  int64_t skipped = 0;  // larger than the whole cluster
  double avg_jct_s = 0, median_jct_s = 0, p95_jct_s = 0;
  double avg_queue_s = 0;  // submission to first start
  double makespan_s = 0;   // first submission to last completion
  double gpu_util = 0;     // busy GPU-seconds / (GPUs x makespan)
  int64_t preemptions = 0;
  int64_t scheduling_passes = 0;
};

// InvalidArgument for gpu_types without throughputs, or a type no model has.
StatusOr<SimResult> Simulate(const std::vector<TraceJob>& trace, const SimOptions& options);

}  // namespace ringmaster::sim
