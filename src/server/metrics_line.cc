#include "server/metrics_line.h"

#include "common/json_limits.h"

namespace ringmaster::server {

std::optional<nlohmann::json> ParseMetricsLine(std::string_view line) {
  auto rec = ParseJson(line, {.max_bytes = kMaxMetricsLineBytes, .max_depth = kMaxMetricsDepth}, "metrics");
  if (!rec.ok() || !rec->is_object()) return std::nullopt;
  return std::move(*rec);
}

}  // namespace ringmaster::server
