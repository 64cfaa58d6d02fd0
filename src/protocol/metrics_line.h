// One line of a task's metrics file ($RINGMASTER_METRICS_FILE): text the task
// wrote, so anything at all. A line counts as a record only when it is a flat
// JSON object within the limits below; anything else is skipped, never an
// error and never a crash (a 200k-level array would overflow the stack of
// whatever dumps it). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ringmaster::protocol {

// Metrics are flat records ({"step": 10, "loss": 0.3}); a little nesting is
// allowed for grouped values ({"lr": {"group0": 0.1}}).
constexpr size_t kMaxMetricsLineBytes = 64 << 10;
constexpr int kMaxMetricsDepth = 8;
// Values in one record, nested ones included: a line of thousands of keys is
// not a metrics record, and would cost the server far more than its bytes.
constexpr size_t kMaxMetricsValues = 256;

// The record on `line` (without its newline; a trailing \r is fine), or
// nullopt when it is not a JSON object, is longer than kMaxMetricsLineBytes,
// nests deeper than kMaxMetricsDepth, holds more than kMaxMetricsValues
// values or holds invalid UTF-8. What it returns
// always dumps.
std::optional<nlohmann::json> ParseMetricsLine(std::string_view line);

}  // namespace ringmaster::protocol
