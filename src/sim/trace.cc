#include "sim/trace.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ringmaster::sim {

StatusOr<std::vector<TraceJob>> LoadPhillyTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(fmt::format("trace: cannot open {}", path));
  std::string line;
  if (!std::getline(in, line) || line.rfind("timestamp,duration,num_gpus", 0) != 0) {
    return InvalidArgument(fmt::format("{}: line 1 is not the Philly header timestamp,duration,num_gpus,...", path));
  }
  struct Row {
    int64_t t;
    size_t order;
    TraceJob job;
  };
  std::vector<Row> rows;
  for (size_t n = 2; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    std::tm tm{};
    double duration = 0, gpu_time = 0;
    int gpus = 0;
    char cluster[64] = {0};
    int fields = std::sscanf(line.c_str(), "%d-%d-%d %d:%d:%d,%lf,%d,%lf,%63s", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                             &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &duration, &gpus, &gpu_time, cluster);
    if (fields < 9 || gpus < 1 || duration < 0) {
      return InvalidArgument(fmt::format("{}: line {} is not timestamp,duration,num_gpus,gpu_time,cluster: {}", path,
                                         n, line.substr(0, 80)));
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    Row r{static_cast<int64_t>(timegm(&tm)), rows.size(), {}};
    r.job.duration_s = static_cast<int64_t>(duration);
    r.job.gpus = gpus;
    r.job.cluster = cluster;
    rows.push_back(std::move(r));
  }
  if (rows.empty()) return InvalidArgument(fmt::format("{}: no jobs", path));
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.t < b.t; });
  std::vector<TraceJob> jobs;
  jobs.reserve(rows.size());
  for (auto& r : rows) {
    r.job.id = static_cast<int64_t>(jobs.size()) + 1;
    r.job.submit_s = r.t - rows.front().t;
    jobs.push_back(std::move(r.job));
  }
  return jobs;
}

StatusOr<Throughputs> LoadGavelThroughputs(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(fmt::format("throughputs: cannot open {}", path));
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return InvalidArgument(fmt::format("{}: not a JSON object of GPU types", path));
  Throughputs out;
  for (const auto& [type, models] : doc.items()) {
    if (type.find("_unconsolidated") != std::string::npos || !models.is_object()) continue;
    for (const auto& [key, partners] : models.items()) {
      // Keys look like "('ResNet-18 (batch size 16)', 1)": the model and its scale factor.
      const size_t open = key.find('\''), close = key.rfind('\'');
      if (open == std::string::npos || close <= open || key.find(", 1)", close) == std::string::npos) continue;
      if (!partners.is_object() || !partners.contains("null") || !partners["null"].is_number()) continue;
      const double tput = partners["null"].get<double>();
      if (tput > 0) out[key.substr(open + 1, close - open - 1)][type] = tput;
    }
  }
  if (out.empty()) return InvalidArgument(fmt::format("{}: no single-GPU throughputs (\"null\" entries) found", path));
  return out;
}

}  // namespace ringmaster::sim
