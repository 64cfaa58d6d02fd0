// Queue policies: one class each, chosen by name. A policy orders the pending
// queue and says who may preempt whom; the scheduler does the rest (filters,
// scores, gangs, quotas, reasons). Every policy is strict at the head: a job
// that could fit the cluster but not its free capacity now holds back the jobs
// behind it, except where the policy backfills around it.
//
//   fifo      submission order; never preempts.
//   priority  higher priority first, then submission order; a job may preempt
//             jobs of lower priority (victims: least work lost since their
//             last checkpoint).
//   backfill  priority order plus EASY backfill (Lifka 1995, Slurm's
//             sched/backfill): the blocked head gets a reservation at the
//             earliest time running jobs' expected ends free enough for it;
//             jobs behind it start now if they end before then or use only
//             what the head will not need. Needs runtimes (time limits); never preempts.
//   las       discretised 2D least-attained-service (Tiresias, NSDI'19): levels
//             by attained device-seconds, FIFO within a level; a job may
//             preempt jobs in a higher level whose lease (las_min_run_ms) is over.
//             Needs no runtime estimates.
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
  // Whether `job` may preempt the running `victim` (quota reclaim aside).
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
