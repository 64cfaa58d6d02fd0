// What every MetaStore backend keeps the same way: its one (recursive) lock,
// the count of its commits (the commit tickets), and the versions readers
// cache by (MetaStore::JobVersion, AuthVersion). Internal to store/.
// Thread-safety: versions and the commit count are read without the lock.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace ringmaster::store {

// Jobs share kSlots counters by id: a collision only costs a needless rebuild.
class Versions {
 public:
  uint64_t Job(int64_t id) const { return job_[Slot(id)].load(); }
  uint64_t Auth() const { return auth_.load(); }
  void MoveJob(int64_t id) { job_[Slot(id)].fetch_add(1); }
  void MoveAuth() { auth_.fetch_add(1); }

 private:
  static constexpr size_t kSlots = 4096;
  static size_t Slot(int64_t id) { return static_cast<uint64_t>(id) % kSlots; }
  std::array<std::atomic<uint64_t>, kSlots> job_{};
  std::atomic<uint64_t> auth_{0};
};

// The store's lock. Leaving its outermost hold, after every write in it has
// committed or rolled back, a commit made under it is numbered (its ticket)
// and the versions of what was written move on. A reader that read a version
// before the data can then never keep data older than the version.
class StoreMutex {
 public:
  void lock() {
    mu_.lock();
    ++depth_;
  }
  void unlock() {
    if (--depth_ == 0) {
      if (committed_) {
        committed_ = false;
        commits_.fetch_add(1);
      }
      for (int64_t id : touched_jobs_) versions_.MoveJob(id);
      touched_jobs_.clear();
      if (touched_auth_) versions_.MoveAuth();
      touched_auth_ = false;
    }
    mu_.unlock();
  }
  // REQUIRES: held. A commit was made; what the hold writes.
  void NoteCommit() { committed_ = true; }
  void TouchJob(int64_t id) { touched_jobs_.push_back(id); }
  void TouchAuth() { touched_auth_ = true; }

  // The commits numbered so far: the latest commit's ticket.
  uint64_t Commits() const { return commits_.load(); }
  const Versions& versions() const { return versions_; }

 private:
  std::recursive_mutex mu_;
  std::atomic<uint64_t> commits_{0};
  Versions versions_;
  int depth_ = 0;                      // GUARDED_BY(mu_)
  bool committed_ = false;             // GUARDED_BY(mu_)
  std::vector<int64_t> touched_jobs_;  // GUARDED_BY(mu_)
  bool touched_auth_ = false;          // GUARDED_BY(mu_)
};

}  // namespace ringmaster::store
