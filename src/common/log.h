// Logging: spdlog, one process-wide logger writing to stderr.
#pragma once

#include <spdlog/spdlog.h>

namespace ringmaster {
void InitLogging(bool verbose);
}  // namespace ringmaster
