#include "scheduler/policy.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

namespace ringmaster::scheduler {

int LasLevel(const std::vector<double>& thresholds_s, double attained_s) {
  int level = 0;
  for (double th : thresholds_s) level += attained_s >= th - 1e-6;
  return level;
}

namespace {

auto SubmitKey(const JobRequest& j) { return std::tuple(j.submit_ms, j.job_id); }

class FifoPolicy final : public Policy {
 public:
  std::string_view Name() const override { return "fifo"; }
  void Order(std::vector<const JobRequest*>& q) const override {
    std::stable_sort(q.begin(), q.end(), [](auto* a, auto* b) { return SubmitKey(*a) < SubmitKey(*b); });
  }
  bool MayPreempt(const JobRequest&, const RunningJob&, int64_t) const override { return false; }
  std::string Outranks(const JobRequest&, const RunningJob&) const override { return ""; }
};

class PriorityPolicy : public Policy {
 public:
  std::string_view Name() const override { return "priority"; }
  void Order(std::vector<const JobRequest*>& q) const override {
    std::stable_sort(q.begin(), q.end(), [](auto* a, auto* b) {
      return std::tuple(-a->priority, a->submit_ms, a->job_id) < std::tuple(-b->priority, b->submit_ms, b->job_id);
    });
  }
  bool MayPreempt(const JobRequest& job, const RunningJob& victim, int64_t) const override {
    return victim.request.priority < job.priority;
  }
  std::string Outranks(const JobRequest& job, const RunningJob& victim) const override {
    return fmt::format("priority {} > {}", job.priority, victim.request.priority);
  }
};

class BackfillPolicy final : public PriorityPolicy {
 public:
  std::string_view Name() const override { return "backfill"; }
  bool Backfills() const override { return true; }
};

class LasPolicy final : public Policy {
 public:
  LasPolicy(std::vector<double> thresholds_s, int64_t min_run_ms)
      : thresholds_s_(std::move(thresholds_s)), min_run_ms_(min_run_ms) {}
  std::string_view Name() const override { return "las"; }
  void Order(std::vector<const JobRequest*>& q) const override {
    std::stable_sort(q.begin(), q.end(), [this](auto* a, auto* b) {
      return std::tuple(Level(*a), a->submit_ms, a->job_id) < std::tuple(Level(*b), b->submit_ms, b->job_id);
    });
  }
  bool MayPreempt(const JobRequest& job, const RunningJob& victim, int64_t now_ms) const override {
    return Level(victim.request) > Level(job) && now_ms - victim.started_ms >= min_run_ms_;
  }
  std::string Outranks(const JobRequest& job, const RunningJob& victim) const override {
    return fmt::format("LAS level {} (attained {:.0f} device-s) before level {} ({:.0f} device-s)", Level(job),
                       job.attained_service_s, Level(victim.request), victim.request.attained_service_s);
  }

 private:
  int Level(const JobRequest& j) const { return LasLevel(thresholds_s_, j.attained_service_s); }
  const std::vector<double> thresholds_s_;
  const int64_t min_run_ms_;
};

}  // namespace

std::vector<std::string> PolicyNames() { return {"fifo", "priority", "backfill", "las"}; }

StatusOr<std::unique_ptr<Policy>> MakePolicy(const SchedulerConfig& c) {
  if (c.policy == "fifo") return std::unique_ptr<Policy>(new FifoPolicy());
  if (c.policy == "priority") return std::unique_ptr<Policy>(new PriorityPolicy());
  if (c.policy == "backfill") return std::unique_ptr<Policy>(new BackfillPolicy());
  if (c.policy == "las") {
    if (!std::is_sorted(c.las_thresholds_s.begin(), c.las_thresholds_s.end())) {
      return InvalidArgument("las_thresholds: must be increasing");
    }
    return std::unique_ptr<Policy>(new LasPolicy(c.las_thresholds_s, c.las_min_run_ms));
  }
  return InvalidArgument(fmt::format("policy: '{}' is not one of {}", c.policy, fmt::join(PolicyNames(), ", ")));
}

}  // namespace ringmaster::scheduler
