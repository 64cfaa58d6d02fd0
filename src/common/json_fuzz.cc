// Fuzz target `json`: ParseJson on any bytes. It must never crash or throw,
// and whatever it accepts must dump (valid UTF-8, bounded depth) and parse
// back to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/json_limits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ringmaster::JsonLimits;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const JsonLimits limits : {JsonLimits{}, JsonLimits{.max_bytes = 4096, .max_depth = 3}}) {
    auto j = ringmaster::ParseJson(text, limits, "fuzz");
    if (!j.ok()) {
      if (!ringmaster::IsValidUtf8(j.status().message())) std::abort();
      continue;
    }
    const std::string dumped = j->dump();
    auto again = ringmaster::ParseJson(dumped, {.max_bytes = 8 * limits.max_bytes, .max_depth = limits.max_depth});
    if (!again.ok() || *again != *j) std::abort();  // JSON text holds no NaN or inf: == is exact
  }
  return 0;
}
