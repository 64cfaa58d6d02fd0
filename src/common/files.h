// Small file helpers with crash-safe semantics: WriteFileAtomic writes a
// temp file, fsyncs it and renames it over the target, so readers see the
// old or the new content, never a torn one. Thread-safe (no shared state).
#pragma once

#include <string>

#include "common/status.h"

namespace ringmaster {

// A new, empty file beside `path` for writing, `<path><suffix><random>`, made
// with O_CREAT|O_EXCL|O_NOFOLLOW: in a shared directory, nothing another user
// planted (a symlink at a predictable name) is opened or truncated. The
// caller owns `fd` and renames `path` into place at the end.
struct NewTempFile {
  int fd = -1;
  std::string path;
};
StatusOr<NewTempFile> CreateTempBeside(const std::string& path, const std::string& suffix, int mode = 0600);

// A full disk (ENOSPC, EDQUOT) fails these with InsufficientStorage.
Status WriteFileAtomic(const std::string& path, const std::string& content, int mode = 0644);
// Writes all `n` bytes to `fd` (retrying short writes and EINTR); `what` names
// the file in the error. On error, some of the bytes may have been written.
Status WriteAll(int fd, const char* data, size_t n, const std::string& what);
StatusOr<std::string> ReadFile(const std::string& path);
Status MakeDirs(const std::string& path, int mode = 0755);

// ENOSPC or EDQUOT: no room left for a write.
bool IsDiskFull(int err);
// The error of a failed system call on a file: "<what>: <strerror>", as
// InsufficientStorage when the disk is full, else Internal.
Status FileError(const std::string& what, int err);

}  // namespace ringmaster
