// The autoscaler (JobService's, under its lock): elastic jobs grow into free
// capacity and shrink for waiting work (cluster thresholds); with
// `autoscale` they grow and shrink on their own measured use; stragglers and
// idle allocations become events on their jobs.
#include <algorithm>

#include <fmt/format.h>

#include "common/log.h"
#include "server/control/snapshot.h"
#include "server/job_service.h"

namespace ringmaster::server {

using protocol::JobSpec;

using store::Job;
using store::State;
using store::StateName;
using store::Task;

namespace {

std::string Percent(const std::string& metric, double v) {
  return metric == "samples_per_s" ? fmt::format("{:.0f} samples/s", v) : fmt::format("{:.0f}%", v);
}

}  // namespace

Status JobService::AutoscaleLocked(std::vector<scheduler::NodeState> nodes, const std::vector<Job>& active,
                                   const std::vector<scheduler::JobRequest>& waiting,
                                   std::map<int64_t, std::string>* reasons, std::set<int64_t>* made_room) {
  const int64_t now = clock_->NowMs();
  struct Elastic {
    Job job;
    std::shared_ptr<const JobSpec> spec;
    scheduler::JobRequest one;  // one replica's request
  };
  std::vector<Elastic> elastic;
  for (const Job& j : active) {
    // `active` was read before this pass resized anything: one resize per job and pass.
    if (j.state != State::kRunning || j.stop_state || resized_this_pass_.count(j.id)) continue;
    auto spec = SpecLocked(j);
    if (!spec.ok() || !(*spec)->elastic()) continue;
    scheduler::JobRequest one = RequestFor(j, **spec, "");
    one.replicas = 1;
    elastic.push_back({j, *spec, one});
  }
  if (elastic.empty()) return Status::Ok();
  // Lowest priority first: the first to shrink, the last to grow.
  std::stable_sort(elastic.begin(), elastic.end(),
                   [](const Elastic& a, const Elastic& b) { return a.job.priority < b.job.priority; });

  // The cluster's allocated share: the larger of CPU and GPU, over ready nodes.
  auto share = [&] {
    double cpu_cap = 0, cpu_used = 0, gpu_cap = 0, gpu_used = 0;
    for (const auto& n : nodes) {
      if (!n.ready) continue;
      cpu_cap += static_cast<double>(n.capacity.cpu_milli);
      cpu_used += static_cast<double>(n.allocated.cpu_milli);
      gpu_cap += n.capacity.gpus;
      gpu_used += n.allocated.gpus;
    }
    double s = cpu_cap > 0 ? cpu_used / cpu_cap : 1.0;
    if (gpu_cap > 0) s = std::max(s, gpu_used / gpu_cap);
    return s;
  };
  if (!waiting.empty()) {
    // Shrink: for each waiting job, in queue order, the lowest-priority elastic job
    // below it that can give back enough replicas, by as few as will do. Above
    // the scale-down threshold, workers beyond min also yield to equal priority.
    // Another user's job yields only then: never for a priority its user picked.
    const bool crowded = share() > options_.elastic_scale_down_above;
    std::set<int64_t> shrunk;
    for (const scheduler::JobRequest& w : waiting) {
      RM_ASSIGN_OR_RETURN(Job wj, store_->GetJob(w.job_id));
      for (Elastic& e : elastic) {
        const bool outranked = (e.job.user_id == wj.user_id && e.job.priority < wj.priority) ||
                               (crowded && e.job.priority <= wj.priority);
        if (shrunk.count(e.job.id) || !outranked || e.job.replicas <= e.spec->min_replicas) continue;
        RM_ASSIGN_OR_RETURN(auto tasks, store_->ListTasks(e.job.id));
        std::sort(tasks.begin(), tasks.end(), [](const Task& a, const Task& b) { return a.rank > b.rank; });
        std::vector<scheduler::NodeState> trial = nodes;
        int give = 0;
        bool fits = false;
        for (const Task& t : tasks) {  // highest ranks go first
          if (e.job.replicas - give <= e.spec->min_replicas) break;
          for (auto& n : trial) {
            if (n.id != t.node_id) continue;
            n.allocated.cpu_milli -= t.cpu_milli;
            n.allocated.memory_bytes -= t.memory_bytes;
            n.allocated.gpus -= t.gpus;
          }
          ++give;
          std::vector<scheduler::NodeState> fit = trial;
          if (!scheduler_->PlaceGang(fit, w).empty()) {
            fits = true;
            break;
          }
        }
        if (!fits) continue;
        const int to = e.job.replicas - give;
        RM_RETURN_IF_ERROR(ResizeLocked(e.job, to, fmt::format("scale down from {} to {} workers for job {} (priority {})",
                                                                e.job.replicas, to, wj.id, wj.priority)));
        (*reasons)[wj.id] = fmt::format("needs {}; job {} is scaling down to make room",
                                        scheduler::DescribeRequest(w), e.job.id);
        made_room->insert(wj.id);
        shrunk.insert(e.job.id);
        break;
      }
    }
    return Status::Ok();
  }

  // Grow: nothing waits. Add replicas while the cluster's allocated share is
  // below the threshold and another replica fits.
  for (auto it = elastic.rbegin(); it != elastic.rend(); ++it) {
    Elastic& e = *it;
    auto last = last_resize_ms_.find(e.job.id);
    const int64_t since = std::max(e.job.started_ms, last == last_resize_ms_.end() ? 0 : last->second);
    if (e.spec->autoscale) continue;  // it grows on its measured use instead
    if (now - since < options_.elastic_cooldown_ms || e.job.replicas >= e.spec->max_replicas) continue;
    const double before = share();
    int add = 0;
    while (e.job.replicas + add < e.spec->max_replicas && share() < options_.elastic_scale_up_below &&
           !scheduler_->PlaceGang(nodes, e.one).empty()) {
      ++add;
    }
    if (add == 0) continue;
    const int to = e.job.replicas + add;
    RM_RETURN_IF_ERROR(ResizeLocked(e.job, to, fmt::format("scale up from {} to {} workers: no job waits and the "
                                                           "cluster was {:.0f}% allocated",
                                                           e.job.replicas, to, 100 * before)));
  }
  return Status::Ok();
}

monitor::RunningGang JobService::GangOf(const Job& job, const std::vector<Task>& placed) const {
  monitor::RunningGang g;
  g.job_id = job.id;
  bool all_running = true;
  for (const Task& t : placed) {
    if (t.job_id != job.id) continue;
    g.tasks.push_back({t.id, t.rank, t.node_id, t.cpu_milli, t.memory_bytes, t.gpus});
    g.running_since_ms = std::max(g.running_since_ms, t.started_ms);
    all_running = all_running && t.state == State::kRunning;
  }
  std::sort(g.tasks.begin(), g.tasks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  // Not all running yet (or not all placed): nothing to measure.
  if (!all_running || static_cast<int>(g.tasks.size()) != job.replicas) g.running_since_ms = 0;
  return g;
}

Status JobService::AutoscaleMeasuredLocked(const std::vector<scheduler::NodeState>& nodes, const std::vector<Job>& active,
                                           const std::vector<Task>& placed, bool anyone_waiting) {
  monitor::Monitor* m = options_.monitor;
  if (!m) return Status::Ok();
  const int64_t now = clock_->NowMs();
  for (const Job& stale : active) {
    if (stale.state != State::kRunning || stale.stop_state) continue;
    auto spec = SpecLocked(stale);
    if (!spec.ok() || !(*spec)->elastic() || !(*spec)->autoscale) continue;
    const JobSpec::Autoscale& as = *(*spec)->autoscale;
    const monitor::RunningGang gang = GangOf(stale, placed);
    if (gang.running_since_ms == 0) continue;  // not all running: nothing to measure yet
    // A whole window of this run, and the cooldown since the last resize.
    auto last = last_resize_ms_.find(stale.id);
    const int64_t since = std::max(gang.running_since_ms, last == last_resize_ms_.end() ? 0 : last->second);
    if (now - gang.running_since_ms < as.window_ms || now - since < as.cooldown_ms) continue;
    auto use = m->GangUse(gang, as.metric, now - as.window_ms);
    if (!use) continue;
    RM_ASSIGN_OR_RETURN(Job job, store_->GetJob(stale.id));  // this pass may have resized it already
    if (job.state != State::kRunning || job.stop_state) continue;
    const std::string window = FormatDuration(as.window_ms);
    // A node's measured load: what the load-aware score reads.
    auto load = [&](const scheduler::NodeState& n) {
      return std::max(n.cpu_util, job.replicas > 0 && (*spec)->gpus > 0 ? n.gpu_util : 0.0);
    };
    if (*use > as.scale_up_above && job.replicas < (*spec)->max_replicas) {
      if (anyone_waiting) continue;  // waiting jobs come first
      scheduler::JobRequest one = RequestFor(job, **spec, "");
      one.replicas = 1;
      // The least-loaded node, by measured use, that fits one more replica.
      const scheduler::NodeState* target = nullptr;
      for (const auto& n : nodes) {
        std::vector<scheduler::NodeState> trial = {n};
        if (!n.ready || scheduler_->PlaceGang(trial, one).empty()) continue;
        if (!target || load(n) < load(*target)) target = &n;
      }
      if (!target) continue;  // no room: it stays as it is
      const int to = job.replicas + 1;
      RM_RETURN_IF_ERROR(ResizeLocked(
          job, to,
          fmt::format("scale up {}\u2192{}: {} {} > {} over {}; the gang restarts with {} ranks placed by measured use "
                      "(least loaded: {}, cpu {:.0f}%{})",
                      job.replicas, to, as.metric, Percent(as.metric, *use), Percent(as.metric, as.scale_up_above), window,
                      to, target->name, 100 * target->cpu_util,
                      (*spec)->gpus > 0 ? fmt::format(", gpu {:.0f}%", 100 * target->gpu_util) : "")));
      std::lock_guard<std::mutex> l(stats_mu_);
      ++stats_.resizes;
    } else if (*use < as.scale_down_below && job.replicas > (*spec)->min_replicas) {
      // The gang restarts placed by measured use: the most-loaded of its
      // nodes is the one it tends to leave (the event names it). Its own
      // past load counts in that measure too (docs/monitoring.md).
      const scheduler::NodeState* busiest = nullptr;
      for (const auto& t : gang.tasks) {
        for (const auto& n : nodes) {
          if (n.id == t.node_id && (!busiest || load(n) > load(*busiest))) busiest = &n;
        }
      }
      const int to = job.replicas - 1;
      RM_RETURN_IF_ERROR(ResizeLocked(
          job, to,
          fmt::format("scale down {}\u2192{}: {} {} < {} over {}; the gang restarts with {} rank{} placed by measured use "
                      "(most loaded of its nodes: {}, cpu {:.0f}%)",
                      job.replicas, to, as.metric, Percent(as.metric, *use), Percent(as.metric, as.scale_down_below),
                      window, to, to == 1 ? "" : "s", busiest ? busiest->name : "?",
                      busiest ? 100 * busiest->cpu_util : 0.0)));
      std::lock_guard<std::mutex> l(stats_mu_);
      ++stats_.resizes;
    }
  }
  return Status::Ok();
}

Status JobService::WatchUsageLocked(const std::vector<Job>& active, const std::vector<Task>& placed, int64_t now) {
  monitor::Monitor* m = options_.monitor;
  if (!m || now - last_usage_eval_ms_ < options_.usage_eval_interval_ms) return Status::Ok();
  last_usage_eval_ms_ = now;
  std::vector<monitor::RunningGang> gangs;
  for (const Job& j : active) {
    if (j.state != State::kRunning || j.stop_state) continue;
    monitor::RunningGang g = GangOf(j, placed);
    if (g.running_since_ms > 0) gangs.push_back(std::move(g));
  }
  for (const monitor::Finding& f : m->Evaluate(gangs, now)) {
    int64_t task_id = 0;
    for (const auto& g : gangs) {
      for (const auto& t : g.tasks) {
        if (g.job_id == f.job_id && t.rank == f.rank) task_id = t.task_id;
      }
    }
    const std::string running = StateName(State::kRunning);
    RM_RETURN_IF_ERROR(store_->AddEvent({0, f.job_id, task_id, f.rank, now, running, running, f.message}));
    spdlog::info("job {}: {}", f.job_id, f.message);
  }
  return Status::Ok();
}

}  // namespace ringmaster::server
