#include "server/log_archiver.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/thread_name.h"

namespace ringmaster::server {

void LogArchiver::Start() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = false;
  }
  store::JobFilter newest;
  newest.limit = 1000;
  auto recent = api_->store->ListJobs(newest);
  if (recent.ok()) {
    for (const auto& j : recent->jobs) {
      if (store::IsTerminal(j.state)) Enqueue(j.id);
    }
  }
  thread_ = std::thread([this] {
    NameThisThread("server-logs");
    Loop();
  });
}

void LogArchiver::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LogArchiver::Enqueue(int64_t job_id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back({false, job_id});
  }
  cv_.notify_one();
}

void LogArchiver::EnqueuePrune(int64_t job_id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    // One pending prune per job is enough: it looks at the store when it runs.
    for (const auto& q : queue_) {
      if (q.first && q.second == job_id) return;
    }
    queue_.push_back({true, job_id});
  }
  cv_.notify_one();
}

Status LogArchiver::PruneCheckpoints(int64_t job_id) {
  auto job = api_->store->GetJob(job_id);
  if (!job.ok()) return job.status().code() == StatusCode::kNotFound ? Status::Ok() : job.status();
  RM_ASSIGN_OR_RETURN(protocol::JobSpec spec, protocol::JobSpecFromJson(job->spec_json));
  if (spec.keep_checkpoints <= 0) return Status::Ok();
  const std::string prefix = fmt::format("jobs/{}/checkpoints/", job_id);
  RM_ASSIGN_OR_RETURN(auto latest_file, ReadLatestCheckpoint(*api_->files, job_id));
  const std::string latest = latest_file ? latest_file->name : "";
  // Each directory: its files and its newest time.
  std::map<std::string, std::pair<int64_t, std::vector<files::ObjectInfo>>> dirs;
  std::string after;
  while (true) {
    RM_ASSIGN_OR_RETURN(files::ListResult page, api_->files->List(prefix, after, 1000));
    for (auto& o : page.objects) {
      const std::string rest = o.key.substr(prefix.size());
      const size_t slash = rest.find('/');
      if (slash == std::string::npos) continue;  // latest, or a file of the user's
      auto& d = dirs[rest.substr(0, slash)];
      d.first = std::max(d.first, o.mtime_ms);
      d.second.push_back(std::move(o));
    }
    if (!page.next_after) break;
    after = *page.next_after;
  }
  if (dirs.size() <= static_cast<size_t>(spec.keep_checkpoints)) return Status::Ok();
  std::vector<std::pair<int64_t, std::string>> by_time;
  for (const auto& [name, d] : dirs) by_time.push_back({d.first, name});
  std::sort(by_time.rbegin(), by_time.rend());  // newest first
  std::lock_guard<std::mutex> lock(api_->FileUsageLock(job->user_id));
  int64_t freed = 0;
  size_t removed = 0;
  for (size_t i = static_cast<size_t>(spec.keep_checkpoints); i < by_time.size(); ++i) {
    if (by_time[i].second == latest) continue;  // what a restart resumes from stays, however old
    for (const auto& o : dirs[by_time[i].second].second) {
      Status st = api_->files->Delete(o.key);
      if (st.ok()) freed += Charge(*api_, o.key, o.size);
      if (!st.ok() && st.code() != StatusCode::kNotFound) {
        (void)api_->store->AddUserFileBytes(job->user_id, -freed);
        return st;
      }
    }
    ++removed;
  }
  if (removed) spdlog::info("files: job {}: {} old checkpoints deleted ({} bytes), {} kept", job_id, removed, freed, spec.keep_checkpoints);
  return freed ? api_->store->AddUserFileBytes(job->user_id, -freed) : Status::Ok();
}

void LogArchiver::Loop() {
  while (true) {
    std::pair<bool, int64_t> item;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      item = queue_.front();
      queue_.pop_front();
    }
    const auto [prune, id] = item;
    if (Status st = prune ? PruneCheckpoints(id) : Archive(id); !st.ok()) {
      spdlog::warn("files: {} of job {}: {}", prune ? "pruning the checkpoints" : "archiving the logs", id, st.ToString());
    }
  }
}

