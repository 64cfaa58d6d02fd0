// LogStore: the server's copy of every task attempt's output, one file per
// (job, rank, attempt) under <data>/logs/<job>/ (and the same for metrics).
// Agents append by byte offset: a write lands only at the file's current
// size, so resending after a crash on either side never duplicates or loses
// bytes. Each file is capped: past `max_bytes` the rest is dropped behind a
// marker line, but still acknowledged (the offset keeps counting what was
// sent), so an agent never resends what was cut. A job's files together are
// capped too: past `max_job_bytes`, the logs of its older attempts are
// dropped first (each leaves a marker line), then the newest attempt's
// largest files lose their head (a marker line says how much), so what a
// job printed last is what is kept. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ringmaster::server {

struct LogFile {
  int rank = 0;
  int attempt = 0;
  std::string path;
  std::string key;  // the archived copy in the files store: the one copy when path is empty, else where it goes
};

class LogStore {
 public:
  // max_bytes: the cap per file; max_job_bytes: on one job's files together (0 = none).
  LogStore(std::string root, int64_t max_bytes, int64_t max_job_bytes = 0);

  // Appends `data` if `offset` equals the bytes sent so far; returns the bytes
  // sent so far after it (kept and dropped together).
  StatusOr<int64_t> Append(int64_t job_id, int rank, int attempt, int64_t offset, std::string_view data);
  // Every file of the job, by rank then attempt.
  std::vector<LogFile> List(int64_t job_id) const;
  void DeleteJob(int64_t job_id);
  int64_t max_bytes() const { return max_bytes_; }

 private:
  std::string JobDir(int64_t job_id) const;
  // Drops older attempts' files, then heads of this attempt's, until `incoming`
  // more bytes fit under max_job_bytes_ (mu_ held).
  Status MakeRoom(int64_t job_id, int attempt, int64_t incoming);

  const std::string root_;
  const int64_t max_bytes_;
  const int64_t max_job_bytes_;
  std::mutex mu_;
};

}  // namespace ringmaster::server
