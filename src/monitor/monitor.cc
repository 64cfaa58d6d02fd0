#include "monitor/monitor.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace ringmaster::monitor {

namespace {

std::string NodeKey(int64_t node, const char* name) { return fmt::format("node/{}/{}", node, name); }
std::string GpuKey(int64_t node, int gpu, const char* name) { return fmt::format("node/{}/gpu/{}/{}", node, gpu, name); }
std::string TaskKey(int64_t task, const char* name) { return fmt::format("task/{}/{}", task, name); }

// The lower median: with two ranks, the faster one's (the gang's typical rank).
double LowerMedian(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

}  // namespace

Monitor::Monitor(MonitorOptions options) : options_(std::move(options)), series_(options_.series) {}

void Monitor::IngestNode(int64_t node_id, const std::vector<protocol::NodeSample>& samples, const std::set<int64_t>& tasks_here) {
  for (const protocol::NodeSample& s : samples) {
    const int64_t t = s.t_ms;
    series_.Add(NodeKey(node_id, "cpu"), t, s.cpu);
    series_.Add(NodeKey(node_id, "memory_bytes"), t, static_cast<double>(s.memory_used_bytes));
    series_.Add(NodeKey(node_id, "disk_used_bytes"), t, static_cast<double>(s.disk_used_bytes));
    series_.Add(NodeKey(node_id, "disk_read_bps"), t, s.disk_read_bps);
    series_.Add(NodeKey(node_id, "disk_write_bps"), t, s.disk_write_bps);
    series_.Add(NodeKey(node_id, "net_rx_bps"), t, s.net_rx_bps);
    series_.Add(NodeKey(node_id, "net_tx_bps"), t, s.net_tx_bps);
    for (const protocol::GpuSample& g : s.gpus) {
      series_.Add(GpuKey(node_id, g.index, "util"), t, g.util);
      series_.Add(GpuKey(node_id, g.index, "memory_bytes"), t, static_cast<double>(g.memory_used_bytes));
      series_.Add(GpuKey(node_id, g.index, "power_w"), t, g.power_w);
      series_.Add(GpuKey(node_id, g.index, "temperature_c"), t, g.temperature_c);
    }
    for (const protocol::TaskSample& x : s.tasks) {
      if (!tasks_here.count(x.task_id)) continue;
      if (x.cpu_cores >= 0) series_.Add(TaskKey(x.task_id, "cpu_cores"), t, x.cpu_cores);
      if (x.memory_bytes >= 0) series_.Add(TaskKey(x.task_id, "memory_bytes"), t, static_cast<double>(x.memory_bytes));
      if (x.pids >= 0) series_.Add(TaskKey(x.task_id, "pids"), t, static_cast<double>(x.pids));
      if (x.oom_kills >= 0) series_.Add(TaskKey(x.task_id, "oom_kills"), t, static_cast<double>(x.oom_kills));
      if (x.gpu_util >= 0) series_.Add(TaskKey(x.task_id, "gpu_util"), t, x.gpu_util);
    }
  }
  if (samples.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  samples_ += samples.size();
  const protocol::NodeSample& last = samples.back();
  protocol::NodeSample& held = latest_node_[node_id];
  if (last.t_ms < held.t_ms) return;
  held = last;
  held.tasks.clear();
  for (const protocol::TaskSample& x : last.tasks) {
    if (tasks_here.count(x.task_id)) latest_task_[x.task_id] = {x, last.t_ms};
  }
}

void Monitor::IngestTrainer(int64_t task_id, int64_t t_ms, const nlohmann::json& record) {
  // The record's own time (the trainer's time_ms) when it is near the
  // server's: records shipped late still land where they belong.
  if (auto it = record.find("time_ms"); it != record.end() && it->is_number_integer()) {
    const int64_t at = it->get<int64_t>();
    if (at <= t_ms && at > t_ms - 5 * 60'000) t_ms = at;  // no subtraction of what the task wrote
  }
  for (const char* name : {"step_time_s", "samples_per_s"}) {
    auto it = record.find(name);
    if (it == record.end() || !it->is_number()) continue;
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < 0 || v > 1e12) continue;
    series_.Add(TaskKey(task_id, name), t_ms, v);
  }
}

std::optional<protocol::NodeSample> Monitor::LatestNode(int64_t node_id, int64_t now_ms, int64_t max_age_ms) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = latest_node_.find(node_id);
  if (it == latest_node_.end() || now_ms - it->second.t_ms > max_age_ms) return std::nullopt;
  return it->second;
}

std::optional<protocol::TaskSample> Monitor::LatestTask(int64_t task_id, int64_t now_ms, int64_t max_age_ms) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = latest_task_.find(task_id);
  if (it == latest_task_.end() || now_ms - it->second.t_ms > max_age_ms) return std::nullopt;
  return it->second.sample;
}

