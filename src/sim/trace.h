// GPU-cluster traces for the simulator. The Philly trace (Microsoft, 2017,
// as preprocessed for Pollux): timestamp,duration,num_gpus,gpu_time,cluster
// with rows in no particular order; see ../shared/traces/README.md.
#pragma once

#include <cstdint>
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

}  // namespace ringmaster::sim
