// GPU-cluster traces for the simulator. The Philly trace (Microsoft, 2017,
// as preprocessed for Pollux): timestamp,duration,num_gpus,gpu_time,cluster
// with rows in no particular order; see ../shared/traces/README.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::sim {

struct TraceJob {
  int64_t id = 0;        // 1-based, in submit order
  int64_t submit_s = 0;  // seconds since the trace's first submission
  int64_t duration_s = 0;
  int gpus = 1;
  std::string cluster;
};

// Parses a Philly CSV; jobs sorted by submit time (ties: file order).
// InvalidArgument names the line that is malformed.
StatusOr<std::vector<TraceJob>> LoadPhillyTrace(const std::string& path);

// Training throughput per job model and GPU type: model -> type -> steps/s.
using Throughputs = std::map<std::string, std::map<std::string, double>>;

// Reads Gavel's simulation_throughputs.json (OSDI'20): for each GPU type, the
// isolated single-GPU throughput of each model ("null" partner, scale factor
// 1). Co-located pairs and "_unconsolidated" types are ignored. Models with a
// zero throughput on some type cannot run there and are left out of that type.
StatusOr<Throughputs> LoadGavelThroughputs(const std::string& path);

}  // namespace ringmaster::sim