std::optional<double> Monitor::NodeGpuUtil(int64_t node_id, int64_t since_ms) const {
  double sum = 0;
  int n = 0;
  for (const std::string& key : series_.Keys(fmt::format("node/{}/gpu/", node_id))) {
    if (key.size() < 5 || key.compare(key.size() - 5, 5, "/util") != 0) continue;
    if (auto m = series_.Mean(key, since_ms)) {
      sum += *m;
      ++n;
    }
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

std::optional<double> Monitor::NodeCpuUtil(int64_t node_id, int64_t since_ms) const {
  return series_.Mean(NodeKey(node_id, "cpu"), since_ms);
}

std::optional<double> Monitor::GangUse(const RunningGang& gang, const std::string& metric, int64_t since_ms) const {
  if (gang.tasks.empty()) return std::nullopt;
  if (metric == "samples_per_s") {
    // The ranks that report it (ringmaster-train: rank 0, for the whole gang), summed.
    double sum = 0;
    int reported = 0;
    for (const RunningTask& t : gang.tasks) {
      if (auto v = series_.Mean(TaskKey(t.task_id, "samples_per_s"), since_ms)) {
        sum += *v;
        ++reported;
      }
    }
    if (reported == 0) return std::nullopt;
    return sum;
  }
  double sum = 0;
  for (const RunningTask& t : gang.tasks) {
    std::optional<double> v;
    if (metric == "cpu") {
      auto m = series_.Mean(TaskKey(t.task_id, "cpu_cores"), since_ms);
      if (m && t.cpu_milli > 0) v = 100.0 * *m / (static_cast<double>(t.cpu_milli) / 1000.0);
    } else if (metric == "memory") {
      auto m = series_.Mean(TaskKey(t.task_id, "memory_bytes"), since_ms);
      if (m && t.memory_bytes > 0) v = 100.0 * *m / static_cast<double>(t.memory_bytes);
    } else if (metric == "gpu") {
      auto m = series_.Mean(TaskKey(t.task_id, "gpu_util"), since_ms);
      if (m) v = 100.0 * *m;
    }
    if (!v) return std::nullopt;  // every task measured, or no verdict
    sum += *v;
  }
  return sum / static_cast<double>(gang.tasks.size());
}

std::vector<Finding> Monitor::Evaluate(const std::vector<RunningGang>& gangs, int64_t now_ms) {
  std::map<int64_t, std::map<std::string, Finding>> now_flags;
  for (const RunningGang& g : gangs) {
    auto& flags = now_flags[g.job_id];
    // Stragglers: the last straggler_windows complete windows, each rank's mean step time.
    const int64_t w = options_.straggler_window_ms;
    const int windows = options_.straggler_windows;
    if (g.tasks.size() >= 2 && w > 0 && windows > 0) {
      const int64_t end = now_ms / w * w;  // the current window is not complete
      const int64_t begin = end - windows * w;
      // [rank][window] means; a missing one rules that window out.
      std::vector<std::vector<double>> means(g.tasks.size(), std::vector<double>(static_cast<size_t>(windows), NAN));
      for (size_t r = 0; r < g.tasks.size(); ++r) {
        for (const Point& p : series_.Query(TaskKey(g.tasks[r].task_id, "step_time_s"), begin, w)) {
          if (p.t_ms < begin || p.t_ms >= end) continue;
          means[r][static_cast<size_t>((p.t_ms - begin) / w)] = p.avg;
        }
      }
      std::vector<double> medians(static_cast<size_t>(windows), NAN);
      for (size_t k = 0; k < static_cast<size_t>(windows); ++k) {
        std::vector<double> col;
        for (const auto& m : means) {
          if (!std::isnan(m[k])) col.push_back(m[k]);
        }
        if (col.size() == g.tasks.size()) medians[k] = LowerMedian(col);
      }
      for (size_t r = 0; r < g.tasks.size(); ++r) {
        bool slow = true;
        double ratio = INFINITY;
        for (size_t k = 0; k < static_cast<size_t>(windows) && slow; ++k) {
          slow = !std::isnan(medians[k]) && medians[k] > 0 && means[r][k] > options_.straggler_factor * medians[k];
          if (slow) ratio = std::min(ratio, means[r][k] / medians[k]);
        }
        if (!slow) continue;
        const int rank = g.tasks[r].rank;
        Finding f{g.job_id, "straggler", rank, true,
                  fmt::format("straggler: rank {} steps in {:.3g} s, {:.1f}x the gang's median {:.3g} s, over {} windows "
                              "of {} s (threshold {}x)",
                              rank, means[r][static_cast<size_t>(windows) - 1], ratio, medians[static_cast<size_t>(windows) - 1],
                              windows, w / 1000, options_.straggler_factor)};
        flags[fmt::format("straggler/{}", rank)] = f;
      }
    }
    // Idle allocations: the devices it holds, used under idle_below all along idle_for_ms.
    const int64_t span = options_.idle_for_ms;
    if (span > 0 && g.running_since_ms > 0 && now_ms - g.running_since_ms >= span) {
      int gpus = 0;
      for (const RunningTask& t : g.tasks) gpus += t.gpus;
      const std::string metric = gpus > 0 ? "gpu" : "cpu";
      const int64_t since = now_ms - span;
      // Each task must have been measured since the window began, or there is no verdict.
      bool covered = true;
      for (const RunningTask& t : g.tasks) {
        auto pts = series_.Query(TaskKey(t.task_id, gpus > 0 ? "gpu_util" : "cpu_cores"), since, 0);
        covered = covered && !pts.empty() && pts.front().t_ms <= since + span / 5;
      }
      auto use = covered ? GangUse(g, metric, since) : std::nullopt;
      if (use && *use < 100 * options_.idle_below) {
        flags["idle"] = Finding{g.job_id, "idle", -1, true,
                                fmt::format("idle: its {} {:.1f}% used over the last {} s (threshold {:.0f}%)",
                                            gpus == 1   ? std::string("1 GPU is")
                                            : gpus > 1 ? fmt::format("{} GPUs are", gpus)
                                                       : std::string("CPUs are"),
                                            *use,
                                            span / 1000, 100 * options_.idle_below)};
      }
    }
  }

  std::vector<Finding> changes;
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [job, flags] : now_flags) {
    auto& held = flags_[job];
    for (auto& [key, f] : flags) {
      if (!held.count(key)) changes.push_back(f);
      held[key] = f;
    }
    for (auto it = held.begin(); it != held.end();) {
      if (flags.count(it->first)) {
        ++it;
        continue;
      }
      Finding cleared = it->second;
      cleared.set = false;
      cleared.message = cleared.kind == "straggler" ? fmt::format("straggler cleared: rank {} keeps pace again", cleared.rank)
                                                    : std::string("idle cleared: its devices are in use again");
      changes.push_back(cleared);
      it = held.erase(it);
    }
  }
  // Jobs no longer running keep no flags (their view shows none: api_jobs.cc).
  for (auto it = flags_.begin(); it != flags_.end();) {
    it = now_flags.count(it->first) ? std::next(it) : flags_.erase(it);
  }
  // Latest samples of tasks that have not reported for a while (ended) go.
  for (auto it = latest_task_.begin(); it != latest_task_.end();) {
    it = now_ms - it->second.t_ms > 5 * 60'000 ? latest_task_.erase(it) : std::next(it);
  }
  return changes;
}

std::vector<Finding> Monitor::Flags(int64_t job_id) const {
  std::vector<Finding> out;
  std::lock_guard<std::mutex> l(mu_);
  auto it = flags_.find(job_id);
  if (it == flags_.end()) return out;
  for (const auto& [key, f] : it->second) out.push_back(f);
  return out;
}

void Monitor::ForgetJob(int64_t job_id, const std::vector<int64_t>& task_ids) {
  {
    std::lock_guard<std::mutex> l(mu_);
    flags_.erase(job_id);
    for (int64_t t : task_ids) latest_task_.erase(t);
  }
  for (int64_t t : task_ids) series_.Erase(fmt::format("task/{}/", t));
}

uint64_t Monitor::samples_ingested() const {
  std::lock_guard<std::mutex> l(mu_);
  return samples_;
}

}  // namespace ringmaster::monitor
