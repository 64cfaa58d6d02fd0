// File operations the agent, usually root, performs where a task's user has
// a say: the task's sandbox, the user's files dir, the metrics file a task
// writes. Every walk goes by file descriptor (openat, mkdirat, unlinkat) and
// never follows a symlink a user could have planted, so no user can point
// root at admin.token or /etc. Thread-safe (no shared state).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::agent {

// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Opens the directory at absolute `path`. Every directory on the way must be
// owned by root or by this process's user and be writable by nobody else
// (sticky ones such as /tmp excepted), so no other user can swap a component.
// A symlink is followed only where no other user could have made it. With
// `create`, missing directories are made with `mode` (set explicitly, not
// through the umask) and owned by this process's user.
StatusOr<UniqueFd> OpenTrustedDir(const std::string& path, bool create = false, mode_t mode = 0711);

// Makes `name` in directory `parent` a directory of uid:gid. A missing one is
// created with `mode` and handed to uid:gid. An existing one must be a real
// directory (not a symlink) owned by uid, or by this process's user (then it
// is handed over); one owned by anybody else is refused.
Status MakeOwnedDir(int parent, const std::string& name, uid_t uid, gid_t gid, mode_t mode);

// Removes `name` in `parent` and everything beneath it. Directories are
// entered with O_NOFOLLOW and every entry is unlinked relative to its
// directory's descriptor, so a symlink is removed, never followed. A tree of
// any depth goes: what lies below 256 levels is moved up to the top and
// removed in further rounds (a task can make 3,000 levels in a second).
Status RemoveTree(int parent, const std::string& name);

// Opens `name` in `dir` for reading only if it is a regular file owned by
// `uid`: O_NOFOLLOW (no symlink), O_NONBLOCK (a FIFO cannot block the
// caller), then fstat on the open descriptor. NotFound when it does not
// exist; PermissionDenied, saying why, when it is anything else.
StatusOr<UniqueFd> OpenOwnedRegularFile(int dir, const std::string& name, uid_t uid);

// An O_PATH descriptor of `name` in `dir` if it is a unix socket owned by
// `uid` (a symlink is refused, not followed): connect through
// /proc/self/fd/N, so the socket checked is the one reached.
StatusOr<UniqueFd> OpenOwnedSocket(int dir, const std::string& name, uid_t uid);

// Gives the finished file `tmp` the name `path` (same directory) unless
// `path` exists, for content-addressed names (one name, one content): then
// the existing file is kept. `tmp` is gone either way. rename(2) would
// replace `path`, and a linkat(2) of `path` racing the replacement can find
// the old inode with no links left and fail with ENOENT (two tasks fetching
// the same checkpoint file at once did). Where the filesystem has no hard
// links this falls back to rename(2).
Status PublishOnce(const std::string& tmp, const std::string& path);

// The non-empty '/'-separated parts of `path` ("a//b/" gives a, b).
std::vector<std::string> PathParts(const std::string& path);

// Opens the directory `name` in `parent` (O_NOFOLLOW) if it is owned by `uid`.
StatusOr<UniqueFd> OpenOwnedDir(int parent, const std::string& name, uid_t uid);

}  // namespace ringmaster::agent
