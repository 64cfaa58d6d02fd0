// LogStore: the server's copy of every task attempt's output, one file per
// (job, rank, attempt) under <data>/logs/<job>/. Agents append by byte
// offset: a write lands only at the file's current size, so resending after
// a crash on either side never duplicates or loses bytes. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::server {

struct LogFile {
  int rank = 0;
  int attempt = 0;
  std::string path;
};

class LogStore {
 public:
  explicit LogStore(std::string root);

  // Appends `data` if `offset` equals the file's size; returns the size after.
  StatusOr<int64_t> Append(int64_t job_id, int rank, int attempt, int64_t offset, const std::string& data);
  // Every log file of the job, by rank then attempt.
  std::vector<LogFile> List(int64_t job_id) const;
  void DeleteJob(int64_t job_id);

 private:
  std::string JobDir(int64_t job_id) const;

  const std::string root_;
  std::mutex mu_;
};

}  // namespace ringmaster::server
