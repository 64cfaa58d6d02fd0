// Tests only: a small tmpfs on a fresh directory, to see what a full disk
// does. Mounting needs root (CAP_SYS_ADMIN): elsewhere ok() is false and the
// test skips. Fill() writes a filler file until the disk refuses more,
// Free() deletes it; the destructor unmounts.
#pragma once

#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace ringmaster {

class SmallTmpfs {
 public:
  explicit SmallTmpfs(size_t bytes) {
    char tmpl[] = "/tmp/rm-small-tmpfs-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return;
    dir_ = tmpl;
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0700";
    mounted_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, opts.c_str()) == 0;
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;

  bool ok() const { return mounted_; }
  const std::string& dir() const { return dir_; }

  // Until a write fails (ENOSPC): afterwards no page is left.
  void Fill() {
    const int fd = ::open(Filler().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return;
    const std::string block(64 << 10, 'f');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    ::close(fd);
  }
  void Free() { ::unlink(Filler().c_str()); }

 private:
  std::string Filler() const { return dir_ + "/filler"; }

  std::string dir_;
  bool mounted_ = false;
};

}  // namespace ringmaster
