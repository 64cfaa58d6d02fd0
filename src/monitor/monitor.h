// Monitor: the server's side of the metrics pipeline. It takes the samples
// agents send with their heartbeats and the trainer metrics tasks write,
// keeps them as series in the embedded SeriesStore, remembers the latest of
// each (what /metrics, `ringmaster top` and the load-aware score read), and
// answers the questions the control plane asks of measured use: a job's use
// of a resource over a window (the autoscaler), which rank is a straggler,
// which job sits on idle devices. Series keys:
//   node/<id>/{cpu,memory_bytes,disk_used_bytes,disk_read_bps,disk_write_bps,net_rx_bps,net_tx_bps}
//   node/<id>/gpu/<index>/{util,memory_bytes,power_w,temperature_c}
//   task/<id>/{cpu_cores,memory_bytes,pids,oom_kills,gpu_util,step_time_s,samples_per_s}
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "protocol/samples.h"
#include "monitor/series_store.h"

namespace ringmaster::monitor {

struct MonitorOptions {
  SeriesStoreOptions series;
  // A rank is a straggler when its step time is above straggler_factor x
  // the gang's median (the lower median for an even count) in each of
  // straggler_windows consecutive windows of straggler_window_ms.
  double straggler_factor = 1.5;
  int straggler_windows = 3;
  int64_t straggler_window_ms = 10'000;
  // A job holding GPUs (or, without GPUs, CPUs) is idle when their use stays
  // under idle_below for idle_for_ms.
  double idle_below = 0.05;
  int64_t idle_for_ms = 10 * 60'000;
};

// What the monitor needs to know of a running job (the control plane's view).
struct RunningTask {
  int64_t task_id = 0;
  int rank = 0;
  int64_t node_id = 0;
  int64_t cpu_milli = 0;  // what it holds
  int64_t memory_bytes = 0;
  int gpus = 0;
};
struct RunningGang {
  int64_t job_id = 0;
  int64_t running_since_ms = 0;  // when every task was running (wall clock)
  std::vector<RunningTask> tasks;
};

// A change in what is flagged on a job: raised (set) or cleared.
struct Finding {
  int64_t job_id = 0;
  std::string kind;  // "straggler" | "idle"
  int rank = -1;     // the straggler's rank
  bool set = true;
  std::string message;
};

class Monitor {
 public:
  explicit Monitor(MonitorOptions options = {});

  // An agent's samples for its node. Tasks not in `tasks_here` (the tasks the
  // server placed on the node) are ignored: an agent speaks for its own only.
  void IngestNode(int64_t node_id, const std::vector<protocol::NodeSample>& samples, const std::set<int64_t>& tasks_here);
  // A task's trainer metrics record ({"step_time_s": ..., "samples_per_s": ...}),
  // received at `t_ms` (the record's time_ms if it is within the 5 minutes
  // before). Only those two fields are kept as series.
  void IngestTrainer(int64_t task_id, int64_t t_ms, const nlohmann::json& record);

  // The latest sample of a node (nullopt if none within max_age_ms of now_ms).
  std::optional<protocol::NodeSample> LatestNode(int64_t node_id, int64_t now_ms, int64_t max_age_ms) const;
  // The latest sample of a task.
  std::optional<protocol::TaskSample> LatestTask(int64_t task_id, int64_t now_ms, int64_t max_age_ms) const;
  // The node's mean GPU utilisation over the window (0..1), nullopt if it has
  // no GPU samples; likewise CPU.
  std::optional<double> NodeGpuUtil(int64_t node_id, int64_t since_ms) const;
  std::optional<double> NodeCpuUtil(int64_t node_id, int64_t since_ms) const;

  // A gang's measured use since `since_ms`, in percent: "cpu" (CPU time over
  // the CPUs it holds), "memory" (over the memory it holds), "gpu" (its GPUs'
  // utilisation) — the mean over its tasks, nullopt unless every task was
  // measured — or "samples_per_s" (the sum of each reporting rank's mean;
  // nullopt when none reports).
  std::optional<double> GangUse(const RunningGang& gang, const std::string& metric, int64_t since_ms) const;

  // Stragglers and idle allocations of the running gangs, as changes from
  // what was flagged before (each flag is raised once and cleared once; the
  // flags of a job that is no longer running are forgotten without a change).
  // Also forgets the latest samples of tasks silent for 5 minutes.
  std::vector<Finding> Evaluate(const std::vector<RunningGang>& gangs, int64_t now_ms);
  // What is flagged on a job now.
  std::vector<Finding> Flags(int64_t job_id) const;
  // Forgets an ended job's flags and its tasks' series.
  void ForgetJob(int64_t job_id, const std::vector<int64_t>& task_ids);

  SeriesStore& series() { return series_; }
  const SeriesStore& series() const { return series_; }
  const MonitorOptions& options() const { return options_; }
  uint64_t samples_ingested() const;

 private:
  const MonitorOptions options_;
  SeriesStore series_;
  mutable std::mutex mu_;
  std::map<int64_t, protocol::NodeSample> latest_node_;  // GUARDED_BY(mu_): without tasks
  struct LatestTaskSample {
    protocol::TaskSample sample;
    int64_t t_ms = 0;
  };
  std::map<int64_t, LatestTaskSample> latest_task_;  // GUARDED_BY(mu_)
  std::map<int64_t, std::map<std::string, Finding>> flags_;  // GUARDED_BY(mu_): job -> key -> flag
  uint64_t samples_ = 0;  // GUARDED_BY(mu_)
};

}  // namespace ringmaster::monitor
