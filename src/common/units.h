// Parsing and printing of resource quantities as users write them in job
// specs: CPU ("2", "0.5", "500m") and memory ("512Mi", "4G", "1048576").
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ringmaster {

// CPU in millicores. nullopt if `text` is not a CPU quantity.
std::optional<int64_t> ParseCpuMilli(const std::string& text);
// Bytes. Accepts a plain integer (bytes) or a number with a suffix:
// K/M/G/T (powers of 1000), Ki/Mi/Gi/Ti (powers of 1024), optional trailing "B".
std::optional<int64_t> ParseBytes(const std::string& text);

std::string FormatCpu(int64_t milli);      // 1000 -> "1", 500 -> "0.5"
std::string FormatBytes(int64_t bytes);    // 536870912 -> "512Mi"

}  // namespace ringmaster
