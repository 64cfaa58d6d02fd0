// Fuzz target `cdi_spec`: ParseCdiSpec on any bytes, as a site's CDI spec
// file may hold them. It must never crash, throw or take long (the agent
// reads these files while it runs); a refusal is an InvalidArgument whose
// message is one line of valid UTF-8 (it goes into the agent's log), and an
// accepted spec has a kind and at least one device.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "agent/container/cdi.h"
#include "common/json_limits.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = ringmaster::agent::ParseCdiSpec(text, "/etc/cdi/fuzz.yaml");
  if (!spec.ok()) {
    const ringmaster::Status st = spec.status();  // a copy: message() refers into it
    const std::string& m = st.message();
    if (st.code() != ringmaster::StatusCode::kInvalidArgument || m.empty() ||
        !ringmaster::IsValidUtf8(m) || m.find('\n') != std::string::npos || m.size() > 2048) {
      std::abort();
    }
    return 0;
  }
  if (spec->kind.empty() || spec->devices.empty()) std::abort();
  return 0;
}
