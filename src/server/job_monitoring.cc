// The scheduler's counters for /metrics and the tasks placed per node
// (split from job_service.cc). The autoscaler is in control/autoscaler.cc.
#include <algorithm>

#include <fmt/format.h>

#include "common/log.h"
#include "server/job_service.h"

namespace ringmaster::server {

using store::Job;
using store::State;
using store::StateName;
using store::Task;

// A pending reason's kind, for /metrics: a label with few values.
std::string PendingReasonKind(const std::string& reason) {
  if (reason.rfind("waiting for ports", 0) == 0) return "ports";
  if (reason.rfind("waiting for GPUs", 0) == 0) return "gpus";
  if (reason.rfind("waiting for the overlay", 0) == 0) return "overlay";
  if (reason.find("scaling down to make room") != std::string::npos) return "elastic_shrink";
  if (reason.find("preempt") != std::string::npos) return "preemption";
  if (reason.find("quota") != std::string::npos) return "quota";
  if (reason.find("no node") != std::string::npos || reason.find("node") != std::string::npos) return "resources";
  return "other";
}

SchedulerStats JobService::Stats() const {
  std::lock_guard<std::mutex> l(stats_mu_);
  SchedulerStats s = stats_;
  s.pass_seconds = pass_seconds_.Snapshot();
  return s;
}

std::shared_ptr<const std::map<int64_t, int>> JobService::QueuePositions() const {
  std::lock_guard<std::mutex> l(stats_mu_);
  return queue_positions_;
}

std::set<int64_t> JobService::TasksOn(int64_t node_id) const {
  std::lock_guard<std::mutex> l(stats_mu_);
  auto it = tasks_on_.find(node_id);
  return it == tasks_on_.end() ? std::set<int64_t>{} : it->second;
}

}  // namespace ringmaster::server
