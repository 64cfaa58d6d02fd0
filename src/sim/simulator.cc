#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "scheduler/policy.h"

namespace ringmaster::sim {
namespace {

using scheduler::JobRequest;
using scheduler::NodeState;

struct Job {
  const TraceJob* trace = nullptr;
  JobRequest request;
  double remaining_s = 0;  // work left at full speed (plus restart overheads owed)
  double attained_gpu_s = 0;
  int level = 0;
  bool running = false;
  bool started = false;
  bool done = false;
  double run_since = 0;     // when the current run began
  double first_start = 0;
  double lease_until = 0;   // LAS: not preempted before this (set at every start)
  int64_t epoch = 0;        // bumped on every start and stop: stale heap entries are skipped
  std::vector<int64_t> node_ids;
  double rate = 1;          // work per second where it runs now (1 = its fastest type)
  double slowest_rate = 1;  // on the slowest type it may get: backfill's conservative estimate
  std::vector<double> rate_by_type;  // its rate on each of the cluster's GPU types (0: cannot run there)
};

class Engine {
 public:
  Engine(const std::vector<TraceJob>& trace, const SimOptions& o, const scheduler::Scheduler& sched)
      : o_(o) {
    std::vector<std::pair<std::string, int>> types = o.gpu_types;
    if (types.empty()) types.push_back({"", o.nodes});
    for (size_t t = 0; t < types.size(); ++t) {
      for (int i = 0; i < types[t].second; ++i) {
        NodeState n;
        n.id = static_cast<int64_t>(nodes_.size());
        n.name = "n" + std::to_string(n.id);
        n.capacity = {1'000'000'000, int64_t{1} << 60, o.gpus_per_node};
        n.gpu_model = types[t].first;
        nodes_.push_back(n);
        node_type_.push_back(static_cast<int>(t));
      }
    }
    total_gpus_ = static_cast<int64_t>(nodes_.size()) * o.gpus_per_node;
    free_gpus_ = total_gpus_;
    placer_.emplace(sched.NewPlacer(nodes_));
    // Models with a throughput on at least one of the cluster's types, by name.
    std::vector<const std::map<std::string, double>*> models;
    if (o.throughputs) {
      for (const auto& [name, by_type] : *o.throughputs) {
        if (std::any_of(types.begin(), types.end(), [&](auto& t) { return by_type.count(t.first); })) {
          models.push_back(&by_type);
        }
      }
    }
    std::mt19937_64 rng(o.seed);
    std::uniform_int_distribution<size_t> pick(0, models.empty() ? 0 : models.size() - 1);
    jobs_.resize(trace.size());
    for (size_t i = 0; i < trace.size(); ++i) {
      Job& j = jobs_[i];
      j.trace = &trace[i];
      j.remaining_s = static_cast<double>(trace[i].duration_s);
      const int g = trace[i].gpus;
      j.request.job_id = static_cast<int64_t>(i);
      if (g <= o.gpus_per_node) {
        j.request.replicas = 1;
        j.request.per_task.gpus = g;
      } else {
        j.request.replicas = (g + o.gpus_per_node - 1) / o.gpus_per_node;
        j.request.per_task.gpus = o.gpus_per_node;
      }
      j.rate_by_type.assign(types.size(), 1.0);
      if (models.empty()) continue;
      const auto& by_type = *models[pick(rng)];
      double best = 0;
      for (const auto& t : types) {
        auto it = by_type.find(t.first);
        if (it != by_type.end()) best = std::max(best, it->second);
      }
      j.slowest_rate = 1;
      for (size_t t = 0; t < types.size(); ++t) {
        auto it = by_type.find(types[t].first);
        j.rate_by_type[t] = it == by_type.end() ? 0 : it->second / best;
        if (it == by_type.end()) continue;
        j.request.gpu_types.push_back(types[t].first);
        j.request.throughput[types[t].first] = it->second;
        j.slowest_rate = std::min(j.slowest_rate, j.rate_by_type[t]);
      }
    }
  }

  SimResult Run() {
    size_t next_arrival = 0;
    while (true) {
      double t_arrival = next_arrival < jobs_.size() ? static_cast<double>(jobs_[next_arrival].trace->submit_s)
                                                      : kNever;
      double t_event = events_.empty() ? kNever : events_.top().time;
      double t = std::min(t_arrival, t_event);
      if (t == kNever) break;
      now_ = t;
      bool changed = false;
      while (!events_.empty() && events_.top().time <= now_) {
        Event e = events_.top();
        events_.pop();
        Job& j = jobs_[e.job];
        if (e.kind == Event::kLease) {  // the job may be preempted from now on: look again
          changed = changed || (j.running && j.lease_until <= now_);
          continue;
        }
        if (!j.running || e.epoch != j.epoch) continue;  // stale
        Account(j);
        if (e.kind == Event::kFinish) {
          Finish(j);
        } else {
          Relevel(j);  // crossed a LAS threshold
          ++j.epoch;   // drops this run's other events
          ScheduleEvents(j);
        }
        changed = true;
      }
      while (next_arrival < jobs_.size() && jobs_[next_arrival].trace->submit_s <= now_) {
        Job& j = jobs_[next_arrival++];
        if (static_cast<int64_t>(j.request.replicas) * j.request.per_task.gpus > total_gpus_) {
          ++result_.skipped;
          j.done = true;
          continue;
        }
        pending_.insert(Key(j));
        active_.insert(Key(j));
        changed = true;
      }
      if (changed) Pass();
    }
    return Summarise();
  }

 private:
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  struct Event {
    enum Kind { kFinish, kLevel, kLease } kind;
    double time;
    size_t job;
    int64_t epoch;
    bool operator>(const Event& o) const { return time > o.time; }
  };
  using QueueKey = std::tuple<int, int64_t, size_t>;  // (level, submit, index)

  QueueKey Key(const Job& j) const {
    return {o_.policy == Policy::kLas ? j.level : 0, j.trace->submit_s, static_cast<size_t>(j.request.job_id)};
  }
  int Gpus(const Job& j) const { return j.request.replicas * j.request.per_task.gpus; }

  // Brings a running job's attained service and remaining work up to now.
  void Account(Job& j) {
    const double ran = now_ - j.run_since;
    j.remaining_s -= ran * j.rate;
    j.attained_gpu_s += ran * Gpus(j);
    busy_gpu_s_ += ran * Gpus(j);
    j.run_since = now_;
  }

  // Moves a job to the LAS level its attained service puts it in.
  void Relevel(Job& j) {
    if (o_.policy != Policy::kLas) return;
    const int level = scheduler::LasLevel(o_.las_thresholds_gpu_s, j.attained_gpu_s);  // the server's rule
    if (level == j.level) return;
    active_.erase(Key(j));
    const bool was_pending = pending_.erase(Key(j)) > 0;
    j.level = level;
    active_.insert(Key(j));
    if (was_pending) pending_.insert(Key(j));
  }

  void ScheduleEvents(Job& j) {
    const double to_end = std::max(0.0, j.remaining_s) / j.rate;
    events_.push({Event::kFinish, now_ + to_end, static_cast<size_t>(j.request.job_id), j.epoch});
    if (o_.policy == Policy::kLas && j.level < static_cast<int>(o_.las_thresholds_gpu_s.size())) {
      const double to_next = (o_.las_thresholds_gpu_s[j.level] - j.attained_gpu_s) / Gpus(j);
      if (to_next < to_end) {
        events_.push({Event::kLevel, now_ + std::max(0.0, to_next), static_cast<size_t>(j.request.job_id), j.epoch});
      }
    }
  }

  void Release(Job& j) {
    for (int64_t id : j.node_ids) nodes_[static_cast<size_t>(id)].allocated.gpus -= j.request.per_task.gpus;
    free_gpus_ += Gpus(j);
    j.node_ids.clear();
    j.running = false;
    ++j.epoch;
  }

  void Finish(Job& j) {
    Release(j);
    active_.erase(Key(j));
    j.done = true;
    const double jct = now_ - static_cast<double>(j.trace->submit_s);
    jct_.push_back(jct);
    queue_s_ += j.first_start - static_cast<double>(j.trace->submit_s);
    makespan_end_ = std::max(makespan_end_, now_);
  }

  bool TryStart(Job& j) {
    if (Gpus(j) > free_gpus_) return false;
    auto ids = placer_->PlaceGang(nodes_, j.request);
    if (ids.empty()) return false;
    pending_.erase(Key(j));
    // A gang runs at the pace of its slowest GPU.
    j.rate = 1;
    for (int64_t id : ids) j.rate = std::min(j.rate, j.rate_by_type[static_cast<size_t>(node_type_[static_cast<size_t>(id)])]);
    j.node_ids = std::move(ids);
    free_gpus_ -= Gpus(j);
    j.running = true;
    if (!j.started) {
      j.started = true;
      j.first_start = now_;
    }
    j.run_since = now_;
    ++j.epoch;
    ScheduleEvents(j);
    j.lease_until = now_ + static_cast<double>(o_.min_run_s);
    if (o_.policy == Policy::kLas && o_.min_run_s > 0) {
      events_.push({Event::kLease, j.lease_until, static_cast<size_t>(j.request.job_id), j.epoch});
    }
    running_.insert(static_cast<size_t>(j.request.job_id));
    return true;
  }

  void Preempt(Job& j) {
    Account(j);
    Release(j);
    running_.erase(static_cast<size_t>(j.request.job_id));
    j.remaining_s += static_cast<double>(o_.restart_overhead_s);
    pending_.insert(Key(j));
    Relevel(j);
    ++result_.preemptions;
  }

  void Pass() {
    ++result_.scheduling_passes;
    // running_ also holds jobs that finished since; drop them first.
    for (auto it = running_.begin(); it != running_.end();) {
      it = jobs_[*it].running ? std::next(it) : running_.erase(it);
    }
    switch (o_.policy) {
      case Policy::kFifo: return PassFifo(/*backfill=*/false);
      case Policy::kBackfill: return PassFifo(/*backfill=*/true);
      case Policy::kLas: return PassLas();
    }
  }

  void PassFifo(bool backfill) {
    while (!pending_.empty() && free_gpus_ > 0) {
      Job& head = jobs_[std::get<2>(*pending_.begin())];
      if (!TryStart(head)) break;
    }
    if (!backfill || pending_.empty() || free_gpus_ == 0) return;
    // EASY: the head's reservation ("shadow time") from running jobs' expected ends.
    const Job& head = jobs_[std::get<2>(*pending_.begin())];
    std::vector<std::pair<double, int>> ends;
    // remaining_s is as of run_since (Account runs at a job's own events).
    for (size_t id : running_) {
      ends.push_back({jobs_[id].run_since + jobs_[id].remaining_s / jobs_[id].rate, Gpus(jobs_[id])});
    }
    std::sort(ends.begin(), ends.end());
    int64_t avail = free_gpus_;
    double shadow = kNever;
    for (const auto& [end, g] : ends) {
      avail += g;
      if (avail >= Gpus(head)) {
        shadow = end;
        break;
      }
    }
    int64_t extra = shadow == kNever ? 0 : avail - Gpus(head);  // GPUs free at the shadow time beyond the head's
    int looked = 0;
    for (auto it = std::next(pending_.begin()); it != pending_.end() && free_gpus_ > 0 && looked < o_.backfill_depth;) {
      Job& j = jobs_[std::get<2>(*it)];
      ++it;  // TryStart erases j's key
      ++looked;
      const bool ends_in_time = now_ + j.remaining_s / j.slowest_rate <= shadow;
      if (!ends_in_time && Gpus(j) > extra) continue;
      if (TryStart(j) && !ends_in_time) extra -= Gpus(j);
    }
  }

  void PassLas() {
    // Which jobs should hold GPUs: by (level, submit), greedily, skipping what does not fit.
    int64_t budget = total_gpus_;
    std::vector<size_t> chosen;
    std::set<size_t> keep_running;
    // Jobs still inside their lease keep their GPUs.
    for (size_t id : running_) {
      if (now_ < jobs_[id].lease_until) {
        keep_running.insert(id);
        budget -= Gpus(jobs_[id]);
      }
    }
    for (const QueueKey& k : active_) {
      if (budget == 0) break;
      Job& j = jobs_[std::get<2>(k)];
      if (keep_running.count(std::get<2>(k)) || Gpus(j) > budget) continue;
      budget -= Gpus(j);
      if (j.running) keep_running.insert(std::get<2>(k));
      else chosen.push_back(std::get<2>(k));
    }
    if (chosen.empty()) return;
    std::vector<size_t> victims;
    for (size_t id : running_) {
      if (!keep_running.count(id)) victims.push_back(id);
    }
    for (size_t id : victims) Preempt(jobs_[id]);
    for (size_t id : chosen) TryStart(jobs_[id]);
    // Fragmentation can leave GPUs idle: fill them in order (work conserving).
    for (auto it = pending_.begin(); it != pending_.end() && free_gpus_ > 0;) {
      Job& j = jobs_[std::get<2>(*it)];
      ++it;
      TryStart(j);
    }
  }

  SimResult Summarise() {
    SimResult r = result_;
    r.policy = PolicyName(o_.policy);
    if (o_.heterogeneity_aware) r.policy += "+aware";
    r.jobs = static_cast<int64_t>(jct_.size());
    if (jct_.empty()) return r;
    std::sort(jct_.begin(), jct_.end());
    double sum = 0;
    for (double v : jct_) sum += v;
    r.avg_jct_s = sum / static_cast<double>(jct_.size());
    r.median_jct_s = jct_[jct_.size() / 2];
    r.p95_jct_s = jct_[std::min(jct_.size() - 1, static_cast<size_t>(0.95 * static_cast<double>(jct_.size())))];
    r.avg_queue_s = queue_s_ / static_cast<double>(jct_.size());
    double first = kNever;
    for (const Job& j : jobs_) first = std::min(first, static_cast<double>(j.trace->submit_s));
    r.makespan_s = makespan_end_ - first;
    r.gpu_util = r.makespan_s > 0 ? busy_gpu_s_ / (static_cast<double>(total_gpus_) * r.makespan_s) : 0;
    return r;
  }

  const SimOptions o_;
  std::vector<NodeState> nodes_;
  std::optional<scheduler::Scheduler::Placer> placer_;  // over nodes_; its Scheduler outlives the Engine
  std::vector<int> node_type_;  // index into the cluster's GPU types, per node
  std::vector<Job> jobs_;
  int64_t total_gpus_ = 0;
  int64_t free_gpus_ = 0;
  double now_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::set<QueueKey> pending_;
  std::set<QueueKey> active_;  // pending and running, by (level, submit): LAS's order
  std::set<size_t> running_;
  std::vector<double> jct_;
  double queue_s_ = 0, busy_gpu_s_ = 0, makespan_end_ = 0;
  SimResult result_;
};

}  // namespace

const char* PolicyName(Policy p) {
  switch (p) {
    case Policy::kFifo: return "fifo";
    case Policy::kBackfill: return "backfill";
    case Policy::kLas: return "las";
  }
  return "?";
}

bool ParsePolicy(const std::string& name, Policy* out) {
  for (Policy p : {Policy::kFifo, Policy::kBackfill, Policy::kLas}) {
    if (name == PolicyName(p)) {
      *out = p;
      return true;
    }
  }
  return false;
}

StatusOr<SimResult> Simulate(const std::vector<TraceJob>& trace, const SimOptions& options) {
  if (!options.gpu_types.empty()) {
    if (!options.throughputs) return InvalidArgument("gpu-types: needs --throughputs to give jobs speeds per type");
    for (const auto& [type, count] : options.gpu_types) {
      bool known = false;
      for (const auto& [model, by_type] : *options.throughputs) known = known || by_type.count(type);
      if (!known) return InvalidArgument(fmt::format("gpu-types: no model has a throughput on '{}'", type));
      if (count < 1) return InvalidArgument(fmt::format("gpu-types: '{}' needs at least 1 node", type));
    }
  }
  // The scheduler's own placement: filters and scores by name, best fit.
  scheduler::SchedulerConfig config;
  config.filters = {"gpu-type", "resources"};
  config.scores = {{"binpack", 1}, {"locality", 1}};
  config.heterogeneity_aware = options.heterogeneity_aware;
  auto sched = scheduler::Scheduler::Create(config);
  if (!sched.ok()) return sched.status();
  return Engine(trace, options, **sched).Run();
}

}  // namespace ringmaster::sim
