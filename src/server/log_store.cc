#include "server/log_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "common/files.h"

namespace ringmaster::server {
namespace fs = std::filesystem;

LogStore::LogStore(std::string root) : root_(std::move(root)) {}

std::string LogStore::JobDir(int64_t job_id) const { return fmt::format("{}/{}", root_, job_id); }

StatusOr<int64_t> LogStore::Append(int64_t job_id, int rank, int attempt, int64_t offset,
                                   const std::string& data) {
  std::lock_guard<std::mutex> l(mu_);
  RM_RETURN_IF_ERROR(MakeDirs(JobDir(job_id), 0700));
  std::string path = fmt::format("{}/rank-{}.attempt-{}.log", JobDir(job_id), rank, attempt);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Internal(fmt::format("open {}: {}", path, std::strerror(errno)));
  struct stat st;
  fstat(fd, &st);
  int64_t size = st.st_size;
  if (offset == size && !data.empty()) {
    ssize_t n = pwrite(fd, data.data(), data.size(), size);
    if (n > 0) size += n;
  }
  close(fd);
  return size;
}

std::vector<LogFile> LogStore::List(int64_t job_id) const {
  std::vector<LogFile> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(JobDir(job_id), ec)) {
    LogFile f;
    if (sscanf(e.path().filename().c_str(), "rank-%d.attempt-%d.log", &f.rank, &f.attempt) == 2) {
      f.path = e.path().string();
      out.push_back(f);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const LogFile& a, const LogFile& b) { return std::tie(a.rank, a.attempt) < std::tie(b.rank, b.attempt); });
  return out;
}

void LogStore::DeleteJob(int64_t job_id) {
  std::lock_guard<std::mutex> l(mu_);
  std::error_code ec;
  fs::remove_all(JobDir(job_id), ec);
}

}  // namespace ringmaster::server
