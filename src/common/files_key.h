// The rule every path in the files service follows (a BlobStore key, a job's
// inputs and outputs, an image's tar): the server, the agent and each store
// backend check the same rule, so a path one accepts the others accept too.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

#include "common/status.h"

namespace ringmaster {

inline constexpr size_t kMaxFilesKeyBytes = 1024;
// Directories a key may nest: deeper keys cost the store a directory each
// and are no one's real layout.
inline constexpr size_t kMaxFilesKeyDepth = 32;

// A key is 1..1024 bytes of valid UTF-8, '/'-separated segments, none of them
// empty, "." or ".."; no leading '/', no backslash, no NUL or other control
// character; at most kMaxFilesKeyDepth segments. The error names what is wrong.
Status ValidateFilesKey(std::string_view key);

}  // namespace ringmaster
