// Fuzz target `job_spec`: ParseJobSpec on any bytes, as a user may submit
// them. It must never crash, throw or take long; its messages must be one
// line of valid UTF-8 (they go into a JSON reply); and a spec it accepts
// must be stored and read back unchanged: JobSpecToJson(...).dump() must not
// throw and JobSpecFromJson of it must give the same spec, as must
// ParseJobSpec of it. The bytes also go
// to JobSpecFromJson directly, as a damaged stored record.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/json_limits.h"
#include "protocol/job_spec.h"

namespace {

void CheckMessage(const ringmaster::Status& s) {
  if (!ringmaster::IsValidUtf8(s.message()) || s.message().find('\n') != std::string::npos ||
      s.message().size() > 2048) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ringmaster::protocol;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto stored = JobSpecFromJson(text);
  if (!stored.ok()) CheckMessage(stored.status());

  auto spec = ParseJobSpec(text);
  if (!spec.ok()) {
    if (spec.status().code() != ringmaster::StatusCode::kInvalidArgument) std::abort();
    CheckMessage(spec.status());
    return 0;
  }
  const std::string json = JobSpecToJson(*spec).dump();  // throws (a crash here) on invalid UTF-8
  auto back = JobSpecFromJson(json);
  if (!back.ok() || !(*back == *spec)) std::abort();
  // The normalised JSON is itself a spec that means the same (but for the
  // elastic range, which it stores as `elastic`).
  if (!spec->elastic() && json.size() <= kMaxSpecBytes) {
    auto again = ParseJobSpec(json);
    if (!again.ok() || !(*again == *spec)) std::abort();
  }
  return 0;
}
