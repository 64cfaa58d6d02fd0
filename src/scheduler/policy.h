// Queue policies: one class each, chosen by name. A policy orders the pending
// queue and says which of its own user's jobs a job may preempt (other users'
// jobs only to reclaim a quota or fair share: scheduler.cc). Every policy is
// strict at the head except where it backfills around it.
//
//   fifo      submission order; never preempts.
//   priority  higher priority first, then submission order; preempts lower priority.
//   backfill  (the default) priority, plus EASY backfill (Lifka 1995, Slurm's
//             sched/backfill): jobs behind a blocked head start now if they end
//             before its reservation, or use only what it will not need. A job
//             without a time limit is taken to run forever.
//   las       discretised 2D least-attained-service (Tiresias, NSDI'19): levels by
//             attained device-seconds, FIFO within one; preempts higher levels
//             once their lease (las_min_run_ms) is over.
// Stateless and thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "scheduler/scheduler.h"

namespace ringmaster::scheduler {

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view Name() const = 0;
  // Sorts the queue into the order jobs are considered in.
  virtual void Order(std::vector<const JobRequest*>& queue) const = 0;
  // Whether `job` may preempt the running `victim`, a job of the same user.
  virtual bool MayPreempt(const JobRequest& job, const RunningJob& victim, int64_t now_ms) const = 0;
  virtual bool Backfills() const { return false; }
  // Words for why `job` outranks `victim`, e.g. "priority 10 > 0".
  virtual std::string Outranks(const JobRequest& job, const RunningJob& victim) const = 0;
};

// InvalidArgument "policy: ..." for an unknown name.
StatusOr<std::unique_ptr<Policy>> MakePolicy(const SchedulerConfig& config);
std::vector<std::string> PolicyNames();

// LAS level of a job: how many thresholds its attained service has passed.
int LasLevel(const std::vector<double>& thresholds_s, double attained_s);

}  // namespace ringmaster::scheduler