Status LogArchiver::Archive(int64_t job_id) {
  auto job = api_->store->GetJob(job_id);
  if (!job.ok()) return job.status().code() == StatusCode::kNotFound ? Status::Ok() : job.status();
  if (!store::IsTerminal(job->state)) return Status::Ok();
  for (const LogFile& f : api_->logs->List(job_id)) {
    RM_RETURN_IF_ERROR(ArchiveFile(*job, f.path, fmt::format("jobs/{}/logs/rank-{}.attempt-{}.log", job_id, f.rank, f.attempt)));
  }
  for (const LogFile& f : api_->metrics->List(job_id)) {
    RM_RETURN_IF_ERROR(ArchiveFile(*job, f.path,
                                   fmt::format("jobs/{}/logs/rank-{}.attempt-{}.metrics.jsonl", job_id, f.rank, f.attempt)));
  }
  // A task that printed nothing has no log archived: nothing to download,
  // nothing stored or charged (a sweep of thousands of quiet jobs leaves no
  // empty objects behind); `ringmaster logs` shows it empty all the same.
  // The archive is now the one copy of the logs (`ringmaster logs` reads it):
  // the server's goes, so no log is kept, or counted, twice.
  api_->logs->DeleteJob(job_id);
  return Status::Ok();
}

Status LogArchiver::ArchiveFile(const store::Job& job, const std::string& path, const std::string& key) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return errno == ENOENT ? Status::Ok() : Internal(fmt::format("{}: {}", path, std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Internal(fmt::format("{}: {}", path, std::strerror(errno)));
  if (st.st_size == 0) return Status::Ok();  // nothing written: nothing archived
  if (auto head = api_->files->Head(key); head.ok() && head->size == static_cast<uint64_t>(st.st_size)) {
    return Status::Ok();  // archived before
  }
  // What the owner's quota has room for (what this key holds already counts
  // as room): past it the log keeps its tail, behind a marker line, so a
  // user's logs cannot outgrow their quota however many jobs they run.
  uint64_t done = 0;
  std::string marker;
  RM_ASSIGN_OR_RETURN(store::User owner, api_->store->GetUser(job.user_id));
  if (const int64_t quota = Quota(*api_, owner); quota > 0) {
    int64_t room = quota - owner.file_bytes;
    if (auto head = api_->files->Head(key); head.ok()) room += Charge(*api_, key, head->size);
    const int64_t fits = std::max<int64_t>(0, room - Charge(*api_, key, 0) - 128);
    if (st.st_size > fits) {
      done = static_cast<uint64_t>(st.st_size - fits);
      marker = fmt::format("[ringmaster: the first {} bytes of this log are not kept: {}'s file quota is full]\n",
                           done, owner.name);
    }
  }
  RM_ASSIGN_OR_RETURN(auto writer, api_->files->Create(key, {}));
  if (!marker.empty()) RM_RETURN_IF_ERROR(writer->Write(marker));
  std::string buf(256 << 10, '\0');
  while (done < static_cast<uint64_t>(st.st_size)) {
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Internal(fmt::format("{}: {}", path, std::strerror(errno)));
    if (n == 0) break;
    RM_RETURN_IF_ERROR(writer->Write(std::string_view(buf.data(), static_cast<size_t>(n))));
    done += static_cast<uint64_t>(n);
  }
  // The size it replaces and the usage update under the owner's lock, as
  // every upload does; and not for a job deleted meanwhile (its files are gone).
  std::lock_guard<std::mutex> lock(api_->FileUsageLock(job.user_id));
  if (!api_->store->GetJob(job.id).ok()) return Status::Ok();
  int64_t old_charge = 0;
  if (auto head = api_->files->Head(key); head.ok()) {
    old_charge = Charge(*api_, key, head->size);
  } else if (head.status().code() != StatusCode::kNotFound) {
    return head.status();
  }
  RM_ASSIGN_OR_RETURN(files::ObjectInfo info, writer->Commit());
  return api_->store->AddUserFileBytes(job.user_id, Charge(*api_, key, info.size) - old_charge);
}

}  // namespace ringmaster::server
