// LogArchiver: the server's background work on jobs' files. It prunes a
// job's old checkpoints when a new `latest` arrives (keep_checkpoints), and
// when a job ends, copies each of its task attempts' logs and
// metrics from the server's LogStore into the files service, at
//   jobs/<id>/logs/rank-<r>.attempt-<a>.log
//   jobs/<id>/logs/rank-<r>.attempt-<a>.metrics.jsonl
// counted against the job owner's quota (never refused for it: the LogStore
// caps each file and each job already). Once archived, the server's own copy
// of the logs is deleted: the archive is the one copy, which `ringmaster
// logs` and the files API read. Archiving is idempotent (a
// copy already there with the same size is skipped), so a restarted server
// archives again what it may have missed. One background thread; thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "common/status.h"
#include "server/api.h"

namespace ringmaster::server {

class LogArchiver {
 public:
  explicit LogArchiver(Api* api) : api_(api) {}
  ~LogArchiver() { Stop(); }

  // Starts the thread, queueing the most recent ended jobs (one server
  // restart's worth of missed archives).
  void Start();
  void Stop();
  // Queues a job that ended (cheap: the hook JobService calls under its lock).
  void Enqueue(int64_t job_id);
  // Queues a job whose checkpoints/latest was just written.
  void EnqueuePrune(int64_t job_id);
  // Deletes the job's checkpoint directories but the newest keep_checkpoints
  // (by their files' times) and the one `latest` names; their bytes go back
  // to the owner's quota.
  Status PruneCheckpoints(int64_t job_id);
  // Archives one ended job now; OK and nothing done for a job still running.
  Status Archive(int64_t job_id);

 private:
  Status ArchiveFile(const store::Job& job, const std::string& path, const std::string& key);
  void Loop();

  Api* api_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<bool, int64_t>> queue_;  // GUARDED_BY(mu_): (prune?, job)
  bool stopping_ = false;      // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace ringmaster::server
