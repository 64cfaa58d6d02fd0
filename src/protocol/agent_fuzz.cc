// Fuzz target `agent_protocol`: every agent protocol message's FromJson on
// any JSON, as an agent or a server may send it. It must never crash or
// throw; what it accepts must encode (ToJson) and read back to the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "protocol/agent.h"

namespace {

using namespace ringmaster::protocol;

template <typename T>
void RoundTrip(const nlohmann::json& j) {
  T m;
  if (!FromJson(j, &m).ok()) return;
  T back;
  if (!FromJson(ToJson(m), &back).ok() || !(back == m)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  RoundTrip<RegisterRequest>(j);
  RoundTrip<RegisterReply>(j);
  RoundTrip<HeartbeatReply>(j);
  RoundTrip<Assignments>(j);
  RoundTrip<TaskStatusReport>(j);
  RoundTrip<ShipReply>(j);
  Heartbeat beat;
  if (FromJson(j, &beat).ok()) {
    Heartbeat back;
    if (!FromJson(ToJson(beat), &back).ok() || back.samples.size() != beat.samples.size()) std::abort();
  }
  return 0;
}
