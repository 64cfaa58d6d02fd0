#include "agent/executor/safe_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

#include <fmt/format.h>

namespace ringmaster::agent {
namespace {

constexpr int kMaxSymlinks = 40;
constexpr int kMaxDepth = 256;
constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

std::string Errno() { return std::strerror(errno); }

bool TrustedOwner(const struct stat& st) { return st.st_uid == 0 || st.st_uid == geteuid(); }
bool OthersMayWrite(const struct stat& st) { return (st.st_mode & (S_IWGRP | S_IWOTH)) != 0; }

// Why directory `shown` (stat `st`) cannot be trusted, or "" if it can.
std::string Distrust(const struct stat& st, const std::string& shown) {
  if (!TrustedOwner(st)) return fmt::format("{} belongs to uid {}, not to root", shown, st.st_uid);
  if (OthersMayWrite(st) && !(st.st_mode & S_ISVTX)) {
    return fmt::format("{} is writable by other users (mode {:04o})", shown, st.st_mode & 07777);
  }
  return "";
}

std::deque<std::string> Split(const std::string& path) {
  std::vector<std::string> parts = PathParts(path);
  return {parts.begin(), parts.end()};
}

// Removes what is in `dir`. A directory at kMaxDepth is not entered: it is
// moved up into `top` (the tree's root, same filesystem) for a later round,
// so a tree of any depth goes without a descriptor per level; *moved counts those.
Status RemoveContents(int dir, const std::string& shown, int depth, int top, int* moved) {
  static std::atomic<uint64_t> deep_names{0};
  if (depth > kMaxDepth) return ResourceExhausted(fmt::format("{}: deeper than {} directories; left in place", shown, kMaxDepth));
  std::vector<std::string> names;
  {
    int copy = fcntl(dir, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) return Internal(fmt::format("{}: {}", shown, Errno()));
    DIR* d = fdopendir(copy);
    if (!d) {
      close(copy);
      return Internal(fmt::format("{}: {}", shown, Errno()));
    }
    rewinddir(d);  // the copy shares the descriptor's position: an earlier round left it at the end
    while (dirent* e = readdir(d)) {
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    }
    closedir(d);
  }
  Status first = Status::Ok();
  for (const std::string& name : names) {
    struct stat st {};
    if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (depth >= kMaxDepth) {
        const std::string up = fmt::format(".rm-deep-{}-{}", getpid(), ++deep_names);
        if (renameat(dir, name.c_str(), top, up.c_str()) == 0) {
          ++*moved;
          continue;
        }
      }
      int sub = openat(dir, name.c_str(), kDirFlags);
      if (sub < 0 && errno == EACCES) {  // a non-root agent meeting its own mode-000 directory
        // Never through a symlink swapped in since the fstatat (glibc refuses
        // to change a symlink's mode with AT_SYMLINK_NOFOLLOW).
        fchmodat(dir, name.c_str(), 0700, AT_SYMLINK_NOFOLLOW);
        sub = openat(dir, name.c_str(), kDirFlags);
      }
      if (sub >= 0) {
        UniqueFd owned(sub);
        Status st_sub = RemoveContents(owned.get(), shown + "/" + name, depth + 1, top, moved);
        if (!st_sub.ok() && first.ok()) first = st_sub;
        if (unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0 && first.ok() && st_sub.ok()) {
          first = Internal(fmt::format("rmdir {}/{}: {}", shown, name, Errno()));
        }
        continue;
      }
      // Swapped for a symlink meanwhile: O_NOFOLLOW refused it; unlink it below.
    }
    if (unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT && first.ok()) {
      first = Internal(fmt::format("unlink {}/{}: {}", shown, name, Errno()));
    }
  }
  return first;
}

// Opens `name` in `dir` with `flags` (never following a symlink) if it is a
// file of type `type` (S_IFREG, S_IFSOCK) owned by `uid`, checked on the
// open descriptor.
StatusOr<UniqueFd> OpenOwned(int dir, const std::string& name, uid_t uid, int flags, mode_t type) {
  if (name.empty() || name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
    return InvalidArgument(fmt::format("\"{}\" is not a file name", name));
  }
  UniqueFd fd(openat(dir, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return NotFound(name + " does not exist");
    if (errno == ELOOP) return PermissionDenied(name + " is a symlink");
    return PermissionDenied(fmt::format("{}: {}", name, Errno()));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Internal(fmt::format("stat {}: {}", name, Errno()));
  if (S_ISLNK(st.st_mode)) return PermissionDenied(name + " is a symlink");  // O_PATH opens the link itself
  if ((st.st_mode & S_IFMT) != type) {
    return PermissionDenied(fmt::format("{} is not a {}", name, type == S_IFSOCK ? "socket" : "regular file"));
  }
  if (st.st_uid != uid) return PermissionDenied(fmt::format("{} belongs to uid {}, not uid {}", name, st.st_uid, uid));
  return fd;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

StatusOr<UniqueFd> OpenTrustedDir(const std::string& path, bool create, mode_t mode) {
  if (path.empty() || path[0] != '/') return InvalidArgument(fmt::format("{}: not an absolute path", path));
  std::deque<std::string> todo = Split(path);
  std::vector<UniqueFd> stack;  // the directories walked so far; back() is the current one
  std::vector<std::string> shown_stack{"/"};
  stack.emplace_back(open("/", kDirFlags));
  if (!stack.back()) return Internal("open /: " + Errno());
  int hops = 0;
  while (!todo.empty()) {
    const std::string name = todo.front();
    todo.pop_front();
    if (name == ".") continue;
    if (name == "..") {
      if (stack.size() > 1) {
        stack.pop_back();
        shown_stack.pop_back();
      }
      continue;
    }
    const int cur = stack.back().get();
    const std::string shown = (shown_stack.back() == "/" ? "" : shown_stack.back()) + "/" + name;
    int fd = openat(cur, name.c_str(), kDirFlags);
    bool created = false;
    if (fd < 0 && errno == ENOENT && create) {
      if (mkdirat(cur, name.c_str(), mode) == 0) created = true;
      else if (errno != EEXIST) return Internal(fmt::format("mkdir {}: {}", shown, Errno()));
      fd = openat(cur, name.c_str(), kDirFlags);
    }
    if (fd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
      struct stat link {}, here {};
      if (fstatat(cur, name.c_str(), &link, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(link.st_mode)) {
        return FailedPrecondition(fmt::format("{} is not a directory", shown));
      }
      fstat(cur, &here);
      // Only root (or we) could have put a symlink into a directory nobody else
      // may write; in a sticky one (/tmp), its owner says who did.
      if (OthersMayWrite(here) && !TrustedOwner(link)) {
        return PermissionDenied(fmt::format("{} is a symlink another user made; refusing to follow it", shown));
      }
      if (++hops > kMaxSymlinks) return FailedPrecondition(fmt::format("{}: too many levels of symlinks", path));
      std::string target(PATH_MAX, '\0');
      ssize_t n = readlinkat(cur, name.c_str(), target.data(), target.size());
      if (n < 0) return Internal(fmt::format("readlink {}: {}", shown, Errno()));
      target.resize(static_cast<size_t>(n));
      auto parts = Split(target);
      todo.insert(todo.begin(), parts.begin(), parts.end());
      if (!target.empty() && target[0] == '/') {
        stack.resize(1);
        shown_stack.resize(1);
      }
      continue;
    }
    if (fd < 0) return Internal(fmt::format("open {}: {}", shown, Errno()));
    UniqueFd dir(fd);
    struct stat st {};
    if (fstat(dir.get(), &st) != 0) return Internal(fmt::format("stat {}: {}", shown, Errno()));
    if (created && fchmod(dir.get(), mode) != 0) return Internal(fmt::format("chmod {}: {}", shown, Errno()));
    if (std::string why = Distrust(st, shown); !why.empty()) return PermissionDenied(why);
    stack.push_back(std::move(dir));
    shown_stack.push_back(shown);
  }
  return std::move(stack.back());
}

Status MakeOwnedDir(int parent, const std::string& name, uid_t uid, gid_t gid, mode_t mode) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return InvalidArgument(fmt::format("\"{}\" is not a directory name", name));
  }
  bool created = mkdirat(parent, name.c_str(), mode) == 0;
  if (!created && errno != EEXIST) return Internal(fmt::format("mkdir {}: {}", name, Errno()));
  UniqueFd dir(openat(parent, name.c_str(), kDirFlags));
  if (!dir) {
    if (errno == ELOOP || errno == ENOTDIR) return PermissionDenied(fmt::format("{} is a symlink or not a directory", name));
    return Internal(fmt::format("open {}: {}", name, Errno()));
  }
  struct stat st {};
  if (fstat(dir.get(), &st) != 0) return Internal(fmt::format("stat {}: {}", name, Errno()));
  if (st.st_uid == uid && !created) return Status::Ok();
  if (!created && st.st_uid != geteuid()) {
    return PermissionDenied(fmt::format("{} belongs to uid {}, not uid {}", name, st.st_uid, uid));
  }
  // Ours (new, or left by an older agent that ran tasks as root): hand it over.
  if ((st.st_uid != uid || st.st_gid != gid) && fchown(dir.get(), uid, gid) != 0) {
    return Internal(fmt::format("chown {} to {}:{}: {}", name, uid, gid, Errno()));
  }
  if (fchmod(dir.get(), mode) != 0) return Internal(fmt::format("chmod {}: {}", name, Errno()));
  return Status::Ok();
}

Status RemoveTree(int parent, const std::string& name) {
  int fd = openat(parent, name.c_str(), kDirFlags);
  if (fd < 0) {
    if (errno == ENOENT) return Status::Ok();
    if (errno == ELOOP || errno == ENOTDIR) {
      if (unlinkat(parent, name.c_str(), 0) != 0 && errno != ENOENT) return Internal(fmt::format("unlink {}: {}", name, Errno()));
      return Status::Ok();
    }
    return Internal(fmt::format("open {}: {}", name, Errno()));
  }
  UniqueFd dir(fd);
  // Rounds: each removes what it can reach and moves what is deeper up to
  // the top; one more takes what a race left (an entry swapped meanwhile).
  for (int round = 0, idle = 0;; ++round) {
    int moved = 0;
    Status st = RemoveContents(dir.get(), name, 1, dir.get(), &moved);
    if (unlinkat(parent, name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) return Status::Ok();
    const std::string why = Errno();
    idle = moved ? 0 : idle + 1;
    if (idle >= 3 || round >= 100000) return st.ok() ? Internal(fmt::format("rmdir {}: {}", name, why)) : st;
  }
}

StatusOr<UniqueFd> OpenOwnedRegularFile(int dir, const std::string& name, uid_t uid) {
  return OpenOwned(dir, name, uid, O_RDONLY | O_NONBLOCK | O_NOCTTY, S_IFREG);
}

StatusOr<UniqueFd> OpenOwnedSocket(int dir, const std::string& name, uid_t uid) {
  return OpenOwned(dir, name, uid, O_PATH, S_IFSOCK);
}

StatusOr<UniqueFd> OpenOwnedDir(int parent, const std::string& name, uid_t uid) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return InvalidArgument(fmt::format("\"{}\" is not a directory name", name));
  }
  UniqueFd fd(openat(parent, name.c_str(), kDirFlags));
  if (!fd) {
    if (errno == ENOENT) return NotFound(name + " does not exist");
    return PermissionDenied(fmt::format("{}: {}", name, Errno()));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Internal(fmt::format("stat {}: {}", name, Errno()));
  if (st.st_uid != uid) return PermissionDenied(fmt::format("{} belongs to uid {}, not uid {}", name, st.st_uid, uid));
  return fd;
}

Status PublishOnce(const std::string& tmp, const std::string& path) {
  if (link(tmp.c_str(), path.c_str()) == 0 || errno == EEXIST) {
    unlink(tmp.c_str());
    return Status::Ok();
  }
  if (errno != EPERM && errno != EMLINK && errno != ENOSYS && errno != EOPNOTSUPP) {
    const std::string why = Errno();
    unlink(tmp.c_str());
    return Internal(fmt::format("link {}: {}", path, why));
  }
  if (rename(tmp.c_str(), path.c_str()) == 0) return Status::Ok();
  const std::string why = Errno();
  unlink(tmp.c_str());
  return Internal(fmt::format("rename {}: {}", path, why));
}

std::vector<std::string> PathParts(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

}  // namespace ringmaster::agent
