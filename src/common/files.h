// Small file helpers with crash-safe semantics: WriteFileAtomic writes a
// temp file, fsyncs it and renames it over the target, so readers see the
// old or the new content, never a torn one. Thread-safe (no shared state).
#pragma once

#include <string>

#include "common/status.h"

namespace ringmaster {

Status WriteFileAtomic(const std::string& path, const std::string& content, int mode = 0644);
// Writes all `n` bytes to `fd` (retrying short writes and EINTR); `what` names
// the file in the error.
Status WriteAll(int fd, const char* data, size_t n, const std::string& what);
StatusOr<std::string> ReadFile(const std::string& path);
Status MakeDirs(const std::string& path, int mode = 0755);

}  // namespace ringmaster
