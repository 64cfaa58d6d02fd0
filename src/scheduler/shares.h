// Quotas and fair shares: what each user is guaranteed, what their running
// jobs hold, and which of those jobs are past it: the only jobs another
// user's job may preempt. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "scheduler/scheduler.h"

namespace ringmaster::scheduler {

struct Usage {
  int64_t cpu_milli = 0;
  int64_t gpus = 0;
  Usage& operator+=(const Usage& o) {
    cpu_milli += o.cpu_milli;
    gpus += o.gpus;
    return *this;
  }
};

bool Exceeds(const Quota& q, const Usage& u);
Usage Total(const JobRequest& j);
// "user alice holds 1 of 1 gpus and 1 of 4 cpus"
std::string DescribeQuota(const std::string& user, const Quota& q, const Usage& u);

// The share of a user without a quota: the ready nodes split evenly (rounded
// up) among the users with jobs running or waiting.
Quota FairShare(const Snapshot& snap, const std::vector<JobRequest>& pending);

struct Shares {
  Quota fair;                             // of each user without a quota
  std::map<std::string, Usage> usage;     // by user: what their running jobs hold
  std::map<int64_t, std::string> beyond;  // running job -> why another user's job may reclaim it
};
Shares CountShares(const SchedulerConfig& config, const Snapshot& snap, const std::vector<JobRequest>& pending);

}  // namespace ringmaster::scheduler
