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
// A file that lost its head keeps taking output; its sidecar holds the bytes
// sent so far, which its size no longer says.
std::string SentPath(const std::string& path) { return path + ".sent"; }

int64_t ReadNumber(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return -1;
  try {
    return std::stoll(*text);
  } catch (...) {
    return -1;
  }
}

int64_t ReadCut(const std::string& path) { return ReadNumber(CutPath(path)); }

int64_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : 0;
}

// The bytes sent to `path` so far: its sidecar's count, else its size.
int64_t Sent(const std::string& path) {
  if (int64_t cut = ReadCut(path); cut >= 0) return cut;
  if (int64_t sent = ReadNumber(SentPath(path)); sent >= 0) return sent;
  return FileSize(path);
}

// The error of a write that found no room, as the agent is told it.
Status Refused(const Status& st) {
  return st.code() == StatusCode::kInsufficientStorage ? ServerDiskFull("appending output: " + st.message()) : st;
}

}  // namespace

LogStore::LogStore(std::string root, int64_t max_bytes, int64_t max_job_bytes)
    : root_(std::move(root)), max_bytes_(max_bytes), max_job_bytes_(max_job_bytes) {}

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
  // `sent`: the bytes sent so far; `size`: what the file holds of them.
  const int64_t sent_side = ReadNumber(SentPath(path));
  if (offset != (sent_side >= 0 ? sent_side : FileSize(path)) || data.empty()) {
    return sent_side >= 0 ? sent_side : FileSize(path);
  }
  if (max_job_bytes_ > 0) RM_RETURN_IF_ERROR(Refused(MakeRoom(job_id, attempt, static_cast<int64_t>(data.size()))));
  const int64_t sent_before = Sent(path);  // MakeRoom may have cut this file's head
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return Refused(FileError("open " + path, errno));
  struct stat st {};
  fstat(fd, &st);
  const int64_t size = st.st_size;
  const bool has_sent = ReadNumber(SentPath(path)) >= 0;
  // Past the write, a file that lost its head records what was sent.
  auto note_sent = [&](int64_t sent) {
    return has_sent ? WriteFileAtomic(SentPath(path), std::to_string(sent), 0600) : Status::Ok();
  };
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
    if (w.ok()) w = note_sent(sent_before + static_cast<int64_t>(data.size()));
    if (!w.ok()) w = undo(w);
    close(fd);
    RM_RETURN_IF_ERROR(w);
    return sent_before + static_cast<int64_t>(data.size());
  }
  // Crossing the cap: keep what fits (up to its last full line if there is
  // one), then the marker, then count the rest without keeping it.
  size_t keep = static_cast<size_t>(std::max<int64_t>(0, max_bytes_ - size));
  const size_t nl = data.rfind('\n', keep > 0 ? keep - 1 : 0);
  if (keep > 0 && nl != std::string::npos && nl + 1 >= keep / 2) keep = nl + 1;
  std::string marker = fmt::format("{}[ringmaster: log cut at {}; later output dropped]\n",
                                   keep > 0 && data[keep - 1] != '\n' ? "\n" : "", FormatBytes(max_bytes_));
  const int64_t sent = sent_before + static_cast<int64_t>(data.size());
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

namespace {

// Replaces `path`'s bytes before `from` with `marker` (a new file renamed
// over it). The file then records what was sent in a sidecar: `cut` when it
// takes no more output (a dropped attempt), else `.sent`.
Status CutHead(const std::string& path, int64_t from, const std::string& marker, bool cut) {
  const int64_t sent = Sent(path);
  std::string tail;
  if (from < FileSize(path)) {
    RM_ASSIGN_OR_RETURN(std::string all, ReadFile(path));
    // Start at a line: the partial one before it goes too.
    size_t start = static_cast<size_t>(from);
    if (start > 0 && all[start - 1] != '\n') {
      const size_t nl = all.find('\n', start);
      start = nl == std::string::npos ? all.size() : nl + 1;
    }
    tail = all.substr(start);
  }
  RM_RETURN_IF_ERROR(WriteFileAtomic(path, marker + tail, 0600));
  if (cut) return WriteFileAtomic(CutPath(path), std::to_string(sent), 0600);
  return WriteFileAtomic(SentPath(path), std::to_string(sent), 0600);
}

}  // namespace

Status LogStore::MakeRoom(int64_t job_id, int attempt, int64_t incoming) {
  std::vector<LogFile> files = List(job_id);
  int64_t total = 0;
  for (const LogFile& f : files) total += FileSize(f.path);
  if (total + incoming <= max_job_bytes_) return Status::Ok();
  // Older attempts first, oldest first: a restart's output is what matters.
  std::stable_sort(files.begin(), files.end(), [](const LogFile& a, const LogFile& b) { return a.attempt < b.attempt; });
  for (const LogFile& f : files) {
    if (f.attempt >= attempt || total + incoming <= max_job_bytes_) break;
    const int64_t size = FileSize(f.path);
    const std::string marker = fmt::format("[ringmaster: attempt {}'s log ({}) dropped: the job's logs are capped at {}]\n",
                                           f.attempt, FormatBytes(Sent(f.path)), FormatBytes(max_job_bytes_));
    if (size <= static_cast<int64_t>(marker.size())) continue;  // dropped before
    RM_RETURN_IF_ERROR(CutHead(f.path, size, marker, /*cut=*/true));
    total -= size - static_cast<int64_t>(marker.size());
  }
  // Then the heads of this attempt's (and newer) files, largest first, with
  // an eighth of the cap to spare so that not every append copies a file.
  while (total + incoming > max_job_bytes_) {
    const LogFile* largest = nullptr;
    for (const LogFile& f : files) {
      if (f.attempt >= attempt && (!largest || FileSize(f.path) > FileSize(largest->path))) largest = &f;
    }
    if (!largest) break;
    const int64_t size = FileSize(largest->path);
    const int64_t excess = total + incoming - max_job_bytes_ + max_job_bytes_ / 8;
    const int64_t from = std::min(size, excess + 256);  // room for the marker
    const std::string marker = fmt::format("[ringmaster: earlier output cut: the job's logs are capped at {}]\n",
                                           FormatBytes(max_job_bytes_));
    if (size <= static_cast<int64_t>(marker.size()) * 2) break;  // nothing left worth cutting
    RM_RETURN_IF_ERROR(CutHead(largest->path, from, marker, /*cut=*/false));
    total += FileSize(largest->path) - size;
  }
  return Status::Ok();
}

void LogStore::DeleteJob(int64_t job_id) {
  std::lock_guard<std::mutex> l(mu_);
  std::error_code ec;
  fs::remove_all(JobDir(job_id), ec);
}

}  // namespace ringmaster::server
