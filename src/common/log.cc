#include "common/log.h"

namespace ringmaster {

void InitLogging(bool verbose) {
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %v");
  spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info);
}

}  // namespace ringmaster
