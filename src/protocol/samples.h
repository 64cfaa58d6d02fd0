// What an agent measures on its node each second and sends with its
// heartbeats: the node's CPU, memory, disk and network, each GPU through
// NVML, and each task's cgroup counters. Plain values, their JSON form (the
// wire format), and the parser the server runs on it: an agent's body is
// input like any other, so every count and value is bounded and checked.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace ringmaster::protocol {

struct GpuSample {
  int index = 0;
  double util = 0;  // 0..1, the share of time a kernel ran
  int64_t memory_used_bytes = 0;
  double power_w = 0;
  double temperature_c = 0;
};

// A task's use; a negative value is not known (no cgroup accounting, or no
// interval yet for a rate) and is left out of the wire format and the series.
struct TaskSample {
  int64_t task_id = 0;
  int attempt = 0;
  double cpu_cores = -1;  // CPU time per second, in cores
  int64_t memory_bytes = -1;
  int64_t pids = -1;
  int64_t oom_kills = -1;  // OOM kills in the task's cgroup so far
  double gpu_util = -1;    // 0..1 over the task's GPUs; -1: it has none
};

struct NodeSample {
  int64_t t_ms = 0;    // wall clock, when it was taken
  double cpu = 0;      // 0..1 of the node
  int64_t memory_used_bytes = 0;
  int64_t disk_used_bytes = 0;  // of the file system holding the agent's data dir
  double disk_read_bps = 0;     // bytes per second, all block devices
  double disk_write_bps = 0;
  double net_rx_bps = 0;  // bytes per second, all interfaces but loopback
  double net_tx_bps = 0;
  std::vector<GpuSample> gpus;
  std::vector<TaskSample> tasks;
};

// Bounds on one heartbeat's samples (the agent sends what it took since the
// last one; a longer silence is summarised by what fits).
constexpr size_t kMaxSamplesPerBody = 120;
constexpr size_t kMaxGpusPerSample = 64;
constexpr size_t kMaxTasksPerSample = 2048;

nlohmann::json ToJson(const NodeSample& s);
nlohmann::json ToJson(const std::vector<NodeSample>& samples);
// `samples` as the agent sent it (an array); InvalidArgument naming the
// field when anything is missing, of the wrong type or out of range.
StatusOr<std::vector<NodeSample>> ParseSamples(const nlohmann::json& samples);

}  // namespace ringmaster::protocol
