// TaskFiles: the agent's side of a task attempt's files (docs/files.md):
// before it starts, its inputs and latest checkpoint, fetched into a per-uid
// node cache by SHA-256 and linked into its work dir; while it runs, each new
// checkpoint (files first, `latest` last); when it ends, its last checkpoint
// and outputs. Walks follow no symlink (safe_fs.h). Thread-safe across tasks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "agent/executor/executor.h"
#include "client/api_client.h"
#include "common/status.h"

namespace ringmaster::agent {

struct StageEntry {
  std::string path;    // in the files service
  uint64_t size = 0;
  std::string sha256;  // the cache key; "" until fetched when the store did not know it
  std::string to;      // relative to the work dir (inputs) or its checkpoints/ (checkpoint)
};

struct StagePlan {
  int64_t job_id = 0;
  std::vector<StageEntry> inputs;
  std::vector<StageEntry> checkpoint;  // `latest` last; empty when the job has none yet
  std::vector<std::string> outputs;    // relative to the work dir
  // The checkpoint `latest` named when staged ("" = none): already in the store.
  std::string checkpoint_name;
};

// What one upload (a checkpoint, a task's outputs) went through.
struct UploadCount {
  size_t files = 0;    // uploaded (or about to be)
  size_t entries = 0;  // directory entries seen, of any kind
  size_t skipped = 0;  // files whose names the store refuses
  bool strict = false; // a file that vanishes fails the upload (checkpoints)
};

struct TaskFilesOptions {
  std::string cache_dir;                       // root's, 0700
  int64_t cache_bytes = int64_t{20} << 30;     // entries past this, oldest first, are dropped
  size_t max_files = 10000;                    // files one upload (outputs, a checkpoint) may hold
};

class TaskFiles {
 public:
  TaskFiles(const client::ApiClient* api, TaskFilesOptions options);
  Status Init();

  StatusOr<StagePlan> Plan(int64_t task_id, int attempt) const;
  // Every entry of the plan into the cache (fills in unknown SHA-256s);
  // Aborted as soon as `cancelled` says so, between files.
  // Each task uid has a cache of its own (<cache>/<uid>/<sha256>): a link
  // count shared between users would tell one what another has staged.
  Status Fetch(int64_t task_id, int attempt, uid_t uid, StagePlan* plan,
               const std::function<bool()>& cancelled = {}) const;
  // Places the plan's entries in the task's work directory (`work_fd`, made
  // for uid:gid): inputs at their `to`, the checkpoint under checkpoints/.
  Status Place(const StagePlan& plan, int work_fd, uid_t uid, gid_t gid) const;

  // Uploads the checkpoint the work dir's checkpoints/latest names, when
  // that `latest` (its name, inode and mtime) is not `*synced`; sets *synced
  // to it once uploaded. Only the task's own files go (not staged ones).
  Status SyncCheckpoint(int64_t task_id, int attempt, int64_t job_id, const TaskSandbox& box,
                        std::string* synced) const;
  // Uploads each of `outputs` (files or directories in the work dir) to
  // jobs/<job>/outputs/; a path that does not exist is skipped, and so is
  // any file not owned by the task's uid. What went in *count.
  Status UploadOutputs(int64_t task_id, int attempt, int64_t job_id, const TaskSandbox& box,
                       const std::vector<std::string>& outputs, UploadCount* count) const;

 private:
  std::string TaskUrl(int64_t task_id, int attempt, const std::string& key) const;
  std::string UserCache(uid_t uid) const;
  Status FetchOne(int64_t task_id, int attempt, const std::string& cache, StageEntry* e) const;
  Status UploadFd(int64_t task_id, int attempt, int fd, const std::string& key) const;
  // One regular file of `dir_fd` to `key`, if it is uid's; counted in *count
  // (a name the store refuses is skipped and counted as such).
  Status UploadFile(int64_t task_id, int attempt, int dir_fd, const std::string& name, uid_t uid,
                    const std::string& key, UploadCount* count) const;
  Status UploadTree(int64_t task_id, int attempt, int dir_fd, uid_t uid, const std::string& key_prefix, int depth,
                    UploadCount* count) const;
  void Evict() const;

  const client::ApiClient* api_;
  const TaskFilesOptions options_;
};

}  // namespace ringmaster::agent
