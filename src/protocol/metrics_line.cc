#include "protocol/metrics_line.h"

#include "common/json_limits.h"

namespace ringmaster::protocol {

namespace {

// Counts `j`'s values (itself included), stopping past `limit`. Depth is
// bounded by kMaxMetricsDepth, so the recursion is too.
size_t CountValues(const nlohmann::json& j, size_t limit) {
  size_t n = 1;
  if (j.is_structured()) {
    for (const auto& v : j) {
      n += CountValues(v, limit);
      if (n > limit) break;
    }
  }
  return n;
}

}  // namespace

std::optional<nlohmann::json> ParseMetricsLine(std::string_view line) {
  auto rec = ParseJson(line, {.max_bytes = kMaxMetricsLineBytes, .max_depth = kMaxMetricsDepth}, "metrics");
  if (!rec.ok() || !rec->is_object()) return std::nullopt;
  // The record's values: its members and what they hold (not the record itself).
  if (CountValues(*rec, kMaxMetricsValues + 1) - 1 > kMaxMetricsValues) return std::nullopt;
  return std::move(*rec);
}

}  // namespace ringmaster::protocol
