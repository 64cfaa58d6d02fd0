// DiskGuard: each task's disk use, measured as the kubelet measures
// ephemeral storage (a walk of the directories it writes, counting
// allocated blocks), and a call when a task is over its limit, so the
// executor stops it with a reason. Thread-safe: one thread of its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ringmaster::agent {

struct DiskUse {
  int64_t bytes = 0;      // allocated (st_blocks): a sparse file counts what it holds
  bool complete = true;   // false: the walk stopped at its entry budget, or the tree moved under it
  bool too_many = false;  // the walk stopped at its entry budget: the tree holds more entries than it reads
};

// Bytes allocated under `dir` (not followed when a symlink), itself included.
// Never follows a link nor crosses into another file system; a file with
// several links counts once, and not at all when it is root's (the agent's
// staged inputs, hard links to its cache). Reads at most `max_entries` entries, so one pass
// over a hostile tree is bounded; holds two descriptors whatever the depth.
DiskUse MeasureTree(const std::string& dir, size_t max_entries);

class DiskGuard {
 public:
  // key, bytes used, limit: called once per watched task, from the guard's thread.
  // `used` is -1 when the task's tree holds more entries than one pass reads
  // (max_entries): a tree too big to measure is over any limit, or a task
  // could hide its bytes behind a million empty files.
  using OnOver = std::function<void(const std::string& key, int64_t used, int64_t limit)>;
  // `interval` 0: no thread (tests call CheckAll).
  DiskGuard(std::chrono::milliseconds interval, OnOver on_over, size_t max_entries = 1'000'000);
  ~DiskGuard();
  DiskGuard(const DiskGuard&) = delete;
  DiskGuard& operator=(const DiskGuard&) = delete;

  // Measures `dirs` together against `limit` bytes (> 0) from the next pass on.
  void Watch(const std::string& key, int64_t limit, std::vector<std::string> dirs);
  void Forget(const std::string& key);
  // One pass over every watched task; what the thread runs each interval.
  void CheckAll();

 private:
  struct Watched {
    int64_t limit = 0;
    std::vector<std::string> dirs;
    bool over = false;  // reported: never again
  };
  void Run();

  const std::chrono::milliseconds interval_;
  const OnOver on_over_;
  const size_t max_entries_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                   // GUARDED_BY(mu_)
  std::map<std::string, Watched> watched_;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace ringmaster::agent
