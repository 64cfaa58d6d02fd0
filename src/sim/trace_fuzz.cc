// Fuzz target `trace`: the Philly CSV and Gavel JSON parsers on any bytes.
// They must never crash, throw or hit undefined behaviour (UBSan), and what
// they accept must be within the documented bounds.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "sim/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ringmaster::sim;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto jobs = ParsePhillyTrace(text); jobs.ok()) {
    int64_t last = 0;
    for (const TraceJob& j : *jobs) {
      if (j.submit_s < last || j.gpus < 1 || j.gpus > kMaxTraceGpus || j.duration_s < 0 ||
          j.duration_s > kMaxTraceDurationS) {
        std::abort();
      }
      last = j.submit_s;
    }
  }
  if (auto t = ParseGavelThroughputs(text); t.ok()) {
    for (const auto& [model, types] : *t) {
      for (const auto& [type, tput] : types) {
        if (!(tput > 0) || !std::isfinite(tput)) std::abort();
      }
    }
  }
  return 0;
}
