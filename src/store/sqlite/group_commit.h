// The SQLite MetaStore's group commit. Commits write the log (the -wal file)
// without waiting for the disk (synchronous=NORMAL); Await(ticket) returns
// once commits 1..ticket are on disk. The first waiter to find them unsynced
// fdatasync()s the log for every commit made so far while later waiters wait
// for it, so N concurrent writers pay for about one sync, not N. Thread-safe.
#pragma once

#include <cstdint>
#include <condition_variable>
#include <mutex>
#include <string>

#include "common/status.h"
#include "store/store_mutex.h"

namespace ringmaster::store::sqlite {

class GroupCommit {
 public:
  // `commits` numbers the commits (outlives this).
  GroupCommit(std::string wal_path, const StoreMutex* commits) : wal_path_(std::move(wal_path)), commits_(commits) {}
  ~GroupCommit();
  GroupCommit(const GroupCommit&) = delete;
  GroupCommit& operator=(const GroupCommit&) = delete;

  // Unavailable if the disk refused the log (and, after an I/O error, every
  // later call until a restart); InsufficientStorage if it was full.
  Status Await(uint64_t ticket);

 private:
  const std::string wal_path_;
  const StoreMutex* const commits_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t durable_ = 0;  // GUARDED_BY(mu_)
  bool syncing_ = false;  // GUARDED_BY(mu_)
  int fd_ = -1;           // GUARDED_BY(mu_)
  int failed_errno_ = 0;  // GUARDED_BY(mu_): an I/O error of a sync; sticks
};

}  // namespace ringmaster::store::sqlite
