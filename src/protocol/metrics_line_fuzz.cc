// Fuzz target `metrics_line`: ParseMetricsLine on any bytes, as a task may
// write them. It must never crash or throw; what it accepts is an object
// within the limits that the metrics route can copy, merge and dump.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "protocol/metrics_line.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ringmaster::protocol;
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  auto rec = ParseMetricsLine(line);
  if (!rec) return 0;
  if (!rec->is_object() || size > kMaxMetricsLineBytes) std::abort();
  nlohmann::json copy = *rec;  // what the metrics route does: copy, add the attempt, merge into `latest`
  copy["attempt"] = 1;
  nlohmann::json latest = nlohmann::json::object();
  latest.update(copy);
  (void)latest.dump();
  return 0;
}
