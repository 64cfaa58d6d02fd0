#include "store/sqlite/group_commit.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/files.h"

namespace ringmaster::store::sqlite {

GroupCommit::~GroupCommit() {
  if (fd_ >= 0) ::close(fd_);
}

Status GroupCommit::Await(uint64_t ticket) {
  std::unique_lock<std::mutex> l(mu_);
  while (durable_ < ticket) {
    if (syncing_) {
      cv_.wait(l);
      continue;
    }
    syncing_ = true;
    // Every commit numbered up to here has written its frames to the log.
    const uint64_t upto = commits_->Commits();
    if (fd_ < 0) fd_ = ::open(wal_path_.c_str(), O_RDONLY | O_CLOEXEC);
    const int fd = fd_;
    const int open_errno = errno;
    l.unlock();
    int rc = 0, err = 0;
    if (fd >= 0) {
      rc = ::fdatasync(fd);
      err = errno;
    } else {  // the log of a database in WAL mode exists once anything was committed
      rc = -1;
      err = open_errno;
    }
    l.lock();
    syncing_ = false;
    cv_.notify_all();
    // After a failed sync the kernel may have dropped the log's dirty pages
    // and a later sync can succeed without them (PostgreSQL's "fsyncgate"),
    // whatever the error (EIO, or ENOSPC on thin or network storage):
    // nothing is acknowledged again until the server restarts and reads
    // the log back. A full disk seen by SQLite's own write is different
    // (SQLITE_FULL: nothing was written, and the next write retries).
    if (rc != 0 && fd >= 0) failed_errno_ = err;
    if (failed_errno_ != 0) {
      return Unavailable(std::string("the database's log could not be made durable (") + std::strerror(failed_errno_) +
                         "): no write is acknowledged until the server is restarted");
    }
    if (rc != 0 && IsDiskFull(err)) {
      return ServerDiskFull(std::string("syncing the database's log: ") + std::strerror(err));
    }
    if (rc != 0) {
      return Unavailable(std::string("the database's log could not be made durable (") + std::strerror(err) +
                         "): the write is not acknowledged; try again");
    }
    durable_ = std::max(durable_, upto);
  }
  return Status::Ok();
}

}  // namespace ringmaster::store::sqlite
