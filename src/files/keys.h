// The rule for files paths (keys), shared by the stores, the server's job
// specs and the agent, which checks the paths it is sent without linking a
// store. Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

#include "common/status.h"

namespace ringmaster::files {

inline constexpr size_t kMaxKeyBytes = 1024;

// A key is 1..1024 bytes of valid UTF-8, '/'-separated segments, none of them
// empty, "." or ".."; no leading '/', no backslash, no NUL or other control
// character. The error names what is wrong.
Status ValidateKey(std::string_view key);

}  // namespace ringmaster::files
