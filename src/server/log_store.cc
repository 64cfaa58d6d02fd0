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
#include "common/units.h"

namespace ringmaster::server {
namespace fs = std::filesystem;
namespace {

// A capped file's sidecar holds the bytes sent so far (its logical size).
std::string CutPath(const std::string& path) { return path + ".cut"; }

int64_t ReadCut(const std::string& path) {
  auto text = ReadFile(CutPath(path));
  if (!text.ok()) return -1;
  try {
    return std::stoll(*text);
  } catch (...) {
    return -1;
  }
}

// The error of a write that found no room, as the agent is told it.
Status Refused(const Status& st) {
  return st.code() == StatusCode::kInsufficientStorage ? ServerDiskFull("appending output: " + st.message()) : st;
}

}  // namespace

LogStore::LogStore(std::string root, int64_t max_bytes) : root_(std::move(root)), max_bytes_(max_bytes) {}

std::string LogStore::JobDir(int64_t job_id) const { return fmt::format("{}/{}", root_, job_id); }

StatusOr<int64_t> LogStore::Append(int64_t job_id, int rank, int attempt, int64_t offset, std::string_view data) {
  std::lock_guard<std::mutex> l(mu_);
  RM_RETURN_IF_ERROR(Refused(MakeDirs(JobDir(job_id), 0700)));
  const std::string path = fmt::format("{}/rank-{}.attempt-{}.log", JobDir(job_id), rank, attempt);
  const int64_t cut = ReadCut(path);
  if (cut >= 0) {  // already capped: only count what is sent
    if (offset == cut && !data.empty()) {
      RM_RETURN_IF_ERROR(Refused(WriteFileAtomic(CutPath(path), std::to_string(cut + static_cast<int64_t>(data.size())), 0600)));
      return cut + static_cast<int64_t>(data.size());
    }
    return cut;
  }
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return Refused(FileError("open " + path, errno));
  struct stat st {};
  fstat(fd, &st);
  const int64_t size = st.st_size;
  if (offset != size || data.empty()) {
    close(fd);
    return size;
  }
  // A write that fails (a full disk) is taken back whole: the file keeps its
  // size, and the agent's retry from the same offset lands exactly once.
  auto undo = [&](const Status& w) {
    if (ftruncate(fd, size) != 0) {
      return Internal(fmt::format("{} (and truncating {} back to {} bytes: {})", w.message(), path, size,
                                  std::strerror(errno)));
    }
    return Refused(w);
  };
  if (max_bytes_ <= 0 || size + static_cast<int64_t>(data.size()) <= max_bytes_) {
    Status w = WriteAll(fd, data.data(), data.size(), path);
    if (!w.ok()) w = undo(w);
    close(fd);
    RM_RETURN_IF_ERROR(w);
    return size + static_cast<int64_t>(data.size());
  }
  // Crossing the cap: keep what fits (up to its last full line if there is
  // one), then the marker, then count the rest without keeping it.
  size_t keep = static_cast<size_t>(std::max<int64_t>(0, max_bytes_ - size));
  const size_t nl = data.rfind('\n', keep > 0 ? keep - 1 : 0);
  if (keep > 0 && nl != std::string::npos && nl + 1 >= keep / 2) keep = nl + 1;
  std::string marker = fmt::format("{}[ringmaster: log cut at {}; later output dropped]\n",
                                   keep > 0 && data[keep - 1] != '\n' ? "\n" : "", FormatBytes(max_bytes_));
  const int64_t sent = size + static_cast<int64_t>(data.size());
  Status w = WriteAll(fd, data.data(), keep, path);
  if (w.ok()) w = WriteAll(fd, marker.data(), marker.size(), path);
  // Without its sidecar the file is not capped: it goes back too.
  if (w.ok()) w = WriteFileAtomic(CutPath(path), std::to_string(sent), 0600);
  if (!w.ok()) w = undo(w);
  close(fd);
  RM_RETURN_IF_ERROR(w);
  return sent;
}

std::vector<LogFile> LogStore::List(int64_t job_id) const {
  std::vector<LogFile> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(JobDir(job_id), ec)) {
    LogFile f;
    int used = 0;
    const std::string name = e.path().filename().string();
    if (sscanf(name.c_str(), "rank-%d.attempt-%d.log%n", &f.rank, &f.attempt, &used) == 2 &&
        used == static_cast<int>(name.size())) {
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
