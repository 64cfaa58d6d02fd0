#include "scheduler/shares.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <tuple>

#include <fmt/format.h>

#include "common/units.h"

namespace ringmaster::scheduler {

bool Exceeds(const Quota& q, const Usage& u) {
  return (q.cpu_milli >= 0 && u.cpu_milli > q.cpu_milli) || (q.gpus >= 0 && u.gpus > q.gpus);
}

Usage Total(const JobRequest& j) {
  return {j.per_task.cpu_milli * j.replicas, static_cast<int64_t>(j.per_task.gpus) * j.replicas};
}

std::string DescribeQuota(const std::string& user, const Quota& q, const Usage& u) {
  std::vector<std::string> parts;
  if (q.gpus >= 0) parts.push_back(fmt::format("{} of {} gpus", u.gpus, q.gpus));
  if (q.cpu_milli >= 0) parts.push_back(fmt::format("{} of {} cpus", FormatCpu(u.cpu_milli), FormatCpu(q.cpu_milli)));
  return fmt::format("user {} holds {}", user, fmt::join(parts, " and "));
}

Quota FairShare(const Snapshot& snap, const std::vector<JobRequest>& pending) {
  std::set<std::string_view> users;
  for (const auto& rj : snap.running) users.insert(rj.request.user);
  for (const auto& j : pending) users.insert(j.user);
  int64_t cpu = 0, gpus = 0;
  for (const NodeState& n : snap.nodes) {
    if (!n.ready) continue;
    cpu += n.capacity.cpu_milli;
    gpus += n.capacity.gpus;
  }
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(users.size()));
  return {(cpu + n - 1) / n, static_cast<int>((gpus + n - 1) / n), true};
}

namespace {

// "user alice holds 4 gpus, more than an even share of the cluster (2)"
std::string DescribeFairShare(const std::string& user, const Quota& fair, const Usage& u) {
  std::vector<std::string> parts;
  if (u.gpus > fair.gpus) parts.push_back(fmt::format("{} gpus, more than an even share of the cluster ({})", u.gpus, fair.gpus));
  if (u.cpu_milli > fair.cpu_milli) {
    parts.push_back(fmt::format("{} cpus, more than an even share of the cluster ({})", FormatCpu(u.cpu_milli),
                                FormatCpu(fair.cpu_milli)));
  }
  return fmt::format("user {} holds {}", user, fmt::join(parts, " and "));
}

}  // namespace

Shares CountShares(const SchedulerConfig& config, const Snapshot& snap, const std::vector<JobRequest>& pending) {
  Shares out;
  out.fair = FairShare(snap, pending);
  // A user's jobs count against their share in order (priority, then age):
  // those past it borrow (a quota) or hold more than an even share.
  std::vector<const RunningJob*> by_rank;
  for (const auto& rj : snap.running) by_rank.push_back(&rj);
  std::stable_sort(by_rank.begin(), by_rank.end(), [](auto* a, auto* b) {
    return std::tuple(-a->request.priority, a->started_ms, a->request.job_id) <
           std::tuple(-b->request.priority, b->started_ms, b->request.job_id);
  });
  for (const RunningJob* rj : by_rank) {
    const std::string& user = rj->request.user;
    Usage& u = out.usage[user];
    u += Total(rj->request);
    auto q = config.quotas.find(user);
    if (q != config.quotas.end()) {
      if (Exceeds(q->second, u)) {
        out.beyond[rj->request.job_id] = fmt::format("reclaiming quota: user {} borrows beyond its quota", user);
      }
    } else if (Exceeds(out.fair, u)) {
      out.beyond[rj->request.job_id] = "reclaiming fair share: " + DescribeFairShare(user, out.fair, u);
    }
  }
  return out;
}

}  // namespace ringmaster::scheduler
