// GPU-cluster traces for the simulator. The Philly trace (Microsoft, 2017,
// as preprocessed for Pollux): timestamp,duration,num_gpus,gpu_time,cluster
// with rows in no particular order; see data/traces/README.md. The
// parsers take any bytes: a malformed input is an InvalidArgument naming
// where, never an exception or undefined behaviour. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
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

// What a Philly row may hold; anything else is a malformed line. Generous for
// the real trace (its longest job ran about 70 days, its widest took 128
// GPUs) and small enough that the simulator's sums cannot overflow.
constexpr double kMaxTraceDurationS = 1e9;  // about 31 years
constexpr int kMaxTraceGpus = 1 << 16;
constexpr size_t kMaxTraceClusterBytes = 63;

// Parses a Philly CSV: the header line, then one job per line (4 or 5 fields;
// the cluster may be left out; empty lines and \r\n are fine). Jobs sorted by
// submit time (ties: file order). InvalidArgument names the line that is
// malformed and why.
StatusOr<std::vector<TraceJob>> ParsePhillyTrace(std::string_view csv);
// ParsePhillyTrace of the file at `path`; errors start with the path.
StatusOr<std::vector<TraceJob>> LoadPhillyTrace(const std::string& path);

// Training throughput per job model and GPU type: model -> type -> steps/s.
using Throughputs = std::map<std::string, std::map<std::string, double>>;

// Reads Gavel's simulation_throughputs.json (OSDI'20): for each GPU type, the
// isolated single-GPU throughput of each model ("null" partner, scale factor
// 1). Co-located pairs and "_unconsolidated" types are ignored. Models with a
// zero (or non-finite) throughput on some type cannot run there and are left
// out of that type.
StatusOr<Throughputs> ParseGavelThroughputs(std::string_view json);
// ParseGavelThroughputs of the file at `path`; errors start with the path.
StatusOr<Throughputs> LoadGavelThroughputs(const std::string& path);

}  // namespace ringmaster::sim
