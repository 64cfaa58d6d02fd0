#include "common/files.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>


namespace ringmaster {

bool IsDiskFull(int err) { return err == ENOSPC || err == EDQUOT; }

Status FileError(const std::string& what, int err) {
  std::string msg = what + ": " + std::strerror(err);
  return IsDiskFull(err) ? InsufficientStorage(std::move(msg)) : Internal(std::move(msg));
}

Status WriteAll(int fd, const char* data, size_t n, const std::string& what) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return FileError("write " + what, errno);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

namespace {

// A temp name's random part, from the kernel: no crypto library, so the
// shim (which writes files on every task's start) never loads one.
std::string TempTag() {
  unsigned char b[6] = {};
  size_t got = 0;
  while (got < sizeof b) {
    const ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
    else if (n < 0 && errno != EINTR) break;  // O_EXCL below still refuses a name in use
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : b) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace

StatusOr<NewTempFile> CreateTempBeside(const std::string& path, const std::string& suffix, int mode) {
  for (int attempt = 0;; ++attempt) {
    NewTempFile t;
    t.path = path + suffix + TempTag();
    t.fd = ::open(t.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (t.fd >= 0) return t;
    if (errno != EEXIST || attempt >= 8) return FileError("create " + t.path, errno);
  }
}

Status WriteFileAtomic(const std::string& path, const std::string& content, int mode) {
  RM_ASSIGN_OR_RETURN(NewTempFile made, CreateTempBeside(path, ".tmp.", mode));
  const std::string& tmp = made.path;
  const int fd = made.fd;
  if (Status st = WriteAll(fd, content.data(), content.size(), tmp); !st.ok()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  }
  ::fchmod(fd, mode);
  // A full disk can surface only here (delayed allocation, a network filesystem).
  if (::fsync(fd) != 0 && IsDiskFull(errno)) {
    Status st = FileError("fsync " + tmp, errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return FileError("rename " + tmp, e);
  }
  return Status::Ok();
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status MakeDirs(const std::string& path, int mode) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return FileError("mkdir " + path, ec.value());
  ::chmod(path.c_str(), mode);
  return Status::Ok();
}

}  // namespace ringmaster
